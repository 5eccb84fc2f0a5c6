"""Console pages of schemas and of the lake: its tables, the jobs' last runs, and
this process's S3 requests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from fastapi import Request
from starlette.responses import Response

from api.console.access import Viewer
from api.console.charts import duration, human, line, series_of, when
from api.console.maintenance import JOBS, JobCommit, Seen, kept_from
from api.console.sampler import S3, Sampler, Series, per_second, rate
from api.console.tables import Footprint
from api.console.web import Page, engine_of, page, router, sampled, sub_resource, topic_resource
from lakepubsub import errors
from lakepubsub._lake.meter import METER, SECONDS_PER_MONTH, USD_PER_1000
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.iam import Resource
from lakepubsub.resources.names import SchemaName, SubscriptionName, TopicName

_US_PER_MS = 1000


@router.get("/schemas")
async def schema_list(request: Request) -> Response:
    engine = engine_of(request)

    def build(v: Viewer) -> Page:
        rows = []
        for e in v.view.of_kind("schema"):
            if not v.may("pubsub.schemas.get", Resource("schema", e.project, e.name)):
                continue
            revisions, _ = engine.schemas.list_revisions(SchemaName(e.project, e.name))
            rows.append(
                {
                    "project": e.project,
                    "id": e.name,
                    "type": revisions[0].type if revisions else "",
                    "definition": revisions[0].definition if revisions else "",
                    "revisions": [
                        {"id": r.revision_id, "created": when(r.revision_create_time_us)}
                        for r in revisions
                    ],
                }
            )
        return "schemas.html", {"title": "Schemas", "schemas": rows}

    return await page(request, "schemas", build)


@router.get("/lake")
async def lake(request: Request) -> Response:
    engine = engine_of(request)
    sampler, window = sampled(request)

    def build(v: Viewer) -> Page:
        tables = []
        for name in ("catalog", "truncations"):
            series = sampler.series(name)
            if series is not None and series.size is not None:
                tables.append(_table_row(name, "the lake", series.size))
        for e, series, size in _sized(v, sampler, cat.TOPIC):
            row = _table_row(f"topics/{e.uid}/messages", f"topic {e.project}/{e.name}", size)
            tables.append({**row, **_job_commits(series.jobs)})
        for e, _, size in _sized(v, sampler, cat.SUBSCRIPTION):
            path = f"subscriptions/{e.uid}/leases"
            tables.append(_table_row(path, f"subscription {e.project}/{e.name}", size))
        return "lake.html", {
            "title": "Lake",
            "live": True,
            "root_uri": engine.lake.root,
            "tables": tables,
            "total_files": f"{sum(t['files_n'] for t in tables):,}",
            "total_bytes": human(sum(t["bytes_n"] for t in tables), "B"),
            "interval": f"{sampler.interval_s:g}",
            "sample_ms": f"{sampler.last_sample_s * 1000:.0f}",
            "sample_cpu_ms": f"{sampler.last_sample_cpu_s * 1000:.0f}",
            "s3": _s3(sampler, window) if engine.lake.is_s3 else None,
            "jobs": [_job_run(v, job, sampler.job_runs.get(job)) for job in JOBS],
        }

    return await page(request, "lake", build)


# The permission that shows a topic's or a subscription's table, and its resource.
_READ = {
    cat.TOPIC: ("pubsub.topics.get", topic_resource),
    cat.SUBSCRIPTION: ("pubsub.subscriptions.get", sub_resource),
}


def _sized(v: Viewer, sampler: Sampler, kind: str) -> Iterator[tuple[cat.Entry, Series, Footprint]]:
    """The entries of ``kind`` whose table has been measured and that ``v`` may see."""
    permission, resource = _READ[kind]
    for e in v.view.of_kind(kind):
        series = sampler.series(e.uid)
        if series is None or series.size is None:
            continue
        if v.may(permission, resource(e.project, e.name)):
            yield e, series, series.size


def _table_row(path: str, of: str, size: Footprint) -> dict[str, Any]:
    return {
        "path": path,
        "of": of,
        "version": size.version,
        "files": f"{size.files:,}",
        "bytes": human(size.bytes, "B"),
        "files_n": size.files,
        "bytes_n": size.bytes,
        "compaction": "",
        "delete": "",
    }


def _job_commits(seen: Seen | None) -> dict[str, str]:
    """A messages table's last compaction and last delete of old messages, as found."""
    if seen is None:
        return {"compaction": "not read yet", "delete": ""}

    def at(commit: JobCommit) -> str:
        return f"{when(commit.time_ms * _US_PER_MS)} (version {commit.version})"

    if seen.compaction is not None:
        c = seen.compaction
        compaction = f"{c.files_removed:,} files into {c.files_added:,}, {at(c)}"
    elif seen.complete:
        n = seen.looked_back
        compaction = f"none in the last {n:,} commit{'' if n == 1 else 's'}"
    else:
        compaction = f"looking back ({seen.looked_back:,} commits read)"
    delete = ""
    if seen.delete is not None:
        bound = kept_from(seen.delete)
        kept = f"kept offset {bound:,} on" if bound is not None else "deleted"
        delete = f"{kept}, {at(seen.delete)}"
    elif seen.complete:
        delete = "none"
    return {"compaction": compaction, "delete": delete}


def _s3(sampler: Sampler, window: float) -> dict[str, Any]:
    """This process's S3 requests through boto3: now, since it started, and per month."""
    reading = METER.reading()
    points = sampler.points(S3)
    requests = series_of(points, "requests")
    per_minute = rate(requests)
    # The month at the rate over the whole window sampled (up to the last hour).
    monthly = rate(series_of(points, "cost_usd"), window_s=window)
    return {
        "since": when(int(reading.since * 1e6)),
        "uptime": duration(time.time() - reading.since),
        "total": f"{reading.total:,}",
        "kinds": [
            (kind.upper(), f"{n:,}", f"${USD_PER_1000[kind]:g}")
            for kind, n in reading.counts.items()
            if n
        ],
        "cost": f"${reading.cost_usd:,.4f}",
        "per_minute": "-" if per_minute is None else f"{per_minute * 60:,.1f}",
        "monthly": "-" if monthly is None else f"${monthly * SECONDS_PER_MONTH:,.2f}",
        "chart": line(
            [(t, r * 60) for t, r in per_second(requests)],
            now=time.time(),
            window_s=window,
            title="S3 requests per minute (this process, boto3)",
        ),
    }


def _job_run(v: Viewer, job: str, run: dict[str, Any] | None) -> dict[str, Any]:
    """One job's last run as jobs/runs.py recorded it; details the viewer may see."""
    if run is None:
        return {"job": job, "ran": False}
    report: dict[str, Any] = run.get("report") or {}
    summary: dict[str, Any] = run.get("summary") or {}
    finished_us = int(run.get("finished_us", 0))
    details: list[tuple[str, str, str]] = []  # (what, outcome, why)
    if job == "truncate":
        for t in report.get("topics", []):
            if _may_see(v, "messages", str(t.get("topic", ""))):
                outcome = f"kept offset {int(t.get('kept_from', 0)):,} on"
                if t.get("rows_deleted"):
                    outcome += f", deleted {int(t['rows_deleted']):,} below"
                if t.get("status") not in ("ok", "nothing"):
                    outcome += f" ({t.get('status')})"
                details.append((str(t.get("topic")), outcome, str(t.get("kept_because", ""))))
    elif job == "compact":
        for t in report.get("tables", []):
            if not _may_see(v, str(t.get("kind", "")), str(t.get("name", ""))):
                continue
            done = []
            if t.get("files_removed"):
                done.append(f"{t['files_removed']:,} files into {t.get('files_added', 0):,}")
            if t.get("files_vacuumed"):
                done.append(f"vacuumed {t['files_vacuumed']:,} files")
            if t.get("status") != "ok":
                done.append(str(t.get("status")))
            if done:
                details.append((_table_of(t), ", ".join(done), ""))
    elif job == "gc":
        for key, what in (
            ("subscriptions_deleted", "expired subscription deleted"),
            ("snapshots_deleted", "expired snapshot deleted"),
            ("orphans_removed", "orphaned directory removed"),
            ("errors", "failed"),
        ):
            details += [(str(name), what, "") for name in report.get(key, [])]
    return {
        "job": job,
        "ran": True,
        "finished": when(finished_us),
        "ago": duration(max(0.0, time.time() - finished_us / 1e6)),
        "seconds": f"{float(run.get('seconds', 0.0)):,.1f}",
        "summary": ", ".join(f"{k.replace('_', ' ')} {n:,}" for k, n in summary.items()),
        "failed": bool(summary.get("failed")),
        "dry_run": bool(report.get("dry_run")),
        "details": details,
    }


def _table_of(result: dict[str, Any]) -> str:
    """A compaction result's table as the page names it: its topic, subscription or name."""
    kind, name = str(result.get("kind", "")), str(result.get("name", ""))
    owner = {"messages": "topic", "leases": "subscription"}.get(kind)
    return f"{owner} {name}" if owner else name


def _may_see(v: Viewer, kind: str, name: str) -> bool:
    """Whether the viewer may see a table a job report names (by resource path)."""
    try:
        if kind == "messages":
            topic = TopicName.parse(name)
            return v.may("pubsub.topics.get", topic_resource(topic.project, topic.id))
        if kind == "leases":
            sub = SubscriptionName.parse(name)
            return v.may("pubsub.subscriptions.get", sub_resource(sub.project, sub.id))
    except errors.InvalidArgument:
        return False
    return True  # the catalog and the truncation log: what the lake page shows anyone
