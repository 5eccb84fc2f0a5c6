"""Where the gRPC door must answer as Google does (issue 15): fields the message type
does not have, fields of features that are not built, Google's attribute rules and
when ``delivery_attempt`` is set; with grpcio at the wire and Google's own client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.types import PublisherOptions
from google.protobuf import field_mask_pb2
from google.pubsub_v1.types import pubsub as ps
from grpckit import Names, Serve, start_serve, stop_serve, wait_until
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from support import LakeSpec

PUB = "/google.pubsub.v1.Publisher/"
SUB = "/google.pubsub.v1.Subscriber/"
# A varint field numbered 999, which no Pub/Sub message has.
UNKNOWN_FIELD = b"\xb8\x3e\x01"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    root = tmp_path_factory.mktemp("fidelity-grpc")
    srv = start_serve(LakeSpec(str(root / "lake"), {}), Path(root))
    yield srv
    stop_serve(srv)


@pytest.fixture
def emulator(serve: Serve, monkeypatch: pytest.MonkeyPatch) -> Serve:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", serve.host)
    return serve


@pytest.fixture
def publisher(emulator: Serve) -> Iterator[pubsub_v1.PublisherClient]:
    client = pubsub_v1.PublisherClient()
    yield client
    client.stop()
    client.transport.close()


@pytest.fixture
def subscriber(emulator: Serve) -> Iterator[pubsub_v1.SubscriberClient]:
    with pubsub_v1.SubscriberClient() as client:
        yield client


@pytest.fixture
def names() -> Names:
    return Names(uuid.uuid4().hex[:8])


@pytest.fixture
def channel(serve: Serve) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(serve.host) as ch:
        yield ch


def raw_call(channel: grpc.Channel, path: str, raw: bytes, response_type: Any) -> Any:
    method = channel.unary_unary(path, response_deserializer=response_type.FromString)
    return method(raw, timeout=30)


# -- fields a message type does not have ----------------------------------------------------


def test_an_unknown_field_is_named_and_creates_nothing(
    channel: grpc.Channel, publisher: pubsub_v1.PublisherClient, names: Names
) -> None:
    topic = ps.Topic.pb()(name=names.topic())
    with pytest.raises(grpc.RpcError) as failure:
        raw_call(
            channel, PUB + "CreateTopic", topic.SerializeToString() + UNKNOWN_FIELD, ps.Topic.pb()
        )
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown field number 999 in google.pubsub.v1.Topic" in (failure.value.details() or "")
    with pytest.raises(exceptions.NotFound):
        publisher.get_topic(topic=names.topic())


def test_an_unknown_field_inside_a_message_is_named_and_publishes_nothing(
    channel: grpc.Channel,
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
) -> None:
    topic = publisher.create_topic(name=names.topic()).name
    sub = subscriber.create_subscription(name=names.subscription(), topic=topic).name
    good = ps.PubsubMessage.pb()(data=b"ok").SerializeToString()
    bad = ps.PubsubMessage.pb()(data=b"no").SerializeToString() + UNKNOWN_FIELD
    request = ps.PublishRequest.pb()(topic=topic).SerializeToString()
    for item in (good, bad):  # field 2, length-delimited: messages
        request += b"\x12" + bytes([len(item)]) + item
    with pytest.raises(grpc.RpcError) as failure:
        raw_call(channel, PUB + "Publish", request, ps.PublishResponse.pb())
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = failure.value.details() or ""
    assert "google.pubsub.v1.PubsubMessage at 'PublishRequest.messages[1]'" in details
    pulled = subscriber.pull(subscription=sub, max_messages=10)
    assert list(pulled.received_messages) == []


# -- fields of features that are not built --------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "json_name"),
    [
        ("bigquery_config", {"table": "p.d.t"}, "bigqueryConfig"),
        ("cloud_storage_config", {"bucket": "b"}, "cloudStorageConfig"),
        ("message_transforms", [{"javascript_udf": {"function_name": "f"}}], "messageTransforms"),
    ],
)
def test_unbuilt_subscription_fields_are_refused_alike_on_create_and_update(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
    field: str,
    value: Any,
    json_name: str,
) -> None:
    topic = publisher.create_topic(name=names.topic()).name
    with pytest.raises(exceptions.InvalidArgument) as created:
        subscriber.create_subscription(
            request={"name": names.subscription(), "topic": topic, field: value}
        )
    assert f"subscription.{json_name}: " in created.value.message
    assert "not built in lakepubsub" in created.value.message
    with pytest.raises(exceptions.NotFound):
        subscriber.get_subscription(subscription=names.subscription())
    sub = subscriber.create_subscription(name=names.subscription(), topic=topic)
    with pytest.raises(exceptions.InvalidArgument) as updated:
        subscriber.update_subscription(
            subscription={"name": sub.name, field: value},
            update_mask=field_mask_pb2.FieldMask(paths=[field]),
        )
    assert updated.value.message == created.value.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kms_key_name", "projects/p/locations/l/keyRings/r/cryptoKeys/k"),
        ("message_storage_policy", {"allowed_persistence_regions": ["europe-west1"]}),
        ("ingestion_data_source_settings", {"aws_kinesis": {"stream_arn": "arn:x"}}),
    ],
)
def test_unbuilt_topic_fields_are_refused_alike_on_create_and_update(
    publisher: pubsub_v1.PublisherClient, names: Names, field: str, value: Any
) -> None:
    with pytest.raises(exceptions.InvalidArgument) as created:
        publisher.create_topic(request={"name": names.topic(), field: value})
    assert "not built in lakepubsub" in created.value.message
    with pytest.raises(exceptions.NotFound):
        publisher.get_topic(topic=names.topic())
    publisher.create_topic(name=names.topic())
    with pytest.raises(exceptions.InvalidArgument) as updated:
        publisher.update_topic(
            topic={"name": names.topic(), field: value},
            update_mask=field_mask_pb2.FieldMask(paths=[field]),
        )
    assert updated.value.message == created.value.message


# -- attributes -----------------------------------------------------------------------------


def test_publishing_with_opentelemetry_tracing_on(
    emulator: Serve, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    """The client then adds googclient_traceparent to every message (with a tracer
    provider set, so that there is a trace to propagate)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    options = PublisherOptions(enable_open_telemetry_tracing=True)
    traced = pubsub_v1.PublisherClient(publisher_options=options)
    try:
        topic = traced.create_topic(name=names.topic()).name
        sub = subscriber.create_subscription(name=names.subscription(), topic=topic).name
        traced.publish(topic, b"traced", kind="t").result(timeout=30)
        with pytest.raises(exceptions.InvalidArgument):
            traced.publish(topic, b"x", goog_own="no").result(timeout=30)
    finally:
        traced.stop()
        traced.transport.close()
    pulled = subscriber.pull(subscription=sub, max_messages=10)
    [received] = pulled.received_messages
    assert received.message.data == b"traced"
    assert "googclient_traceparent" in received.message.attributes


# -- delivery_attempt -----------------------------------------------------------------------


def test_delivery_attempt_only_with_a_dead_letter_policy(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic = publisher.create_topic(name=names.topic()).name
    dead = publisher.create_topic(name=names.topic("dead")).name
    plain = subscriber.create_subscription(name=names.subscription("plain"), topic=topic).name
    policy = {"dead_letter_topic": dead, "max_delivery_attempts": 5}
    with_policy = subscriber.create_subscription(
        request={"name": names.subscription("dlq"), "topic": topic, "dead_letter_policy": policy}
    ).name
    publisher.publish(topic, b"x").result(timeout=30)
    plain_pull = subscriber.pull(subscription=plain, max_messages=10)
    assert [r.delivery_attempt for r in plain_pull.received_messages] == [0]
    dlq_pull = subscriber.pull(subscription=with_policy, max_messages=10)
    assert [r.delivery_attempt for r in dlq_pull.received_messages] == [1]
    subscriber.modify_ack_deadline(
        subscription=plain,
        ack_ids=[plain_pull.received_messages[0].ack_id],
        ack_deadline_seconds=0,
    )
    streamed: list[Message] = []

    def callback(message: Message) -> None:
        streamed.append(message)
        message.ack()

    future = subscriber.subscribe(plain, callback)
    try:
        assert wait_until(lambda: len(streamed) >= 1, 60)
    finally:
        future.cancel()
        future.result(timeout=30)
    assert streamed[0].delivery_attempt is None  # the client's word for "not set"
