"""Snapshot routes: capture a subscription's acknowledgment state to seek back to."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from api import convert
from api import models as m
from api.deps import EngineDep, json_response
from api.rest.resources import SNAPSHOTS, add_routes
from lakepubsub.resources.names import SnapshotName, SubscriptionName

router = APIRouter(prefix="/v1/projects/{project}", tags=["snapshots"])


@router.put("/snapshots/{snapshot}", response_model=m.SnapshotBody, name="create_snapshot")
def create_snapshot(
    project: str, snapshot: str, body: m.CreateSnapshotRequest, engine: EngineDep
) -> Response:
    convert.refuse_unbuilt(body, "snapshot")
    created = engine.create_snapshot(
        SnapshotName(project, snapshot),
        SubscriptionName.parse(body.subscription),
        labels=body.labels,
    )
    return json_response(convert.snapshot_body(created))


add_routes(router, SNAPSHOTS)
