"""Topic routes: admin and publish."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from api import answers, convert
from api import models as m
from api.deps import EngineDep, PageSize, PageToken, json_response, page_response
from api.rest.resources import TOPICS, add_routes
from lakepubsub import Engine, errors
from lakepubsub.resources.names import TopicName

router = APIRouter(prefix="/v1/projects/{project}", tags=["topics"])
# Publish, on its own router that the app tries first (api/app.py).
messaging = APIRouter(prefix="/v1/projects/{project}", tags=["topics"])

# Publish bodies up to this size are decoded on the event loop when the topic
# can be looked up without a storage read. Decoding holds the GIL either way, so a
# worker thread only adds its hand-off (docs/architecture.md, "Inline on the
# event loop", has the measurement). Larger bodies go to a worker thread, so one
# request does not stall the loop long.
INLINE_PUBLISH_BYTES = 256 * 1024


@router.put("/topics/{topic}", response_model=m.TopicBody, name="create_topic")
def create_topic(
    project: str, topic: str, engine: EngineDep, body: Annotated[m.TopicBody | None, Body()] = None
) -> Response:
    name = TopicName(project, topic)
    created = engine.create_topic(convert.topic_from_body(name, body or m.TopicBody()))
    return json_response(convert.topic_body(created))


add_routes(router, TOPICS)


@router.get(
    "/topics/{topic}/subscriptions",
    response_model=m.ListTopicSubscriptionsResponse,
    name="list_topic_subscriptions",
)
def list_topic_subscriptions(
    project: str, topic: str, engine: EngineDep, page_size: PageSize = 0, page_token: PageToken = ""
) -> Response:
    names, token = engine.list_topic_subscriptions(
        TopicName(project, topic), page_size=page_size, page_token=page_token
    )
    return page_response("subscriptions", names, token)


def _submit_publish(engine: Engine, name: TopicName, raw: bytes) -> Any:
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.InvalidArgument(f"Invalid JSON payload: {exc}") from exc
    return engine.publish_batch_future(name, convert.publish_batch(decoded))


@messaging.post(
    "/topics/{topic}:publish",
    response_model=m.PublishResponse,
    name="publish",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/PublishRequest"}}
            },
        }
    },
)
async def publish(project: str, topic: str, request: Request, engine: EngineDep) -> Response:
    """Publish messages; the ids are returned once the messages are committed to the lake.

    A server answers this method in ``api/rest/fast.py`` before the router; both call
    ``publish_ids``."""
    ids = await publish_ids(engine, TopicName(project, topic), await request.body())
    return json_response({"messageIds": ids})


async def publish_ids(engine: Engine, name: TopicName, raw: bytes) -> list[str]:
    """Publish the messages of a JSON ``PublishRequest`` body; their ids once committed."""
    if len(raw) <= INLINE_PUBLISH_BYTES and engine.lookups_need_no_io():
        future = _submit_publish(engine, name, raw)
    else:
        future = await run_in_threadpool(_submit_publish, engine, name, raw)
    return await answers.of(future)


@router.get(
    "/topics/{topic}/snapshots",
    response_model=m.ListTopicSnapshotsResponse,
    name="list_topic_snapshots",
)
def list_topic_snapshots(project: str, topic: str, engine: EngineDep) -> Response:
    return json_response({"snapshots": engine.list_topic_snapshots(TopicName(project, topic))})
