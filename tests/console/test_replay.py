"""Replaying dead letters against a real lake (local and S3): what a subscription
dead-lettered goes back to its topic as first published, is acknowledged in the
dead-letter subscription only after that, and nothing else is touched."""

from __future__ import annotations

import time

import pytest

from api.console import replay
from lakepubsub import Engine, errors
from lakepubsub.messages import PublishMessage, ReceivedMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import DeadLetterPolicy, Subscription
from lakepubsub.resources.topics import Topic

TOPIC, DEAD = TopicName("demo", "orders"), TopicName("demo", "orders-dead")
SUB, OTHER = SubscriptionName("demo", "orders-sub"), SubscriptionName("demo", "orders-x")
DEAD_SUB = SubscriptionName("demo", "orders-dead-sub")
ATTEMPTS = 5
WAIT_S = 60.0


def _exhaust(engine: Engine, sub: SubscriptionName, count: int) -> None:
    """Nack what ``sub`` delivers until ``count`` messages were delivered ATTEMPTS times."""
    deadline = time.monotonic() + WAIT_S
    attempts: dict[str, int] = {}
    while sum(1 for n in attempts.values() if n >= ATTEMPTS) < count:
        assert time.monotonic() < deadline, attempts
        got = engine.pull(sub, max_messages=10, return_immediately=True)
        for r in got:
            assert r.message is not None
            attempts[r.message.message_id] = r.delivery_attempt
        if got:
            engine.nack(sub, [r.ack_id for r in got])
        time.sleep(0.05)
    # The last nack makes them due once more: the dispatcher dead-letters them then.
    while engine.pull(sub, max_messages=10, return_immediately=True):
        assert time.monotonic() < deadline
    time.sleep(0.5)


def _pull_all(engine: Engine, sub: SubscriptionName) -> list[ReceivedMessage]:
    got = engine.pull(sub, max_messages=100, return_immediately=True)
    engine.acknowledge(sub, [r.ack_id for r in got])
    return got


def test_replay_republishes_what_the_subscription_dead_lettered_and_only_that(
    engine: Engine,
) -> None:
    for topic in (TOPIC, DEAD):
        engine.create_topic(Topic(topic))
    policy = DeadLetterPolicy(DEAD, ATTEMPTS)
    engine.create_subscription(Subscription(SUB, TOPIC, dead_letter_policy=policy))
    # Another subscription dead-letters to the same topic: its dead letters stay there.
    engine.create_subscription(
        Subscription(OTHER, TOPIC, filter='attributes.kind = "x"', dead_letter_policy=policy)
    )
    engine.create_subscription(Subscription(DEAD_SUB, DEAD))
    sent = [
        PublishMessage(b"one", {"kind": "x", "n": "1"}, "customer-1"),
        PublishMessage(b"two", {"kind": "y", "n": "2"}, "customer-1"),
        PublishMessage(b"three", {"kind": "y", "n": "3"}),
    ]
    engine.publish(TOPIC, sent)
    _exhaust(engine, SUB, 3)
    _exhaust(engine, OTHER, 1)

    # A publish that fails (no such topic) replays nothing and leaves every message.
    with pytest.raises(errors.NotFound, match="are back in"):
        replay.replay(engine, SUB, TopicName("demo", "gone"), DEAD_SUB, DEAD)

    done = replay.replay(engine, SUB, TOPIC, DEAD_SUB, DEAD)
    assert (done.replayed, done.not_acknowledged, len(done.others), done.more) == (3, 0, 1, False)
    text = replay.summary(done, TOPIC, DEAD_SUB)
    assert text.startswith("Replayed 3 dead-lettered messages")
    assert "1 dead-lettered from other subscriptions was left" in text

    again = _pull_all(engine, SUB)
    got = sorted((r.message for r in again if r.message is not None), key=lambda m: m.offset)
    assert [(m.data, m.ordering_key) for m in got] == [(m.data, m.ordering_key) for m in sent]
    for message, original in zip(got, sent, strict=True):
        replayed_from = message.attributes[replay.REPLAYED_FROM]
        assert replayed_from.startswith(f"{DEAD.path}@")
        assert {k: v for k, v in message.attributes.items() if k != replay.REPLAYED_FROM} == dict(
            original.attributes
        )
    assert [m.message_id for m in got] == done.message_ids

    # The dead-letter subscription keeps only the other subscription's message, and a
    # second replay finds nothing of this subscription's.
    second = replay.replay(engine, SUB, TOPIC, DEAD_SUB, DEAD)
    assert (second.replayed, len(second.others)) == (0, 1)
    assert replay.summary(second, TOPIC, DEAD_SUB).startswith("Nothing replayed")
    left = _pull_all(engine, DEAD_SUB)
    assert [r.message.attributes[replay.SOURCE_SUBSCRIPTION] for r in left if r.message] == [
        OTHER.id
    ]
