"""Console pages of schemas and of the lake's tables."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import Response

from api.console.access import Viewer
from api.console.charts import human
from api.console.tables import Footprint
from api.console.web import (
    console_of,
    engine_of,
    page,
    router,
    sub_resource,
    topic_resource,
    when,
)
from lakepubsub import catalog as cat
from lakepubsub.iam import Resource
from lakepubsub.names import SchemaName


@router.get("/schemas")
async def schema_list(request: Request) -> Response:
    engine = engine_of(request)

    def build(v: Viewer) -> tuple[str, dict[str, Any]]:
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
    sampler = console_of(request).sampler(engine)

    def build(v: Viewer) -> tuple[str, dict[str, Any]]:
        tables = []
        for name in ("catalog", "truncations"):
            series = sampler.series(name)
            if series is not None and series.size is not None:
                tables.append(_table_row(name, "the lake", series.size))
        for e in v.view.of_kind(cat.TOPIC):
            series = sampler.series(e.uid)
            if series is None or series.size is None:
                continue
            if v.may("pubsub.topics.get", topic_resource(e.project, e.name)):
                path = f"topics/{e.uid}/messages"
                tables.append(_table_row(path, f"topic {e.project}/{e.name}", series.size))
        for e in v.view.of_kind(cat.SUBSCRIPTION):
            series = sampler.series(e.uid)
            if series is None or series.size is None:
                continue
            if v.may("pubsub.subscriptions.get", sub_resource(e.project, e.name)):
                path = f"subscriptions/{e.uid}/leases"
                tables.append(_table_row(path, f"subscription {e.project}/{e.name}", series.size))
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
        }

    return await page(request, "lake", build)


def _table_row(path: str, of: str, size: Footprint) -> dict[str, Any]:
    return {
        "path": path,
        "of": of,
        "version": size.version,
        "files": f"{size.files:,}",
        "bytes": human(size.bytes, "B"),
        "files_n": size.files,
        "bytes_n": size.bytes,
    }
