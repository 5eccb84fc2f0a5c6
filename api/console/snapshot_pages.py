"""The console's list of snapshots (creating one and seeking to one are actions on a
subscription's page: ``api/console/actions.py``)."""

from __future__ import annotations

import time

from fastapi import Request
from starlette.responses import Response

from api.console.access import Viewer
from api.console.charts import duration, when
from api.console.web import Page, matches, page, router, sub_resource
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.iam import Resource
from lakepubsub.resources.names import SnapshotName
from lakepubsub.resources.snapshots import Snapshot


@router.get("/snapshots")
async def snapshots(request: Request, q: str = "") -> Response:
    def build(v: Viewer) -> Page:
        now = time.time()
        topics = {e.uid: e for e in v.view.of_kind(cat.TOPIC)}
        rows = []
        for e in v.view.of_kind(cat.SNAPSHOT):
            snapshot = Snapshot.from_entry(e)
            topic = topics.get(e.topic_uid or "")
            if not matches(q, f"{e.project}/{e.name}", snapshot.topic.path):
                continue
            if not v.may(
                "pubsub.snapshots.get", Resource.of_snapshot(SnapshotName(e.project, e.name))
            ):
                continue
            seekers = [
                f"{s.project}/{s.name}"
                for s in (v.view.attached_to(topic.uid) if topic is not None else [])
                if s.kind == cat.SUBSCRIPTION
                and v.may("pubsub.subscriptions.get", sub_resource(s.project, s.name))
            ]
            left = snapshot.expire_time_us / 1e6 - now
            rows.append(
                {
                    "project": e.project,
                    "id": e.name,
                    "topic": snapshot.topic.path if topic is not None else "(deleted topic)",
                    "subscriptions": seekers,
                    "expires": when(snapshot.expire_time_us),
                    "expires_in": f"in {duration(left)}" if left > 0 else "expired",
                    "created": when(e.created_us),
                    "labels": ", ".join(f"{k}={val}" for k, val in sorted(snapshot.labels.items())),
                }
            )
        return "snapshots.html", {"title": "Snapshots", "rows": rows, "q": q}

    return await page(request, "snapshots", build)
