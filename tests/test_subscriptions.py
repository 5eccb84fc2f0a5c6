"""Subscription admin: create, get, list, update, delete, validation."""

from __future__ import annotations

import pytest

from lakepubsub import (
    Engine,
    PublishMessage,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
    TruncationPolicy,
    errors,
)

TOPIC = TopicName("proj", "topic-1")


@pytest.fixture
def topic(engine: Engine) -> TopicName:
    engine.create_topic(Topic(TOPIC))
    return TOPIC


def test_create_get_duplicate(engine: Engine, topic: TopicName) -> None:
    name = SubscriptionName("proj", "sub-1")
    sub = engine.create_subscription(
        Subscription(
            name,
            topic,
            ack_deadline_s=30,
            labels={"env": "test"},
            truncation_policy=TruncationPolicy(max_bytes=1_000_000),
        )
    )
    assert sub.uid and sub.topic_uid == engine.get_topic(topic).uid
    got = engine.get_subscription(name)
    assert got.ack_deadline_s == 30
    assert got.labels == {"env": "test"}
    assert got.truncation_policy == TruncationPolicy(max_bytes=1_000_000)
    with pytest.raises(errors.AlreadyExists):
        engine.create_subscription(Subscription(name, topic))


def test_create_needs_the_topic(engine: Engine) -> None:
    with pytest.raises(errors.NotFound):
        engine.create_subscription(Subscription(SubscriptionName("proj", "sub-1"), TOPIC))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ack_deadline_s": 9},
        {"ack_deadline_s": 601},
        {"message_retention_s": 60},
        {"truncation_policy": TruncationPolicy()},
        {"truncation_policy": TruncationPolicy(max_bytes=-1)},
        {"filter": "x" * 257},
        {"labels": {"Bad": "x"}},
        {"expiration_ttl_s": 3600},
    ],
)
def test_invalid_settings_are_rejected(engine: Engine, topic: TopicName, kwargs: dict) -> None:  # type: ignore[type-arg]
    name = SubscriptionName("proj", "bad")
    with pytest.raises(errors.InvalidArgument):
        engine.create_subscription(Subscription(name, topic, **kwargs))
    with pytest.raises(errors.NotFound):
        engine.get_subscription(name)


def test_subscription_point_is_creation(engine: Engine, topic: TopicName) -> None:
    engine.publish(topic, [PublishMessage(b"before")])
    name = SubscriptionName("proj", "late")
    engine.create_subscription(Subscription(name, topic))
    engine.publish(topic, [PublishMessage(b"after")])
    got = engine.pull(name, max_messages=10)
    assert [r.message.data for r in got if r.message] == [b"after"]


def test_list_and_topic_subscriptions(engine: Engine, topic: TopicName) -> None:
    other = TopicName("proj", "topic-2")
    engine.create_topic(Topic(other))
    for i in range(5):
        engine.create_subscription(Subscription(SubscriptionName("proj", f"sub{i}"), topic))
    engine.create_subscription(Subscription(SubscriptionName("proj", "x-other"), other))
    subs, token = engine.list_subscriptions("proj", page_size=4)
    assert len(subs) == 4 and token
    rest, token2 = engine.list_subscriptions("proj", page_size=4, page_token=token)
    assert [s.name.id for s in subs + rest] == ["sub0", "sub1", "sub2", "sub3", "sub4", "x-other"]
    assert token2 == ""
    names, _ = engine.list_topic_subscriptions(topic)
    assert names == [f"projects/proj/subscriptions/sub{i}" for i in range(5)]


def test_update_mutable_and_refuse_immutable(engine: Engine, topic: TopicName) -> None:
    name = SubscriptionName("proj", "upd")
    engine.create_subscription(Subscription(name, topic))
    updated = engine.update_subscription(
        name, {"ack_deadline_s": 120, "labels": {"a": "b"}}, ["ack_deadline_s", "labels"]
    )
    assert updated.ack_deadline_s == 120
    assert engine.get_subscription(name).labels == {"a": "b"}
    with pytest.raises(errors.InvalidArgument):
        engine.update_subscription(name, {"filter": "attributes:x"}, ["filter"])
    with pytest.raises(errors.InvalidArgument):
        engine.update_subscription(name, {"ack_deadline_s": 5}, ["ack_deadline_s"])
    assert engine.get_subscription(name).ack_deadline_s == 120


def test_delete_drops_pending(engine: Engine, topic: TopicName) -> None:
    name = SubscriptionName("proj", "gone")
    engine.create_subscription(Subscription(name, topic))
    engine.publish(topic, [PublishMessage(b"pending")])
    engine.delete_subscription(name)
    with pytest.raises(errors.NotFound):
        engine.pull(name, max_messages=1)
    with pytest.raises(errors.NotFound):
        engine.delete_subscription(name)
    engine.create_subscription(Subscription(name, topic))
    assert engine.pull(name, max_messages=10, return_immediately=True) == []
