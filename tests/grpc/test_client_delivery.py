"""Google's unmodified Python client over gRPC: publish, ``subscribe()`` (StreamingPull)
and the delivery semantics that clients observe through it."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber import exceptions as sub_exceptions
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.types import FlowControl, PublisherOptions
from grpckit import Names, Serve, rest, wait_until

Callback = Callable[[Message], None]


@contextmanager
def subscribed(
    subscriber: pubsub_v1.SubscriberClient,
    subscription: str,
    callback: Callback,
    flow_control: FlowControl | None = None,
) -> Iterator[None]:
    future = subscriber.subscribe(subscription, callback, flow_control=flow_control or ())
    try:
        yield
    finally:
        future.cancel()
        future.result(timeout=30)


def setup(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
    **options: object,
) -> tuple[str, str]:
    topic = publisher.create_topic(name=names.topic()).name
    sub = subscriber.create_subscription(
        request={"name": names.subscription(), "topic": topic, **options}
    ).name
    return topic, sub


def test_publish_with_batching_and_subscribe(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = setup(publisher, subscriber, names)
    futures = [publisher.publish(topic, f"m{i}".encode(), i=str(i)) for i in range(500)]
    ids = [f.result(timeout=30) for f in futures]
    assert len(set(ids)) == 500
    seen: dict[str, Message] = {}
    lock = threading.Lock()

    def callback(message: Message) -> None:
        with lock:
            seen[message.message_id] = message
        message.ack()

    with subscribed(subscriber, sub, callback):
        assert wait_until(lambda: len(seen) == 500, 60)
    assert sorted(seen) == sorted(ids)
    message = seen[ids[7]]
    assert message.data == b"m7"
    assert message.attributes["i"] == "7"
    assert abs((datetime.now(UTC) - message.publish_time).total_seconds()) < 120
    # Acked: nothing comes back.
    response = subscriber.pull(subscription=sub, max_messages=10, timeout=10)
    assert list(response.received_messages) == []


def test_ordering_keys_in_order(
    subscriber: pubsub_v1.SubscriberClient, names: Names, emulator: Serve
) -> None:
    publisher = pubsub_v1.PublisherClient(
        publisher_options=PublisherOptions(enable_message_ordering=True)
    )
    try:
        topic, sub = setup(publisher, subscriber, names, enable_message_ordering=True)
        keys = ["a", "b", "c"]
        futures = [
            publisher.publish(topic, f"{key}-{i}".encode(), ordering_key=key)
            for i in range(40)
            for key in keys
        ]
        for f in futures:
            f.result(timeout=30)
    finally:
        publisher.stop()
    order: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def callback(message: Message) -> None:
        key, i = message.data.decode().split("-")
        assert message.ordering_key == key
        with lock:
            order[key].append(int(i))
        message.ack()

    with subscribed(subscriber, sub, callback):
        assert wait_until(lambda: sum(len(v) for v in order.values()) >= 120, 90)
    for key in keys:
        assert order[key] == list(range(40)), key


def test_flow_control_limits_outstanding(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = setup(publisher, subscriber, names)
    for f in [publisher.publish(topic, b"x" * 100) for _ in range(60)]:
        f.result(timeout=30)
    lock = threading.Lock()
    active = 0
    peak = 0
    done = 0

    def callback(message: Message) -> None:
        nonlocal active, peak, done
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
            done += 1
        message.ack()

    with subscribed(subscriber, sub, callback, FlowControl(max_messages=5)):
        assert wait_until(lambda: done >= 60, 60)
    assert 1 <= peak <= 5


def test_nack_redelivers_with_attempts_and_dead_letter(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    dead = publisher.create_topic(name=names.topic("dead")).name
    dead_sub = subscriber.create_subscription(name=names.subscription("dead"), topic=dead).name
    topic, sub = setup(
        publisher,
        subscriber,
        names,
        dead_letter_policy={"dead_letter_topic": dead, "max_delivery_attempts": 5},
    )
    publisher.publish(topic, b"poison").result(timeout=30)
    attempts: list[int | None] = []

    def callback(message: Message) -> None:
        attempts.append(message.delivery_attempt)
        message.nack()

    with subscribed(subscriber, sub, callback):
        assert wait_until(lambda: len(attempts) >= 5, 60)
        dead_letters = []

        def on_dead(message: Message) -> None:
            dead_letters.append(message)
            message.ack()

        with subscribed(subscriber, dead_sub, on_dead):
            assert wait_until(lambda: len(dead_letters) >= 1, 60)
    assert attempts[:5] == [1, 2, 3, 4, 5]
    assert dead_letters[0].data == b"poison"
    assert dead_letters[0].attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"


def test_lease_extension_by_the_client(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    """A callback slower than the ack deadline: the client's lease manager extends the
    lease with ModifyAckDeadline and the message is not delivered twice."""
    topic, sub = setup(publisher, subscriber, names, ack_deadline_seconds=10)
    publisher.publish(topic, b"slow").result(timeout=30)
    deliveries: list[str] = []

    def callback(message: Message) -> None:
        deliveries.append(message.message_id)
        time.sleep(14)
        message.ack()

    with subscribed(subscriber, sub, callback):
        assert wait_until(lambda: len(deliveries) >= 1, 30)
        time.sleep(16)
    assert len(deliveries) == 1


def test_exactly_once_ack_with_response(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = setup(publisher, subscriber, names, enable_exactly_once_delivery=True)
    for f in [publisher.publish(topic, f"e{i}".encode()) for i in range(20)]:
        f.result(timeout=30)
    results: dict[str, object] = {}
    lock = threading.Lock()

    def callback(message: Message) -> None:
        outcome = message.ack_with_response().result(timeout=30)
        with lock:
            results[message.message_id] = outcome

    with subscribed(subscriber, sub, callback):
        assert wait_until(lambda: len(results) == 20, 60)
    assert set(results.values()) == {sub_exceptions.AcknowledgeStatus.SUCCESS}


def test_exactly_once_stale_ack_fails(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = setup(publisher, subscriber, names, enable_exactly_once_delivery=True)
    publisher.publish(topic, b"once").result(timeout=30)
    first = subscriber.pull(subscription=sub, max_messages=1, timeout=10).received_messages[0]
    subscriber.modify_ack_deadline(subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=0)
    second = subscriber.pull(subscription=sub, max_messages=1, timeout=10).received_messages[0]
    assert second.ack_id != first.ack_id

    with pytest.raises(exceptions.InvalidArgument) as failure:
        subscriber.acknowledge(subscription=sub, ack_ids=[first.ack_id])
    assert "ack id" in str(failure.value)
    subscriber.acknowledge(subscription=sub, ack_ids=[second.ack_id])


def test_filter(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = setup(publisher, subscriber, names, filter='attributes.kind = "keep"')
    for i in range(30):
        publisher.publish(topic, f"{i}".encode(), kind="keep" if i % 3 == 0 else "drop")
    publisher.publish(topic, b"last", kind="keep").result(timeout=30)
    got: list[bytes] = []

    def callback(message: Message) -> None:
        got.append(message.data)
        message.ack()

    with subscribed(subscriber, sub, callback):
        assert wait_until(lambda: b"last" in got, 60)
        time.sleep(0.5)
    assert sorted(got) == sorted([f"{i}".encode() for i in range(0, 30, 3)] + [b"last"])


def test_seek_to_time_and_snapshot(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = setup(publisher, subscriber, names)
    publisher.publish(topic, b"before").result(timeout=30)
    subscriber.create_snapshot(name=names.snapshot(), subscription=sub)
    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    publisher.publish(topic, b"after").result(timeout=30)

    def drain() -> list[bytes]:
        got: list[bytes] = []
        while True:
            # Waits the server's LAKEPUBSUB_PULL_WAIT_S (2 s here) when nothing is left.
            response = subscriber.pull(subscription=sub, max_messages=10, timeout=10)
            if not response.received_messages:
                return sorted(got)
            got += [r.message.data for r in response.received_messages]
            subscriber.acknowledge(
                subscription=sub, ack_ids=[r.ack_id for r in response.received_messages]
            )

    assert drain() == [b"after", b"before"]
    subscriber.seek(request={"subscription": sub, "time": middle})
    assert drain() == [b"after"]
    subscriber.seek(request={"subscription": sub, "snapshot": names.snapshot()})
    assert drain() == [b"after", b"before"]


def test_truncation_event_through_subscribe(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
    emulator: Serve,
) -> None:
    """A truncation reaches StreamingPull subscribers as a message without data whose
    attributes describe it, before newer messages."""
    topic, sub = setup(publisher, subscriber, names)
    for f in [publisher.publish(topic, f"old{i}".encode()) for i in range(5)]:
        f.result(timeout=30)
    project, _, sub_id = sub.split("/")[1:]
    with rest(emulator) as http:
        event = http.post(f"/v1/projects/{project}/subscriptions/{sub_id}:truncate").json()
    assert event["event"]["endOffset"] == 5
    publisher.publish(topic, b"new").result(timeout=30)
    got: list[Message] = []

    def callback(message: Message) -> None:
        got.append(message)
        message.ack()

    with subscribed(subscriber, sub, callback):
        assert wait_until(lambda: any(m.data == b"new" for m in got), 60)
    assert got[0].data == b""
    assert got[0].attributes["lakepubsub.event"] == "truncated"
    assert got[0].attributes["lakepubsub.end_offset"] == "5"
    assert got[0].message_id.startswith("event-")
    assert [m.data for m in got[1:]] == [b"new"]
