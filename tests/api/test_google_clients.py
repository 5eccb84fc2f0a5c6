"""Unmodified Google clients against the server: google-cloud-pubsub (REST transport)
and google-api-python-client (discovery document shipped in the package)."""

from __future__ import annotations

import base64
import time

import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2, timestamp_pb2
from google.pubsub_v1 import PublisherClient as GapicPublisher
from google.pubsub_v1.types import DeadLetterPolicy, PubsubMessage, RetryPolicy
from googleapiclient import discovery
from googleapiclient.errors import HttpError

PROJECT = "compat"


@pytest.fixture
def publisher(server):  # type: ignore[no-untyped-def]
    return pubsub_v1.PublisherClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=server.url),
    )


@pytest.fixture
def subscriber(server):  # type: ignore[no-untyped-def]
    # Not closed: SubscriberClient.close() assumes a gRPC channel (a client-library bug
    # with transport="rest").
    return pubsub_v1.SubscriberClient(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=server.url),
    )


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_google_cloud_pubsub_rest(publisher, subscriber) -> None:  # type: ignore[no-untyped-def]
    topic = publisher.topic_path(PROJECT, "compat-topic")
    sub = subscriber.subscription_path(PROJECT, "compat-sub")
    publisher.create_topic(name=topic)
    with pytest.raises(gexc.Conflict):  # HTTP 409, as for real Pub/Sub over REST
        publisher.create_topic(name=topic)
    assert publisher.get_topic(topic=topic).name == topic
    assert topic in [t.name for t in publisher.list_topics(project=f"projects/{PROJECT}")]
    with pytest.raises(gexc.NotFound):
        publisher.get_topic(topic=publisher.topic_path(PROJECT, "missing"))

    subscriber.create_subscription(name=sub, topic=topic, ack_deadline_seconds=30)
    with pytest.raises(gexc.Conflict):  # HTTP 409, as for real Pub/Sub over REST
        subscriber.create_subscription(name=sub, topic=topic)
    assert subscriber.get_subscription(subscription=sub).ack_deadline_seconds == 30

    futures = [publisher.publish(topic, f"m{i}".encode(), origin="test") for i in range(5)]
    ids = [f.result(timeout=30) for f in futures]
    assert len(set(ids)) == 5

    response = subscriber.pull(subscription=sub, max_messages=10, timeout=30)
    received = list(response.received_messages)
    assert sorted(r.message.data for r in received) == [f"m{i}".encode() for i in range(5)]
    assert all(r.message.attributes["origin"] == "test" for r in received)
    subscriber.modify_ack_deadline(
        subscription=sub, ack_ids=[received[0].ack_id], ack_deadline_seconds=0
    )
    subscriber.acknowledge(subscription=sub, ack_ids=[r.ack_id for r in received[1:]])
    again = subscriber.pull(subscription=sub, max_messages=10, timeout=30).received_messages
    assert [r.message.data for r in again] == [received[0].message.data]
    subscriber.acknowledge(subscription=sub, ack_ids=[again[0].ack_id])

    subscriber.delete_subscription(subscription=sub)
    with pytest.raises(gexc.NotFound):
        subscriber.get_subscription(subscription=sub)
    publisher.delete_topic(topic=topic)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_google_api_python_client(server) -> None:  # type: ignore[no-untyped-def]

    service = discovery.build(
        "pubsub",
        "v1",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": server.url},
        static_discovery=True,
    )
    topic = f"projects/{PROJECT}/topics/discovery-topic"
    sub = f"projects/{PROJECT}/subscriptions/discovery-sub"
    service.projects().topics().create(name=topic, body={}).execute()
    with pytest.raises(HttpError) as dup:
        service.projects().topics().create(name=topic, body={}).execute()
    assert dup.value.resp.status == 409
    service.projects().subscriptions().create(name=sub, body={"topic": topic}).execute()
    published = (
        service.projects()
        .topics()
        .publish(
            topic=topic,
            body={
                "messages": [{"data": base64.b64encode(b"hi").decode(), "attributes": {"a": "b"}}]
            },
        )
        .execute()
    )
    assert len(published["messageIds"]) == 1
    pulled = (
        service.projects()
        .subscriptions()
        .pull(subscription=sub, body={"maxMessages": 5, "returnImmediately": True})
        .execute()
    )
    (item,) = pulled["receivedMessages"]
    assert base64.b64decode(item["message"]["data"]) == b"hi"
    service.projects().subscriptions().modifyAckDeadline(
        subscription=sub, body={"ackIds": [item["ackId"]], "ackDeadlineSeconds": 60}
    ).execute()
    service.projects().subscriptions().acknowledge(
        subscription=sub, body={"ackIds": [item["ackId"]]}
    ).execute()
    listed = service.projects().topics().subscriptions().list(topic=topic).execute()
    assert listed["subscriptions"] == [sub]
    with pytest.raises(HttpError) as missing:
        service.projects().subscriptions().get(subscription=f"{sub}-nope").execute()
    assert missing.value.resp.status == 404


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_google_cloud_pubsub_subscription_features(publisher, subscriber) -> None:  # type: ignore[no-untyped-def]
    """Filters, ordering, dead-letter and retry policies, exactly-once, snapshots and
    seek, each set and used through the unmodified client library."""

    topic = publisher.topic_path(PROJECT, "features")
    dead = publisher.topic_path(PROJECT, "features-dead")
    for name in (topic, dead):
        publisher.create_topic(name=name)
    filtered = subscriber.subscription_path(PROJECT, "features-filtered")
    subscriber.create_subscription(
        request={"name": filtered, "topic": topic, "filter": 'attributes.kind = "keep"'}
    )
    with pytest.raises(gexc.BadRequest):  # HTTP 400 INVALID_ARGUMENT
        bad = subscriber.subscription_path(PROJECT, "features-bad")
        subscriber.create_subscription(
            request={"name": bad, "topic": topic, "filter": "attributes.kind = "}
        )
    exact = subscriber.subscription_path(PROJECT, "features-exact")
    subscriber.create_subscription(
        request={
            "name": exact,
            "topic": topic,
            "enable_exactly_once_delivery": True,
            "enable_message_ordering": True,
            "dead_letter_policy": DeadLetterPolicy(dead_letter_topic=dead, max_delivery_attempts=5),
            "retry_policy": RetryPolicy(
                minimum_backoff=duration_pb2.Duration(seconds=1),
                maximum_backoff=duration_pb2.Duration(seconds=5),
            ),
        }
    )
    got = subscriber.get_subscription(subscription=exact)
    assert got.enable_exactly_once_delivery and got.enable_message_ordering
    assert got.dead_letter_policy.max_delivery_attempts == 5
    assert got.retry_policy.maximum_backoff.seconds == 5
    assert got.ack_deadline_seconds == 60  # the exactly-once default
    assert subscriber.get_subscription(subscription=filtered).filter == 'attributes.kind = "keep"'

    # The generated client of the same package: the hand-written PublisherClient with
    # message ordering on the REST transport passes a read timeout of 2**32 s that
    # urllib3 turns into an immediate ReadTimeout (a client-library bug).
    gapic = GapicPublisher(
        credentials=AnonymousCredentials(),
        transport="rest",
        client_options=ClientOptions(api_endpoint=publisher.api_endpoint),
    )
    messages = [
        PubsubMessage(
            data=f"m{i}".encode(),
            ordering_key="k",
            attributes={"kind": "keep" if i % 2 == 0 else "drop"},
        )
        for i in range(4)
    ]
    gapic.publish(topic=topic, messages=messages, timeout=30)

    kept = subscriber.pull(subscription=filtered, max_messages=10, timeout=30).received_messages
    assert sorted(r.message.data for r in kept) == [b"m0", b"m2"]
    subscriber.acknowledge(subscription=filtered, ack_ids=[r.ack_id for r in kept])

    # Ordering: the key's messages in publish order, several in one pull.
    first = subscriber.pull(subscription=exact, max_messages=10, timeout=30).received_messages
    assert [r.message.data for r in first] == [b"m0", b"m1", b"m2", b"m3"]
    assert first[0].delivery_attempt == 1  # reported since a dead-letter policy is set
    # Exactly-once: after a nack and redelivery, only the newest ack id is valid.
    subscriber.modify_ack_deadline(
        subscription=exact, ack_ids=[r.ack_id for r in first], ack_deadline_seconds=0
    )
    time.sleep(1.5)  # the retry policy's minimum back-off
    again = subscriber.pull(subscription=exact, max_messages=10, timeout=30).received_messages
    assert [r.message.data for r in again] == [b"m0", b"m1", b"m2", b"m3"]
    assert again[0].ack_id != first[0].ack_id and again[0].delivery_attempt == 2
    with pytest.raises(gexc.BadRequest):  # HTTP 400 INVALID_ARGUMENT
        subscriber.acknowledge(subscription=exact, ack_ids=[first[0].ack_id])
    subscriber.acknowledge(subscription=exact, ack_ids=[r.ack_id for r in again])

    # Snapshot, then seek back to it: the acknowledged messages come again.
    snapshot = subscriber.snapshot_path(PROJECT, "features-snap")
    subscriber.create_snapshot(name=snapshot, subscription=filtered)
    assert snapshot in [s.name for s in subscriber.list_snapshots(project=f"projects/{PROJECT}")]
    seek_time = timestamp_pb2.Timestamp()
    seek_time.FromSeconds(0)
    subscriber.seek(request={"subscription": filtered, "time": seek_time})
    replayed = subscriber.pull(subscription=filtered, max_messages=10, timeout=30)
    assert sorted(r.message.data for r in replayed.received_messages) == [b"m0", b"m2"]
    subscriber.seek(request={"subscription": filtered, "snapshot": snapshot})
    subscriber.delete_snapshot(snapshot=snapshot)
    with pytest.raises(gexc.NotFound):
        subscriber.get_snapshot(snapshot=snapshot)
