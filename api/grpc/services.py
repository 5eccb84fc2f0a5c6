"""google.pubsub.v1 Publisher and Subscriber, and google.iam.v1 IAMPolicy, as gRPC methods
(SchemaService: ``api/grpc/schema_service.py``).

The administrative methods come from a table of engine calls (``api/grpc/admin.py``).
Publish, pull, acknowledge and deadline changes, the hot paths, are written out here;
they too go to the engine directly, through the mappings both doors share
(``api.convert``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import json_format
from google.protobuf.message import Message
from google.pubsub_v1.types import pubsub as ps

from api import answers, auth, convert
from api.grpc import encode_columns, publish_request
from api.grpc.admin import PUBLISHER_ADMIN, SUBSCRIBER_ADMIN
from api.grpc.admin import methods as admin_methods
from api.grpc.door import Call, GrpcDoor, Methods, as_dict, unary, validated
from api.grpc.publish_request import PublishBody
from api.grpc.schema_service import METHODS as SCHEMA_METHODS
from api.grpc.streaming import streaming_pull_handler
from api.grpc.wire import pb, subscription_name, topic_name
from api.pulls import pulled, reports_attempts, start_pull
from lakepubsub import errors
from lakepubsub.delivery.ackids import split_malformed
from lakepubsub.resources.iam import Resource
from lakepubsub.resources.names import SubscriptionName

# google.protobuf.Empty encoded: no bytes (a message built and serialized takes two
# upb arenas, which count toward upb's malloc trims: api/grpc/publish_request.py).
EMPTY = b""

PUBLISHER = "google.pubsub.v1.Publisher"
SUBSCRIBER = "google.pubsub.v1.Subscriber"
IAM_POLICY = "google.iam.v1.IAMPolicy"


def _sub_params(name: SubscriptionName) -> dict[str, str]:
    return {"project": name.project, "subscription": name.id}


# -- Publisher: Publish ------------------------------------------------------------------------


async def publish(door: GrpcDoor, request: PublishBody, call: Call) -> bytes:
    """Answered once every message is committed to the topic's table."""
    name = topic_name(request.topic)
    await call.check("publish", {"project": name.project, "topic": name.id})
    batch = request.batch()
    engine = door.engine
    if engine.lookups_need_no_io():
        future = engine.publish_batch_future(name, batch)
    else:
        future = await asyncio.to_thread(engine.publish_batch_future, name, batch)
    return publish_request.answer(await answers.of(future))


# -- Subscriber: the hot paths ---------------------------------------------------------------


async def pull(door: GrpcDoor, request: Any, call: Call) -> bytes:
    """Lease messages; waits for some unless ``return_immediately``."""
    name = subscription_name(request.subscription)
    await call.check("pull", _sub_params(name))
    future = await start_pull(
        door.engine,
        name,
        max_messages=request.max_messages,
        return_immediately=request.return_immediately,
    )
    attempts = reports_attempts(door.engine, name)
    received = await pulled(door.engine, name, future)
    # a PullResponse: one response of everything (a run of new messages in bulk)
    whole = encode_columns.responses(received, limit=max(1, len(received)), attempts=attempts)
    return next(whole, (0, b""))[1]


async def acknowledge(door: GrpcDoor, request: Any, call: Call) -> bytes:
    name = subscription_name(request.subscription)
    await call.check("acknowledge", _sub_params(name))
    ack_ids = list(request.ack_ids)
    split = split_malformed(ack_ids)  # parsed once, for the engine and the room
    future = door.engine.acknowledge_future(name, ack_ids, split)
    # The room frees now, so a stream's next pull can join the ack's commit.
    door.streams.settled(split.parsed)
    failures = await answers.of(future)
    error = convert.ack_failures_error(failures)
    if error is not None:
        raise error
    return EMPTY


async def modify_ack_deadline(door: GrpcDoor, request: Any, call: Call) -> bytes:
    name = subscription_name(request.subscription)
    await call.check("modify_ack_deadline", _sub_params(name))
    ack_ids = list(request.ack_ids)
    if not ack_ids:
        return EMPTY
    seconds = request.ack_deadline_seconds
    split = door.streams.changing(name, split_malformed(ack_ids), seconds)  # receipts: here
    if not split.ids and not split.malformed:
        return EMPTY
    future = door.engine.modify_ack_deadline_future(name, split.ids, seconds, split)
    failures = await answers.of(future)
    door.streams.extended(split, seconds, failures)
    error = convert.ack_failures_error(failures)
    if error is not None:
        raise error
    return EMPTY


# -- IAMPolicy ---------------------------------------------------------------------------------

_IAM_KINDS = {"topics": "topic", "subscriptions": "subscription", "snapshots": "snapshot"}


def _iam_resource(path: str) -> tuple[str, dict[str, str], Resource]:
    """``projects/p`` or ``projects/p/{topics|subscriptions|snapshots}/id``."""
    match path.split("/"):
        case ["projects", project]:
            resource = auth.iam_resource("project", project, "")
            return "project", {"project": resource.project}, resource
        case ["projects", project, collection, resource_id] if collection in _IAM_KINDS:
            kind = _IAM_KINDS[collection]
            resource = auth.iam_resource(kind, project, resource_id)
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

_METHODS: Methods = {
    PUBLISHER: {**admin_methods(PUBLISHER_ADMIN), "Publish": (publish_request.read, publish)},
    SUBSCRIBER: {
        **admin_methods(SUBSCRIBER_ADMIN),
        "ModifyAckDeadline": (pb(ps.ModifyAckDeadlineRequest), modify_ack_deadline),
        "Acknowledge": (pb(ps.AcknowledgeRequest), acknowledge),
        "Pull": (pb(ps.PullRequest), pull),
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
