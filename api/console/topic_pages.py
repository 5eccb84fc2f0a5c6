"""Console pages of topics: the list, one topic, and its message browser."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from fastapi import Request
from starlette.responses import RedirectResponse, Response

from api.console import browse
from api.console.access import BROWSE, Viewer
from api.console.charts import Window, duration, human, rate_text, series_of, when
from api.console.sampler import Sampler, per_second, rate
from api.console.web import (
    ROOT,
    Page,
    backlog_cells,
    console_of,
    engine_of,
    entry_of,
    live_list,
    matches,
    page,
    parse_int,
    parse_time_us,
    resource_page,
    router,
    sampled,
    sub_resource,
    topic_resource,
)
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.directory import topic_of
from lakepubsub.resources.iam import Resource


@router.get("")
@router.get("/")
def home() -> Response:
    return RedirectResponse(f"{ROOT}/topics", status_code=303)


@router.get("/topics")
async def topics(request: Request, q: str = "") -> Response:
    sampler, window_s = sampled(request)

    def build(v: Viewer) -> Page:
        window = Window(time.time(), window_s)
        subscriptions: dict[str, int] = {}
        for e in v.view.of_kind(cat.SUBSCRIPTION):
            subscriptions[e.topic_uid or ""] = subscriptions.get(e.topic_uid or "", 0) + 1
        rows = []
        for e in v.view.of_kind(cat.TOPIC):
            if not matches(q, f"{e.project}/{e.name}"):
                continue
            if not v.may("pubsub.topics.get", topic_resource(e.project, e.name)):
                continue
            series = sampler.series(e.uid)
            heads = series_of(sampler.points(e.uid), "head")
            rows.append(
                {
                    "project": e.project,
                    "id": e.name,
                    "head": f"{int(heads[-1][1]):,}" if heads else "-",
                    "rate": rate_text(rate(heads)),
                    "subscriptions": subscriptions.get(e.uid, 0),
                    "size": human(series.size.bytes, "B") if series and series.size else "-",
                    "spark": window.spark(per_second(heads), label="publish rate"),
                }
            )
        return live_list("topics.html", "Topics", rows, q, sampler)

    return await page(request, "topics", build)


@resource_page(cat.TOPIC)
def topic(v: Viewer, entry: cat.Entry, sampler: Sampler, window: Window) -> Page:
    t = topic_of(entry)
    heads = series_of(sampler.points(entry.uid), "head")
    series = sampler.series(entry.uid)
    subs = []
    for e in v.view.attached_to(entry.uid):
        if e.kind != cat.SUBSCRIPTION:
            continue
        if not v.may("pubsub.subscriptions.get", sub_resource(e.project, e.name)):
            continue
        cells = backlog_cells(sampler.subscription_points(e.uid))
        subs.append({"project": e.project, "id": e.name, **cells})
    settings = t.schema_settings
    return "topic.html", {
        "title": f"Topic {entry.project}/{entry.name}",
        "live": True,
        "may_browse": v.may(BROWSE, Resource.of_project(entry.project)),
        "t": {
            "name": t.name.path,
            "project": entry.project,
            "id": entry.name,
            "retention": "forever" if t.keeps_forever else duration(t.history_s),
            "schema": f"{settings.schema} ({settings.encoding})" if settings else "",
            "labels": ", ".join(f"{k}={val}" for k, val in sorted(t.labels.items())),
            "head": f"{int(heads[-1][1]):,}" if heads else "-",
            "rate": rate_text(rate(heads)),
            "size": human(series.size.bytes, "B") if series and series.size else "-",
            "rate_chart": window.line(per_second(heads), title="Publish rate (msgs/s)"),
            "head_chart": window.line(heads, title="Messages published"),
            "subscriptions": subs,
        },
    }


@router.get("/topics/{project}/{topic}/messages")
async def messages(request: Request, project: str, topic: str) -> Response:
    engine = engine_of(request)
    console = console_of(request)
    params = request.query_params
    form = {
        "start": params.get("start", ""),
        "end": params.get("end", ""),
        "since": params.get("since", ""),
        "until": params.get("until", ""),
        "attr": params.get("attr", ""),
        "order": params.get("order", "newest"),
        "as_": params.get("as", "text"),
    }

    def build(v: Viewer) -> Page:
        v.require("pubsub.topics.get", topic_resource(project, topic))
        v.require(BROWSE, Resource.of_project(project))
        entry = entry_of(v, cat.TOPIC, project, topic)
        query = browse.Query(
            start=parse_int(form["start"], "start"),
            end=parse_int(form["end"], "end"),
            since_us=parse_time_us(form["since"], "since"),
            until_us=parse_time_us(form["until"], "until"),
            attribute=browse.parse_attribute(form["attr"]),
            newest_first=form["order"] != "oldest",
        )
        found = browse.read(console.handles, engine, entry.uid, query)
        shown = []
        for m in found.messages:
            if form["as_"] == "json":
                data = browse.as_json(m.data) or "(not JSON) " + browse.as_text(m.data)
            elif form["as_"] == "hex":
                data = browse.as_hex(m.data)
            else:
                data = browse.as_text(m.data)
            shown.append(
                {
                    "offset": m.offset,
                    "published": when(m.publish_time_us),
                    "ordering_key": m.ordering_key,
                    "attributes": sorted(m.attributes.items()),
                    "size": m.size,
                    "data": data,
                }
            )
        next_url = ""
        if found.next_start is not None:
            more = {k: val for k, val in params.items() if k not in ("start", "end")}
            more["start" if not query.newest_first or query.since_us is not None else "end"] = str(
                found.next_start + (0 if not query.newest_first else 1)
            )
            next_url = f"?{urlencode(more)}"
        return "messages.html", {
            "title": f"Messages of {project}/{topic}",
            "topic": f"{project}/{topic}",
            "page": found,
            "messages": shown,
            "form": form,
            "next_url": next_url,
        }

    return await page(request, "topics", build)
