"""The admin routes every resource kind has, declared once from a row per kind: get,
update (PATCH), delete and list of topics, subscriptions and snapshots, as
``api/grpc/admin.py`` declares the gRPC door's admin methods from a table.

Each route keeps the name and path, and so the OpenAPI operation id, it had when it
was written out by hand. No ``from __future__ import annotations`` here: FastAPI reads
the endpoints' annotations, and the path parameter's is made per kind.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path
from starlette.responses import Response

from api import convert
from api import models as m
from api.deps import EngineDep, PageSize, PageToken, json_response, page_response
from lakepubsub import Engine
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName
from lakepubsub.resources.snapshots import Snapshot
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic


@dataclass(frozen=True)
class Kind:
    """A resource kind. ``noun``: the path parameter and the routes' noun (``topic``:
    ``/topics/{topic}``, ``get_topic``; the plural names the collection and its
    listing's key); ``name``: the name type; ``model``, ``list_model`` and
    ``update_request``: the bodies of a resource, a listing and an update; ``body``: a
    resource's REST form; the rest: the engine calls (``update`` with the checked
    update request)."""

    noun: str
    name: Callable[[str, str], Any]
    model: type[m.Model]
    list_model: type[m.Model]
    update_request: type[m.Model]
    body: Callable[[Any], dict[str, Any]]
    get: Callable[[Engine, Any], Any]
    update: Callable[[Engine, Any, Any], Any]
    delete: Callable[[Engine, Any], None]
    list: Callable[..., tuple[list[Any], str]]


def add_routes(router: APIRouter, kind: Kind) -> None:
    """The get, update, delete and list routes of ``kind``, in that order."""
    Id = Annotated[str, Path(alias=kind.noun)]  # noqa: N806 (a type, named as one)
    plural = f"{kind.noun}s"
    one = f"/{plural}/{{{kind.noun}}}"

    def get(project: str, id_: Id, engine: EngineDep) -> Response:
        return json_response(kind.body(kind.get(engine, kind.name(project, id_))))

    def update(project: str, id_: Id, body: Any, engine: EngineDep) -> Response:
        return json_response(kind.body(kind.update(engine, kind.name(project, id_), body)))

    update.__annotations__["body"] = kind.update_request  # the body FastAPI checks

    def delete(project: str, id_: Id, engine: EngineDep) -> Response:
        kind.delete(engine, kind.name(project, id_))
        return json_response({})

    def listing(
        project: str, engine: EngineDep, page_size: PageSize = 0, page_token: PageToken = ""
    ) -> Response:
        found, token = kind.list(engine, project, page_size=page_size, page_token=page_token)
        return page_response(plural, [kind.body(r) for r in found], token)

    for path, endpoint, method, verb, model in (
        (one, get, "GET", "get", kind.model),
        (one, update, "PATCH", "update", kind.model),
        (one, delete, "DELETE", "delete", m.Empty),
        (f"/{plural}", listing, "GET", "list", kind.list_model),
    ):
        noun = plural if verb == "list" else kind.noun
        router.add_api_route(
            path, endpoint, methods=[method], response_model=model, name=f"{verb}_{noun}"
        )


def _update_topic(engine: Engine, name: TopicName, body: m.UpdateTopicRequest) -> Topic:
    return engine.update_topic(name, *convert.topic_update(body))


def _update_subscription(
    engine: Engine, name: SubscriptionName, body: m.UpdateSubscriptionRequest
) -> Subscription:
    return engine.update_subscription(name, *convert.subscription_update(body))


def _update_snapshot(engine: Engine, name: SnapshotName, body: m.UpdateSnapshotRequest) -> Snapshot:
    return engine.update_snapshot(name, convert.snapshot_labels(body))


# fmt: off
TOPICS = Kind(
    "topic", TopicName, m.TopicBody, m.ListTopicsResponse, m.UpdateTopicRequest,
    convert.topic_body, Engine.get_topic, _update_topic, Engine.delete_topic, Engine.list_topics,
)
SUBSCRIPTIONS = Kind(
    "subscription", SubscriptionName, m.SubscriptionBody, m.ListSubscriptionsResponse,
    m.UpdateSubscriptionRequest, convert.subscription_body, Engine.get_subscription,
    _update_subscription, Engine.delete_subscription, Engine.list_subscriptions,
)
SNAPSHOTS = Kind(
    "snapshot", SnapshotName, m.SnapshotBody, m.ListSnapshotsResponse, m.UpdateSnapshotRequest,
    convert.snapshot_body, Engine.get_snapshot, _update_snapshot, Engine.delete_snapshot,
    Engine.list_snapshots,
)
# fmt: on
