"""The console's plumbing: its router, what it keeps per app, and page rendering.

Every page is rendered on the server (Jinja2); the parts that change are also
served alone to the page's own refresh script (``x-console-fragment: 1``), so
an open page costs one small request every ``REFRESH_S`` and no sampling of
its own: the numbers come from the sampler's rings.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from api.auth import Authenticator
from api.console import browse
from api.console.access import COOKIE, Viewer, viewer
from api.console.charts import Window, duration, human, rate_text, series_of
from api.console.sampler import SAMPLE_INTERVAL_S, WINDOW_S, Sampler, SubscriptionPoint, rate
from lakepubsub import Engine, errors
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.iam import Resource

ROOT = "/console"
# How often an open page fetches its changing part again.
REFRESH_S = 5.0
_TEMPLATES = Path(__file__).parent / "templates"

router = APIRouter(prefix=ROOT, include_in_schema=False)
# A page: its template and their context.
Page = tuple[str, dict[str, Any]]
Build = Callable[[Viewer], Page]


@dataclass
class Console:
    """What the console keeps per app: templates, the sampler, open topic handles."""

    authenticator: Authenticator
    interval_s: float
    templates: Jinja2Templates = field(default_factory=lambda: Jinja2Templates(_TEMPLATES))
    handles: browse.Handles = field(default_factory=browse.Handles)
    _sampler: Sampler | None = None

    def sampler(self, engine: Engine) -> Sampler:
        if self._sampler is None or self._sampler.engine is not engine:
            self._sampler = Sampler(engine, interval_s=self.interval_s)
        return self._sampler

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()


def install(app: FastAPI) -> None:
    """Serve the console at ``/console``; it samples the lake while it is looked at."""
    interval_s = app.state.door_settings.console_sample_s or SAMPLE_INTERVAL_S
    console = Console(Authenticator(app.state.auth_settings), interval_s)
    app.state.console = console
    app.include_router(router)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[Any]:
        async with inner(a) as state:
            try:
                yield state
            finally:  # before the engine closes
                await run_in_threadpool(console.stop)

    app.router.lifespan_context = lifespan


# -- plumbing ---------------------------------------------------------------------------------


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def error_page(request: Request, status: int, heading: str, message: str) -> Response:
    return console_of(request).templates.TemplateResponse(
        request,
        "error.html",
        common(request, None, "", title=heading, heading=heading, message=message),
        status_code=status,
    )


def common(request: Request, v: Viewer | None, section: str, **ctx: Any) -> dict[str, Any]:
    return {
        "root": ROOT,
        "section": section,
        "viewer_name": v.name if v is not None else "",
        "logged_in": COOKIE in request.cookies,
        "refresh_ms": int(REFRESH_S * 1000),
        "live": False,
        "flash": request.query_params.get("done", ""),  # what an action did
        **ctx,
    }


async def page(request: Request, section: str, build: Build) -> Response:
    console = console_of(request)
    try:
        v = await viewer(request, console.authenticator)
    except errors.Unauthenticated:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{ROOT}/login?{urlencode({'next': target})}", status_code=303)
    console.sampler(engine_of(request)).touch()
    try:
        template, ctx = await run_in_threadpool(build, v)
    except errors.NotFound as exc:
        return error_page(request, 404, "Not found", str(exc))
    except errors.PermissionDenied as exc:
        return error_page(request, 403, "Not allowed", str(exc))
    except errors.InvalidArgument as exc:
        return error_page(request, 400, "Invalid request", str(exc))
    if ctx.get("live") and request.headers.get("x-console-fragment") == "1":
        template = template.replace(".html", "_live.html")
    return console.templates.TemplateResponse(request, template, common(request, v, section, **ctx))


def live_list(
    template: str, title: str, rows: list[dict[str, Any]], q: str, sampler: Sampler
) -> Page:
    """A list page that refreshes itself (topics, subscriptions): its rows, the search
    and how often the sampler looks."""
    return template, {
        "title": title,
        "rows": rows,
        "q": q,
        "live": True,
        "interval": f"{sampler.interval_s:g}",
        "sampled": sampler.samples > 0,
    }


def matches(q: str, *texts: str) -> bool:
    q = q.strip().lower()
    return not q or any(q in t.lower() for t in texts)


def topic_resource(project: str, topic: str) -> Resource:
    return Resource(cat.TOPIC, project, topic)


def sub_resource(project: str, subscription: str) -> Resource:
    return Resource(cat.SUBSCRIPTION, project, subscription)


def backlog_cells(points: list[SubscriptionPoint]) -> dict[str, str]:
    """A subscription's backlog as last sampled (``-`` before the first sample) and its
    delivery rate, as the lists and its page show them."""
    last = points[-1] if points else None
    return {
        "backlog": f"{last.backlog:,}" if last else "-",
        "backlog_bytes": human(last.backlog_bytes, "B") if last else "-",
        "oldest": duration(last.oldest_unacked_s) if last else "-",
        "rate": rate_text(rate(series_of(points, "deliveries"))),
        "leases_out": f"{last.leases_out:,}" if last else "-",
    }


# How Pub/Sub words a missing resource of each kind a page shows.
_MISSING = {cat.TOPIC: "Topic not found", cat.SUBSCRIPTION: "Subscription does not exist"}


def entry_of(v: Viewer, kind: str, project: str, name: str) -> cat.Entry:
    """The catalog entry of the resource a page shows; ``NotFound`` without one."""
    entry = v.view.get(kind, project, name)
    if entry is None:
        raise errors.NotFound(f"{_MISSING[kind]}: projects/{project}/{kind}s/{name}")
    return entry


# A resource page, from the viewer, the resource's catalog entry, the sampler and
# what the charts show.
EntryBuild = Callable[[Viewer, cat.Entry, Sampler, Window], Page]


def resource_page(kind: str) -> Callable[[EntryBuild], EntryBuild]:
    """Serves the function it decorates as the live page of one resource of ``kind``
    (``/topics/{project}/{name}``), in its list's section: built once the viewer may get
    the resource, and it exists."""

    def register(build: EntryBuild) -> EntryBuild:
        async def endpoint(request: Request, project: str, name: str) -> Response:
            sampler, window_s = sampled(request)

            def built(v: Viewer) -> Page:
                v.require(f"pubsub.{kind}s.get", Resource(kind, project, name))
                entry = entry_of(v, kind, project, name)
                return build(v, entry, sampler, Window(time.time(), window_s))

            return await page(request, f"{kind}s", built)

        router.add_api_route(f"/{kind}s/{{project}}/{{name}}", endpoint, methods=["GET"], name=kind)
        return build

    return register


def sampled(request: Request) -> tuple[Sampler, float]:
    """A live page's sampler (the console's, of the app's engine) and its charts' window."""
    return console_of(request).sampler(engine_of(request)), window_of(request)


def window_of(request: Request) -> float:
    """The charts' window: ``?window=<minutes>``, 1 to 60 (the sampler keeps an hour)."""
    try:
        minutes = float(request.query_params.get("window", "") or WINDOW_S / 60)
    except ValueError:
        minutes = WINDOW_S / 60
    return min(WINDOW_S, max(60.0, minutes * 60))


def parse_int(text: str, name: str) -> int | None:
    if not text.strip():
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise errors.InvalidArgument(f"{name} must be an offset") from exc


def parse_time_us(text: str, name: str) -> int | None:
    """``2026-11-27T19:05`` (a browser's datetime-local), read as UTC."""
    if not text.strip():
        return None
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError as exc:
        raise errors.InvalidArgument(f"{name} must be a time (YYYY-MM-DDTHH:MM:SS)") from exc
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1_000_000)
