"""The administrative methods of google.pubsub.v1 Publisher and Subscriber, from a table.

Each method names the request field that holds its resource, its access rule
(``api/auth.py`` ``RULES``, by Pub/Sub method, shared with the REST door), the REST
body model that checks the request (so a refused field is worded as on the REST
door) and the engine call. The engine's answer goes through the mappings both doors
share (``api.convert``) into the response message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import empty_pb2
from google.protobuf.message import Message
from google.pubsub_v1.types import pubsub as ps

from api import convert
from api import models as m
from api.deps import page
from api.grpc.door import Call, GrpcDoor, Handler, as_dict, from_dict, project_of, validated
from api.grpc.wire import pb, subscription_name, topic_name
from lakepubsub import Engine, errors
from lakepubsub.resources.names import SnapshotName, SubscriptionName

# How each kind of resource name is parsed; the kind is also its access rule's param.
_KINDS: dict[str, Callable[[str], Any]] = {
    "topic": topic_name,
    "subscription": subscription_name,
    "snapshot": SnapshotName.parse,
}

Answer = dict[str, Any] | None
# An engine call: the engine, the resource's name (a project id for listings), the
# checked REST body (None without one) and the request; the REST answer's dict.
Work = Callable[[Engine, Any, Any, Any], Answer]


@dataclass(frozen=True)
class _Method:
    """One method. ``where``: the request field naming the resource (dotted for a
    nested one) and its kind (``project``, or a key of ``_KINDS``); ``project_scope``:
    the access rule checks the project only (creating a resource); ``body``: the REST body
    model, the fields the REST path carries instead, and whether the access rule reads
    the body; ``response``: the response type (its empty message when the work answers
    None)."""

    request: type[Message]
    rule: str
    where: tuple[str, str]
    work: Work
    response: type[Message]
    body: type[m.Model] | None = None
    path_fields: tuple[str, ...] = ()
    rule_reads_body: bool = False
    project_scope: bool = False


def _resource(
    request: Any, where: tuple[str, str], project_scope: bool
) -> tuple[Any, dict[str, str]]:
    field, kind = where
    path = request
    for part in field.split("."):
        path = getattr(path, part)
    if kind == "project":
        project = project_of(path)
        return project, {"project": project}
    name = _KINDS[kind](path)
    params = {"project": name.project}
    if not project_scope:
        params[kind] = name.id
    return name, params


def _handler(spec: _Method) -> Handler:
    async def handle(door: GrpcDoor, request: Any, call: Call) -> Message:
        name, params = _resource(request, spec.where, spec.project_scope)
        doc = as_dict(request) if spec.body is not None else None
        await call.check(spec.rule, params, doc if spec.rule_reads_body else None)
        body = None
        if spec.body is not None and doc is not None:
            body = validated(spec.body, doc, path_fields=spec.path_fields)
        answer = await asyncio.to_thread(spec.work, door.engine, name, body, request)
        return from_dict(answer, spec.response) if answer else spec.response()

    return handle


# -- topics ------------------------------------------------------------------------------------


def _create_topic(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    return convert.topic_body(engine.create_topic(convert.topic_from_body(name, body)))


def _update_topic(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    return convert.topic_body(engine.update_topic(name, *convert.topic_update(body)))


def _get_topic(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    return convert.topic_body(engine.get_topic(name))


def _list_topics(engine: Engine, project: Any, body: Any, request: Any) -> Answer:
    topics, token = engine.list_topics(
        project, page_size=request.page_size, page_token=request.page_token
    )
    return page("topics", [convert.topic_body(t) for t in topics], token)


def _list_topic_subscriptions(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    names, token = engine.list_topic_subscriptions(
        name, page_size=request.page_size, page_token=request.page_token
    )
    return page("subscriptions", names, token)


def _list_topic_snapshots(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    return {"snapshots": engine.list_topic_snapshots(name)}


def _delete_topic(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    engine.delete_topic(name)
    return None


def _detach(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    engine.detach_subscription(name)
    return None


# -- subscriptions -----------------------------------------------------------------------------


def _create_subscription(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    created = engine.create_subscription(convert.subscription_from_body(name, body))
    return convert.subscription_body(created)


def _get_subscription(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    return convert.subscription_body(engine.get_subscription(name))


def _update_subscription(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    updated = engine.update_subscription(name, *convert.subscription_update(body))
    return convert.subscription_body(updated)


def _list_subscriptions(engine: Engine, project: Any, body: Any, request: Any) -> Answer:
    subs, token = engine.list_subscriptions(
        project, page_size=request.page_size, page_token=request.page_token
    )
    return page("subscriptions", [convert.subscription_body(s) for s in subs], token)


def _delete_subscription(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    engine.delete_subscription(name)
    return None


def _modify_push_config(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    push = convert.push_config(body.push_config)
    engine.update_subscription(name, {"push_config": push}, ["push_config"])
    return None


def _seek(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    # The target is a oneof: a request cannot give both; one that gives neither is
    # refused in the REST door's words.
    if body.time is not None:
        engine.seek_to_time(name, convert.parse_time_us(body.time, "time"))
    elif body.snapshot is not None:
        engine.seek_to_snapshot(name, SnapshotName.parse(body.snapshot))
    else:
        raise errors.InvalidArgument("seek needs exactly one of 'time' and 'snapshot'")
    return None


# -- snapshots ---------------------------------------------------------------------------------


def _create_snapshot(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    convert.refuse_unbuilt(body, "snapshot")
    source = SubscriptionName.parse(body.subscription)
    return convert.snapshot_body(engine.create_snapshot(name, source, labels=body.labels))


def _get_snapshot(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    return convert.snapshot_body(engine.get_snapshot(name))


def _update_snapshot(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    return convert.snapshot_body(engine.update_snapshot(name, convert.snapshot_labels(body)))


def _delete_snapshot(engine: Engine, name: Any, body: Any, request: Any) -> Answer:
    engine.delete_snapshot(name)
    return None


def _list_snapshots(engine: Engine, project: Any, body: Any, request: Any) -> Answer:
    snapshots, token = engine.list_snapshots(
        project, page_size=request.page_size, page_token=request.page_token
    )
    return page("snapshots", [convert.snapshot_body(s) for s in snapshots], token)


# -- the tables -------------------------------------------------------------------------------

# The request field naming the resource, and its kind, for most methods.
_TOPIC = ("topic", "topic")
_SUB = ("subscription", "subscription")
_SNAP = ("snapshot", "snapshot")
_PROJECT = ("project", "project")


def _snake(method: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in method).lstrip("_")


def _table(*rows: tuple[str, tuple[str, str], Work, str, dict[str, Any]]) -> dict[str, _Method]:
    """Rows of (method, where, work, response type, other fields): the request type is
    ``<method>Request`` and the access rule the method's snake_case name, unless the
    other fields say otherwise."""
    table = {}
    for method, where, work, response, extra in rows:
        request = pb(getattr(ps, extra.pop("request", f"{method}Request")))
        rule = extra.pop("rule", _snake(method))
        answer = empty_pb2.Empty if response == "Empty" else pb(getattr(ps, response))
        table[method] = _Method(request, rule, where, work, answer, **extra)
    return table


_BODY = "rule_reads_body"
PUBLISHER_ADMIN = _table(
    ("CreateTopic", ("name", "topic"), _create_topic, "Topic",
     {"request": "Topic", "body": m.TopicBody, _BODY: True}),
    ("UpdateTopic", ("topic.name", "topic"), _update_topic, "Topic",
     {"body": m.UpdateTopicRequest, _BODY: True}),
    ("GetTopic", _TOPIC, _get_topic, "Topic", {}),
    ("ListTopics", _PROJECT, _list_topics, "ListTopicsResponse", {}),
    ("ListTopicSubscriptions", _TOPIC, _list_topic_subscriptions,
     "ListTopicSubscriptionsResponse", {}),
    ("ListTopicSnapshots", _TOPIC, _list_topic_snapshots, "ListTopicSnapshotsResponse", {}),
    ("DeleteTopic", _TOPIC, _delete_topic, "Empty", {}),
    ("DetachSubscription", _SUB, _detach, "DetachSubscriptionResponse", {"rule": "detach"}),
)  # fmt: skip
SUBSCRIBER_ADMIN = _table(
    ("CreateSubscription", ("name", "subscription"), _create_subscription, "Subscription",
     {"request": "Subscription", "body": m.SubscriptionBody, _BODY: True, "project_scope": True}),
    ("GetSubscription", _SUB, _get_subscription, "Subscription", {}),
    ("UpdateSubscription", ("subscription.name", "subscription"), _update_subscription,
     "Subscription", {"body": m.UpdateSubscriptionRequest, _BODY: True}),
    ("ListSubscriptions", _PROJECT, _list_subscriptions, "ListSubscriptionsResponse", {}),
    ("DeleteSubscription", _SUB, _delete_subscription, "Empty", {}),
    ("ModifyPushConfig", _SUB, _modify_push_config, "Empty",
     {"body": m.ModifyPushConfigRequest, "path_fields": ("subscription",)}),
    ("Seek", _SUB, _seek, "SeekResponse",
     {"body": m.SeekRequest, "path_fields": ("subscription",), _BODY: True}),
    ("CreateSnapshot", ("name", "snapshot"), _create_snapshot, "Snapshot",
     {"body": m.CreateSnapshotRequest, "path_fields": ("name",), _BODY: True,
      "project_scope": True}),
    ("GetSnapshot", _SNAP, _get_snapshot, "Snapshot", {}),
    ("UpdateSnapshot", ("snapshot.name", "snapshot"), _update_snapshot, "Snapshot",
     {"body": m.UpdateSnapshotRequest}),
    ("DeleteSnapshot", _SNAP, _delete_snapshot, "Empty", {}),
    ("ListSnapshots", _PROJECT, _list_snapshots, "ListSnapshotsResponse", {}),
)  # fmt: skip


def methods(table: dict[str, _Method]) -> dict[str, tuple[type[Message], Handler]]:
    """A service's methods from its table: the request type and the handler of each."""
    return {method: (spec.request, _handler(spec)) for method, spec in table.items()}
