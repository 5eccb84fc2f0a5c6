"""google.pubsub.v1 Publisher and Subscriber, and google.iam.v1 IAMPolicy, as gRPC methods
(SchemaService: ``api/grpc/schema_service.py``).

Administrative methods translate the request into the REST door's body and
call the same route function, then turn its JSON answer into the response
message: one definition of each operation's validation and semantics. Publish,
pull, acknowledge and deadline changes, the hot paths, go to the engine directly
through the mappings both doors share (``api.convert``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import empty_pb2, json_format
from google.protobuf.message import Message
from google.pubsub_v1.types import pubsub as ps
from starlette.responses import Response

from api import auth, convert
from api import models as m
from api.grpc.door import (
    Call,
    GrpcDoor,
    Handler,
    as_dict,
    from_json,
    project_of,
    unary,
    validated,
)
from api.grpc.schema_service import METHODS as SCHEMA_METHODS
from api.grpc.streaming import streaming_pull_handler
from api.grpc.wire import add_received, pb, subscription_name, topic_name
from api.rest import snapshots, subscriptions, topics
from lakepubsub import errors
from lakepubsub.publish import batches
from lakepubsub.resources.iam import Resource
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName

# The raw protobuf classes (faster than their proto-plus wrappers).
Topic = pb(ps.Topic)
Subscription = pb(ps.Subscription)
Snapshot = pb(ps.Snapshot)
Empty = empty_pb2.Empty

PUBLISHER = "google.pubsub.v1.Publisher"
SUBSCRIBER = "google.pubsub.v1.Subscriber"
IAM_POLICY = "google.iam.v1.IAMPolicy"


def _topic_params(name: TopicName) -> dict[str, str]:
    return {"project": name.project, "topic": name.id}


def _sub_params(name: SubscriptionName) -> dict[str, str]:
    return {"project": name.project, "subscription": name.id}


def _snap_params(name: SnapshotName) -> dict[str, str]:
    return {"project": name.project, "snapshot": name.id}


async def _rest(route: Callable[..., Response], *args: Any) -> bytes:
    """Run a REST route function (blocking storage work) off the event loop."""
    response = await asyncio.to_thread(route, *args)
    return bytes(response.body)


# -- Publisher ---------------------------------------------------------------------------------


async def create_topic(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = topic_name(request.name)
    doc = as_dict(request)
    await call.check("create_topic", _topic_params(name), doc)
    body = validated(m.TopicBody, doc)
    raw = await _rest(topics.create_topic, name.project, name.id, door.engine, body)
    return from_json(raw, Topic)


async def update_topic(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = topic_name(request.topic.name)
    doc = as_dict(request)
    await call.check("update_topic", _topic_params(name), doc)
    body = validated(m.UpdateTopicRequest, doc)
    raw = await _rest(topics.update_topic, name.project, name.id, body, door.engine)
    return from_json(raw, Topic)


async def get_topic(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = topic_name(request.topic)
    await call.check("get_topic", _topic_params(name))
    return from_json(await _rest(topics.get_topic, name.project, name.id, door.engine), Topic)


async def list_topics(door: GrpcDoor, request: Any, call: Call) -> Message:
    project = project_of(request.project)
    await call.check("list_topics", {"project": project})
    raw = await _rest(
        topics.list_topics, project, door.engine, request.page_size, request.page_token
    )
    return from_json(raw, pb(ps.ListTopicsResponse))


async def list_topic_subscriptions(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = topic_name(request.topic)
    await call.check("list_topic_subscriptions", _topic_params(name))
    raw = await _rest(
        topics.list_topic_subscriptions,
        name.project,
        name.id,
        door.engine,
        request.page_size,
        request.page_token,
    )
    return from_json(raw, pb(ps.ListTopicSubscriptionsResponse))


async def list_topic_snapshots(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = topic_name(request.topic)
    await call.check("list_topic_snapshots", _topic_params(name))
    raw = await _rest(topics.list_topic_snapshots, name.project, name.id, door.engine)
    return from_json(raw, pb(ps.ListTopicSnapshotsResponse))


async def delete_topic(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = topic_name(request.topic)
    await call.check("delete_topic", _topic_params(name))
    await _rest(topics.delete_topic, name.project, name.id, door.engine)
    return Empty()


async def detach_subscription(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription)
    await call.check("detach", _sub_params(name))
    await _rest(subscriptions.detach, name.project, name.id, door.engine)
    return pb(ps.DetachSubscriptionResponse)()


async def publish(door: GrpcDoor, request: Any, call: Call) -> Message:
    """Answered once every message is committed to the topic's table."""
    name = topic_name(request.topic)
    await call.check("publish", _topic_params(name))
    messages = request.messages
    batch = batches.checked(
        [msg.data for msg in messages],
        # The truth test first: items() of a protobuf map goes through Python's
        # Mapping views, 0.5 us a message even when it is empty.
        [list(msg.attributes.items()) if msg.attributes else None for msg in messages],
        [msg.ordering_key or None for msg in messages],
    )
    engine = door.engine
    if engine.lookups_need_no_io():
        future = engine.publish_batch_future(name, batch)
    else:
        future = await asyncio.to_thread(engine.publish_batch_future, name, batch)
    ids = await asyncio.wrap_future(future)
    return pb(ps.PublishResponse)(message_ids=ids)


# -- Subscriber --------------------------------------------------------------------------------


async def create_subscription(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.name)
    body = as_dict(request)
    await call.check("create_subscription", {"project": name.project}, body)
    raw = await _rest(
        subscriptions.create_subscription,
        name.project,
        name.id,
        validated(m.SubscriptionBody, body),
        door.engine,
    )
    return from_json(raw, Subscription)


async def get_subscription(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription)
    await call.check("get_subscription", _sub_params(name))
    raw = await _rest(subscriptions.get_subscription, name.project, name.id, door.engine)
    return from_json(raw, Subscription)


async def update_subscription(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription.name)
    body = as_dict(request)
    await call.check("update_subscription", _sub_params(name), body)
    raw = await _rest(
        subscriptions.update_subscription,
        name.project,
        name.id,
        validated(m.UpdateSubscriptionRequest, body),
        door.engine,
    )
    return from_json(raw, Subscription)


async def list_subscriptions(door: GrpcDoor, request: Any, call: Call) -> Message:
    project = project_of(request.project)
    await call.check("list_subscriptions", {"project": project})
    raw = await _rest(
        subscriptions.list_subscriptions,
        project,
        door.engine,
        request.page_size,
        request.page_token,
    )
    return from_json(raw, pb(ps.ListSubscriptionsResponse))


async def delete_subscription(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription)
    await call.check("delete_subscription", _sub_params(name))
    await _rest(subscriptions.delete_subscription, name.project, name.id, door.engine)
    return Empty()


async def modify_push_config(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription)
    await call.check("modify_push_config", _sub_params(name))
    body = validated(m.ModifyPushConfigRequest, as_dict(request), path_fields=("subscription",))
    await _rest(subscriptions.modify_push_config, name.project, name.id, body, door.engine)
    return Empty()


async def pull(door: GrpcDoor, request: Any, call: Call) -> Message:
    """Lease messages; waits for some unless ``return_immediately``."""
    name = subscription_name(request.subscription)
    await call.check("pull", _sub_params(name))
    future = await subscriptions.start_pull(
        door.engine,
        name,
        max_messages=request.max_messages,
        return_immediately=request.return_immediately,
    )
    attempts = subscriptions.reports_attempts(door.engine, name)
    received = await subscriptions.pulled(door.engine, name, future)
    response = pb(ps.PullResponse)()
    add_received(response.received_messages, received, attempts=attempts)  # type: ignore[attr-defined]
    return response


async def acknowledge(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription)
    await call.check("acknowledge", _sub_params(name))
    ack_ids = list(request.ack_ids)
    future = door.engine.acknowledge_future(name, ack_ids)
    # The room frees now, so a stream's next pull can join the ack's commit.
    out = door.streams.settled(ack_ids)
    failures = await asyncio.wrap_future(future)
    error = convert.ack_failures_error(failures)
    if error is not None:
        raise error
    if out and not failures:
        door.streams.acked(out)
    return Empty()


async def modify_ack_deadline(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription)
    await call.check("modify_ack_deadline", _sub_params(name))
    ack_ids = list(request.ack_ids)
    seconds = request.ack_deadline_seconds
    future = door.engine.modify_ack_deadline_future(name, ack_ids, seconds)
    failures = await asyncio.wrap_future(future)
    door.streams.extended(ack_ids, seconds, failures)
    error = convert.ack_failures_error(failures)
    if error is not None:
        raise error
    return Empty()


async def seek(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = subscription_name(request.subscription)
    body = as_dict(request)
    await call.check("seek", _sub_params(name), body)
    await _rest(
        subscriptions.seek,
        name.project,
        name.id,
        validated(m.SeekRequest, body, path_fields=("subscription",)),
        door.engine,
    )
    return pb(ps.SeekResponse)()


async def create_snapshot(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = SnapshotName.parse(request.name)
    body = as_dict(request)
    await call.check("create_snapshot", {"project": name.project}, body)
    raw = await _rest(
        snapshots.create_snapshot,
        name.project,
        name.id,
        validated(m.CreateSnapshotRequest, body, path_fields=("name",)),
        door.engine,
    )
    return from_json(raw, Snapshot)


async def get_snapshot(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = SnapshotName.parse(request.snapshot)
    await call.check("get_snapshot", _snap_params(name))
    raw = await _rest(snapshots.get_snapshot, name.project, name.id, door.engine)
    return from_json(raw, Snapshot)


async def update_snapshot(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = SnapshotName.parse(request.snapshot.name)
    await call.check("update_snapshot", _snap_params(name))
    body = validated(m.UpdateSnapshotRequest, as_dict(request))
    raw = await _rest(snapshots.update_snapshot, name.project, name.id, body, door.engine)
    return from_json(raw, Snapshot)


async def delete_snapshot(door: GrpcDoor, request: Any, call: Call) -> Message:
    name = SnapshotName.parse(request.snapshot)
    await call.check("delete_snapshot", _snap_params(name))
    await _rest(snapshots.delete_snapshot, name.project, name.id, door.engine)
    return Empty()


async def list_snapshots(door: GrpcDoor, request: Any, call: Call) -> Message:
    project = project_of(request.project)
    await call.check("list_snapshots", {"project": project})
    raw = await _rest(
        snapshots.list_snapshots, project, door.engine, request.page_size, request.page_token
    )
    return from_json(raw, pb(ps.ListSnapshotsResponse))


# -- IAMPolicy ---------------------------------------------------------------------------------

_IAM_KINDS = {"topics": "topic", "subscriptions": "subscription", "snapshots": "snapshot"}


def _iam_resource(path: str) -> tuple[str, dict[str, str], Resource]:
    """``projects/p`` or ``projects/p/{topics|subscriptions|snapshots}/id``."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "projects":
        resource = auth.iam_resource("project", parts[1], "")
        return "project", {"project": resource.project}, resource
    if len(parts) == 4 and parts[0] == "projects" and parts[2] in _IAM_KINDS:
        kind = _IAM_KINDS[parts[2]]
        resource = auth.iam_resource(kind, parts[1], parts[3])
        return kind, {"project": resource.project, kind: resource.id}, resource
    raise errors.InvalidArgument(f"Invalid resource {path!r} for an IAM policy")


async def get_iam_policy(door: GrpcDoor, request: Any, call: Call) -> Message:
    kind, params, resource = _iam_resource(request.resource)
    await call.check(f"{kind}_get_iam_policy", params)
    doc = await asyncio.to_thread(auth.get_policy, door.engine, resource)
    return _policy(doc)


async def set_iam_policy(door: GrpcDoor, request: Any, call: Call) -> Message:
    kind, params, resource = _iam_resource(request.resource)
    await call.check(f"{kind}_set_iam_policy", params)
    body = validated(auth.SetIamPolicyRequest, as_dict(request), path_fields=("resource",))
    doc = await asyncio.to_thread(auth.set_policy, door.state, resource, body)
    return _policy(doc)


async def test_iam_permissions(door: GrpcDoor, request: Any, call: Call) -> Message:
    kind, params, resource = _iam_resource(request.resource)
    await call.check(f"{kind}_test_iam_permissions", params)
    body = validated(auth.TestIamPermissionsRequest, as_dict(request), path_fields=("resource",))
    principal = await call.principal()
    doc = await asyncio.to_thread(auth.test_permissions, principal, door.engine, resource, body)
    response: Message = iam_policy_pb2.TestIamPermissionsResponse(
        permissions=doc.get("permissions", [])
    )
    return response


def _policy(doc: dict[str, Any]) -> Message:
    policy: Message = policy_pb2.Policy()
    json_format.ParseDict(doc, policy, ignore_unknown_fields=True)
    return policy


# -- registration ------------------------------------------------------------------------------

_METHODS: dict[str, dict[str, tuple[type[Message], Handler]]] = {
    PUBLISHER: {
        "CreateTopic": (Topic, create_topic),
        "UpdateTopic": (pb(ps.UpdateTopicRequest), update_topic),
        "Publish": (pb(ps.PublishRequest), publish),
        "GetTopic": (pb(ps.GetTopicRequest), get_topic),
        "ListTopics": (pb(ps.ListTopicsRequest), list_topics),
        "ListTopicSubscriptions": (pb(ps.ListTopicSubscriptionsRequest), list_topic_subscriptions),
        "ListTopicSnapshots": (pb(ps.ListTopicSnapshotsRequest), list_topic_snapshots),
        "DeleteTopic": (pb(ps.DeleteTopicRequest), delete_topic),
        "DetachSubscription": (pb(ps.DetachSubscriptionRequest), detach_subscription),
    },
    SUBSCRIBER: {
        "CreateSubscription": (Subscription, create_subscription),
        "GetSubscription": (pb(ps.GetSubscriptionRequest), get_subscription),
        "UpdateSubscription": (pb(ps.UpdateSubscriptionRequest), update_subscription),
        "ListSubscriptions": (pb(ps.ListSubscriptionsRequest), list_subscriptions),
        "DeleteSubscription": (pb(ps.DeleteSubscriptionRequest), delete_subscription),
        "ModifyAckDeadline": (pb(ps.ModifyAckDeadlineRequest), modify_ack_deadline),
        "Acknowledge": (pb(ps.AcknowledgeRequest), acknowledge),
        "Pull": (pb(ps.PullRequest), pull),
        "ModifyPushConfig": (pb(ps.ModifyPushConfigRequest), modify_push_config),
        "GetSnapshot": (pb(ps.GetSnapshotRequest), get_snapshot),
        "ListSnapshots": (pb(ps.ListSnapshotsRequest), list_snapshots),
        "CreateSnapshot": (pb(ps.CreateSnapshotRequest), create_snapshot),
        "UpdateSnapshot": (pb(ps.UpdateSnapshotRequest), update_snapshot),
        "DeleteSnapshot": (pb(ps.DeleteSnapshotRequest), delete_snapshot),
        "Seek": (pb(ps.SeekRequest), seek),
    },
    IAM_POLICY: {
        "SetIamPolicy": (iam_policy_pb2.SetIamPolicyRequest, set_iam_policy),
        "GetIamPolicy": (iam_policy_pb2.GetIamPolicyRequest, get_iam_policy),
        "TestIamPermissions": (iam_policy_pb2.TestIamPermissionsRequest, test_iam_permissions),
    },
}


def handlers(door: GrpcDoor) -> list[grpc.GenericRpcHandler]:
    """Every service's method handlers; an unknown method answers UNIMPLEMENTED."""
    out: list[grpc.GenericRpcHandler] = []
    for service, methods in {**_METHODS, **SCHEMA_METHODS}.items():
        table: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            method: unary(door, f"{service}/{method}", request_type, handler)
            for method, (request_type, handler) in methods.items()
        }
        if service == SUBSCRIBER:
            table["StreamingPull"] = streaming_pull_handler(door)
        out.append(grpc.method_handlers_generic_handler(service, table))
    return out
