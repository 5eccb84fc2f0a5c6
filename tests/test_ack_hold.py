"""Plain acks of a subscription whose lease changes wait in memory wait for a
dispatcher cycle that runs anyway, up to the flush window, instead of starting
one each (real engine, real lease tables, real dispatcher threads)."""

from __future__ import annotations

import time
from dataclasses import replace

from support import LakeSpec

from lakepubsub import Engine
from lakepubsub.delivery.dispatcher import ack_hold_s
from lakepubsub.delivery.requests import AckRequest
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import PushConfig, Subscription
from lakepubsub.resources.topics import Topic

FLUSH_MS = 3_000.0
LEASE_FLUSH_MS = 20_000.0


def test_a_plain_ack_waits_for_the_next_cycle_and_a_nack_does_not(
    local_lake: LakeSpec,
) -> None:
    settings = local_lake.settings(lease_flush_ms=LEASE_FLUSH_MS, flush_ms=FLUSH_MS)
    topic, sub = TopicName("hold", "topic"), SubscriptionName("hold", "sub")
    with Engine(settings) as engine:
        engine.create_topic(Topic(topic))
        engine.create_subscription(Subscription(sub, topic))
        engine.publish(topic, [PublishMessage(b"a"), PublishMessage(b"b")])
        first, second = engine.pull(sub, max_messages=2)

        # Alone, an ack starts no cycle: it is answered when its wait is over.
        started = time.monotonic()
        assert engine.acknowledge(sub, [first.ack_id]) == {}
        alone_s = time.monotonic() - started
        assert alone_s >= 0.9 * FLUSH_MS / 1000, alone_s

        # A nack may free a message: it does not wait.
        started = time.monotonic()
        assert engine.nack(sub, [second.ack_id]) == {}
        assert time.monotonic() - started < FLUSH_MS / 1000 / 2
        (again,) = engine.pull(sub, max_messages=1)
        assert again.message.data == b"b"

        # A waiting pull's cycles (here its polls of the local lake, on S3 the
        # publishes it is told of) take the ack long before its wait is over.
        waiting = engine.pull_future(sub, max_messages=1)
        started = time.monotonic()
        assert engine.acknowledge(sub, [again.ack_id]) == {}
        assert time.monotonic() - started < FLUSH_MS / 1000 / 2
        engine.publish(topic, [PublishMessage(b"c")])
        (third,) = waiting.result(timeout=2 * FLUSH_MS / 1000)
        assert third.message.data == b"c"

        # Every ack was applied: nothing but the third message is left.
        assert engine.acknowledge(sub, [third.ack_id]) == {}
        assert engine.pull(sub, max_messages=10, return_immediately=True) == []


def test_only_plain_acks_of_deferring_subscriptions_wait(local_lake: LakeSpec) -> None:
    settings = local_lake.settings(lease_flush_ms=LEASE_FLUSH_MS, flush_ms=FLUSH_MS)
    sub = Subscription(SubscriptionName("hold", "sub"), TopicName("hold", "topic"))
    plain = AckRequest([], None)
    assert ack_hold_s(plain, sub, settings, peered=True) == FLUSH_MS / 1000
    assert ack_hold_s(AckRequest([], 0), sub, settings, peered=True) == 0.0  # a nack
    assert ack_hold_s(AckRequest([], 30), sub, settings, peered=True) == 0.0
    for other in (
        replace(sub, enable_exactly_once_delivery=True),
        replace(sub, enable_message_ordering=True),
        replace(sub, push_config=PushConfig(push_endpoint="https://example.com/push")),
    ):
        assert ack_hold_s(plain, other, settings, peered=True) == 0.0
    committing = local_lake.settings(lease_flush_ms=0.0, flush_ms=FLUSH_MS)
    assert ack_hold_s(plain, sub, committing, peered=True) == 0.0


def test_an_ack_joins_the_cycle_of_the_publish_a_waiting_pull_is_told_of(
    local_lake: LakeSpec,
) -> None:
    # A dry pull waits for a nudge, not a poll, as on S3 (change_check_s).
    settings = local_lake.settings(
        lease_flush_ms=LEASE_FLUSH_MS, flush_ms=FLUSH_MS, change_check_s=60.0, pull_wait_s=60.0
    )
    topic, sub = TopicName("hold", "topic"), SubscriptionName("hold", "sub")
    with Engine(settings) as engine:
        engine.create_topic(Topic(topic))
        engine.create_subscription(Subscription(sub, topic))
        engine.publish(topic, [PublishMessage(b"a")])
        published = time.monotonic()
        (first,) = engine.pull(sub, max_messages=1)
        waiting = engine.pull_future(sub, max_messages=1)
        # The next publish commits at once once the topic's flush window is over.
        time.sleep(max(0.0, published + FLUSH_MS / 1000 + 0.2 - time.monotonic()))
        acked_at = time.monotonic()
        acked = engine.acknowledge_future(sub, [first.ack_id])
        time.sleep(0.2)
        assert not acked.done() and not waiting.done()
        engine.publish(topic, [PublishMessage(b"b")])
        (second,) = waiting.result(timeout=2 * FLUSH_MS / 1000)
        # The cycle that delivered it answered the ack first.
        assert acked.done() and acked.result() == {}
        assert time.monotonic() - acked_at < FLUSH_MS / 1000 / 2
        assert second.message.data == b"b"
        assert engine.acknowledge(sub, [second.ack_id]) == {}
        assert engine.pull(sub, max_messages=10, return_immediately=True) == []
