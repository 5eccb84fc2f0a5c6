"""Snapshot routes: capture a subscription's acknowledgment state to seek back to."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from api import convert
from api import models as m
from api.deps import EngineDep, PageSize, PageToken, json_response, page_response
from lakepubsub import errors
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


@router.get("/snapshots/{snapshot}", response_model=m.SnapshotBody, name="get_snapshot")
def get_snapshot(project: str, snapshot: str, engine: EngineDep) -> Response:
    return json_response(
        convert.snapshot_body(engine.get_snapshot(SnapshotName(project, snapshot)))
    )


@router.patch("/snapshots/{snapshot}", response_model=m.SnapshotBody, name="update_snapshot")
def update_snapshot(
    project: str, snapshot: str, body: m.UpdateSnapshotRequest, engine: EngineDep
) -> Response:
    paths = [p.strip() for p in body.update_mask.split(",") if p.strip()]
    if paths != ["labels"]:
        raise errors.InvalidArgument("only 'labels' of a snapshot can be updated")
    updated = engine.update_snapshot(SnapshotName(project, snapshot), body.snapshot.labels)
    return json_response(convert.snapshot_body(updated))


@router.delete("/snapshots/{snapshot}", response_model=m.Empty, name="delete_snapshot")
def delete_snapshot(project: str, snapshot: str, engine: EngineDep) -> Response:
    engine.delete_snapshot(SnapshotName(project, snapshot))
    return json_response({})


@router.get("/snapshots", response_model=m.ListSnapshotsResponse, name="list_snapshots")
def list_snapshots(
    project: str,
    engine: EngineDep,
    page_size: PageSize = 0,
    page_token: PageToken = "",
) -> Response:
    snapshots, token = engine.list_snapshots(project, page_size=page_size, page_token=page_token)
    return page_response("snapshots", [convert.snapshot_body(s) for s in snapshots], token)
