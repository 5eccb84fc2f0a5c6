"""Subscription routes: admin, pull, acknowledge, deadlines, and the truncation extensions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from api import answers, convert
from api import models as m
from api.deps import EngineDep, json_response
from api.pulls import pulled, reports_attempts, start_pull
from api.rest.resources import SUBSCRIPTIONS, add_routes
from lakepubsub import Engine, errors
from lakepubsub.resources.names import SnapshotName, SubscriptionName

T = TypeVar("T")

router = APIRouter(prefix="/v1/projects/{project}", tags=["subscriptions"])
# Pull, acknowledge, modifyAckDeadline and nack, on a router the app tries first (api/app.py).
messaging = APIRouter(prefix="/v1/projects/{project}", tags=["subscriptions"])


@router.put(
    "/subscriptions/{subscription}", response_model=m.SubscriptionBody, name="create_subscription"
)
def create_subscription(
    project: str, subscription: str, body: m.SubscriptionBody, engine: EngineDep
) -> Response:
    name = SubscriptionName(project, subscription)
    created = engine.create_subscription(convert.subscription_from_body(name, body))
    return json_response(convert.subscription_body(created))


add_routes(router, SUBSCRIPTIONS)


async def _submit(engine: Engine, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` inline when it finds everything in the cached catalog; else on a
    worker thread (it reads storage). Parsing ack ids and queueing work for the
    dispatcher hold the GIL either way, so the hop is pure cost (docs/architecture.md,
    "Inline on the event loop")."""
    if engine.lookups_need_no_io():
        return work(*args)
    return await run_in_threadpool(work, *args)


async def _disconnect(request: Request) -> None:
    """Returns when the client of ``request`` (its body read) disconnects."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@messaging.post("/subscriptions/{subscription}:pull", response_model=m.PullResponse, name="pull")
async def pull(
    project: str, subscription: str, body: m.PullRequest, engine: EngineDep, request: Request
) -> Response:
    """Lease messages. Waits (long poll) for new ones unless ``returnImmediately``."""
    name = SubscriptionName(project, subscription)
    if body.max_messages <= 0:
        raise errors.InvalidArgument("maxMessages must be a positive number")
    future = await start_pull(
        engine, name, max_messages=body.max_messages, return_immediately=body.return_immediately
    )
    attempts = reports_attempts(engine, name)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        received = await pulled(engine, name, future, gone)
    finally:
        gone.cancel()
    if not received:
        return json_response({})
    items = [convert.received_body(r, attempts=attempts) for r in received]
    return json_response({"receivedMessages": items})


async def _settle(
    engine: Engine, work: Callable[..., Future[dict[str, str]]], *args: Any
) -> Response:
    """Acknowledge or change deadlines with ``work(*args)``; exactly-once failures are
    raised as Pub/Sub reports them."""
    future = await _submit(engine, work, *args)
    error = convert.ack_failures_error(await answers.of(future))
    if error is not None:
        raise error
    return json_response({})


@messaging.post(
    "/subscriptions/{subscription}:acknowledge", response_model=m.Empty, name="acknowledge"
)
async def acknowledge(
    project: str, subscription: str, body: m.AcknowledgeRequest, engine: EngineDep
) -> Response:
    name = SubscriptionName(project, subscription)
    return await _settle(engine, engine.acknowledge_future, name, body.ack_ids)


@messaging.post(
    "/subscriptions/{subscription}:modifyAckDeadline",
    response_model=m.Empty,
    name="modify_ack_deadline",
)
async def modify_ack_deadline(
    project: str, subscription: str, body: m.ModifyAckDeadlineRequest, engine: EngineDep
) -> Response:
    name = SubscriptionName(project, subscription)
    deadline_s = body.ack_deadline_seconds
    return await _settle(engine, engine.modify_ack_deadline_future, name, body.ack_ids, deadline_s)


@messaging.post("/subscriptions/{subscription}:nack", response_model=m.Empty, name="nack")
async def nack(
    project: str, subscription: str, body: m.AcknowledgeRequest, engine: EngineDep
) -> Response:
    """lakepubsub extension (seed 000 Nack): make the messages redeliverable now."""
    name = SubscriptionName(project, subscription)
    return await _settle(engine, engine.modify_ack_deadline_future, name, body.ack_ids, 0)


@router.post(
    "/subscriptions/{subscription}:modifyPushConfig",
    response_model=m.Empty,
    name="modify_push_config",
)
def modify_push_config(
    project: str, subscription: str, body: m.ModifyPushConfigRequest, engine: EngineDep
) -> Response:
    name = SubscriptionName(project, subscription)
    engine.update_subscription(
        name, {"push_config": convert.push_config(body.push_config)}, ["push_config"]
    )
    return json_response({})


@router.post(
    "/subscriptions/{subscription}:truncate", response_model=m.TruncateResponse, name="truncate"
)
async def truncate(project: str, subscription: str, engine: EngineDep) -> Response:
    """lakepubsub extension (seed 000 TruncateSubscription): drop every unacknowledged
    message and queue a truncation event that the next pull delivers first. With
    nothing to drop, the answer's event says ``"truncated": false`` and none is queued."""
    name = SubscriptionName(project, subscription)
    future = await run_in_threadpool(engine.truncate_future, name)
    event = await answers.of(future)
    return json_response({"event": convert.event_body(event)})


@router.post("/subscriptions/{subscription}:seek", response_model=m.Empty, name="seek")
def seek(project: str, subscription: str, body: m.SeekRequest, engine: EngineDep) -> Response:
    """Seek to a time (everything published before it acknowledged, everything after
    not) or to a snapshot (the acknowledgment state it captured)."""
    name = SubscriptionName(project, subscription)
    if (body.time is None) == (body.snapshot is None):
        raise errors.InvalidArgument("seek needs exactly one of 'time' and 'snapshot'")
    if body.time is not None:
        engine.seek_to_time(name, convert.parse_time_us(body.time, "time"))
    else:
        engine.seek_to_snapshot(name, SnapshotName.parse(body.snapshot or ""))
    return json_response({})


@router.post("/subscriptions/{subscription}:detach", response_model=m.Empty, name="detach")
def detach(project: str, subscription: str, engine: EngineDep) -> Response:
    """Drop what is pending; later pulls fail with FAILED_PRECONDITION."""
    engine.detach_subscription(SubscriptionName(project, subscription))
    return json_response({})
