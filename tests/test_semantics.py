"""Subscription semantics: filters, ordering keys, dead letters, retry back-off,
seek, snapshots, detach."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from support import Clock, LakeSpec

from lakepubsub import (
    DeadLetterPolicy,
    Engine,
    PublishMessage,
    ReceivedMessage,
    RetryPolicy,
    SnapshotName,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
    errors,
)

TOPIC = TopicName("proj", "semantics")
US = 1_000_000


def offsets(received: list[ReceivedMessage]) -> list[int]:
    return [r.message.offset for r in received if r.message is not None]


def make(engine: Engine, name: str, **kwargs: object) -> SubscriptionName:
    with contextlib.suppress(errors.AlreadyExists):
        engine.create_topic(Topic(TOPIC))
    sub = SubscriptionName("proj", name)
    engine.create_subscription(Subscription(sub, TOPIC, **kwargs))  # type: ignore[arg-type]
    return sub


# -- filters ------------------------------------------------------------------------


def test_filter_delivers_only_matches_and_acks_the_rest(engine: Engine) -> None:
    sub = make(
        engine, "filtered", filter='attributes.color = "red" OR hasPrefix(attributes.k, "x")'
    )
    engine.publish(
        TOPIC,
        [
            PublishMessage(b"0", {"color": "red"}),
            PublishMessage(b"1", {"color": "blue"}),
            PublishMessage(b"2", {"k": "xyz"}),
            PublishMessage(b"3"),
        ],
    )
    got = engine.pull(sub, max_messages=10)
    assert offsets(got) == [0, 2]
    engine.acknowledge(sub, [r.ack_id for r in got])
    state = engine.subscription_state(sub)
    assert state.rows == {} and state.floor() == 4, "non-matching messages count as acked"


def test_filter_scans_past_many_non_matching(engine: Engine) -> None:
    sub = make(engine, "sparse", filter="attributes:wanted")
    batch = [PublishMessage(b"x", {"n": str(i)}) for i in range(999)]
    engine.publish(TOPIC, [*batch, PublishMessage(b"y", {"wanted": "1"})])
    assert offsets(engine.pull(sub, max_messages=1)) == [999]


@pytest.mark.parametrize(
    "bad", ["attributes.x = ", "attributes:x AND attributes:y OR attributes:z", "x" * 257]
)
def test_invalid_filter_is_rejected(engine: Engine, bad: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        make(engine, "bad-filter", filter=bad)


def test_label_query_is_accepted_as_filter(engine: Engine) -> None:
    sub = make(engine, "labels", filter="region in (eu, us)")
    engine.publish(
        TOPIC, [PublishMessage(b"a", {"region": "eu"}), PublishMessage(b"b", {"region": "ap"})]
    )
    assert offsets(engine.pull(sub, max_messages=10)) == [0]


# -- ordering keys --------------------------------------------------------------------


def test_ordering_key_delivers_a_key_together_in_order(engine: Engine) -> None:
    sub = make(engine, "ordered", enable_message_ordering=True)
    engine.publish(TOPIC, [PublishMessage(f"a{i}".encode(), ordering_key="A") for i in range(3)])
    engine.publish(TOPIC, [PublishMessage(b"b0", ordering_key="B"), PublishMessage(b"free")])
    first = engine.pull(sub, max_messages=10)
    assert offsets(first) == [0, 1, 2, 3, 4], "a key's messages go out together, in order"
    assert engine.pull(sub, max_messages=10, return_immediately=True) == []
    # New messages of a key that is out wait behind it.
    engine.publish(TOPIC, [PublishMessage(f"a{i}".encode(), ordering_key="A") for i in (3, 4)])
    assert engine.pull(sub, max_messages=10, return_immediately=True) == []
    a0 = next(r for r in first if r.message and r.message.offset == 0)
    engine.nack(sub, [a0.ack_id])
    again = engine.pull(sub, max_messages=10, return_immediately=True)
    assert offsets(again) == [0, 1, 2, 5, 6], (
        "a nacked message goes again with the key's later ones, out or held, in order"
    )
    assert engine.pull(sub, max_messages=10, return_immediately=True) == []


def test_ordering_holds_a_key_behind_a_message_backing_off(engine: Engine) -> None:
    sub = make(
        engine,
        "ordered-backoff",
        enable_message_ordering=True,
        retry_policy=RetryPolicy(minimum_backoff_s=60, maximum_backoff_s=60),
    )
    engine.publish(TOPIC, [PublishMessage(f"a{i}".encode(), ordering_key="A") for i in range(3)])
    first = engine.pull(sub, max_messages=1)
    assert offsets(first) == [0]
    assert engine.pull(sub, max_messages=10, return_immediately=True) == [], (
        "the rest of A waits while a0 is out"
    )
    engine.nack(sub, [first[0].ack_id])
    assert engine.pull(sub, max_messages=10, return_immediately=True) == [], (
        "a0 backs off for a minute; nothing of A may pass it"
    )


def test_ordering_under_concurrent_consumers(lake: LakeSpec) -> None:
    with Engine(lake.settings()) as engine:
        sub = make(engine, "ordered-many", enable_message_ordering=True)
        keys = [f"k{i}" for i in range(5)]
        for round_ in range(6):
            engine.publish(
                TOPIC, [PublishMessage(f"{k}-{round_}".encode(), ordering_key=k) for k in keys]
            )
        seen: dict[str, list[int]] = {k: [] for k in keys}
        lock = threading.Lock()

        def consume() -> None:
            idle = 0
            while idle < 3:
                got = engine.pull(sub, max_messages=3, return_immediately=True)
                if not got:
                    idle += 1
                    time.sleep(0.05)
                    continue
                idle = 0
                with lock:
                    for r in got:
                        assert r.message is not None
                        seen[r.message.ordering_key].append(int(r.message.data.split(b"-")[1]))
                engine.acknowledge(sub, [r.ack_id for r in got])

        threads = [threading.Thread(target=consume) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == {k: list(range(6)) for k in keys}


# -- dead letters ---------------------------------------------------------------------


def test_dead_letter_after_max_attempts(engine: Engine) -> None:
    dlt = TopicName("proj", "dead-letters")
    engine.create_topic(Topic(dlt))
    engine.create_subscription(Subscription(SubscriptionName("proj", "dl-watch"), dlt))
    sub = make(
        engine, "dl-source", dead_letter_policy=DeadLetterPolicy(dlt, max_delivery_attempts=5)
    )
    engine.publish(TOPIC, [PublishMessage(b"poison", {"k": "v"})])
    for attempt in range(1, 6):
        (r,) = engine.pull(sub, max_messages=1, return_immediately=True)
        assert r.delivery_attempt == attempt
        engine.nack(sub, [r.ack_id])
    assert engine.pull(sub, max_messages=1, return_immediately=True) == []
    assert engine.subscription_state(sub).rows == {}, "acknowledged on the source"
    (dead,) = engine.pull(SubscriptionName("proj", "dl-watch"), max_messages=5)
    assert dead.message is not None and dead.message.data == b"poison"
    attrs = dead.message.attributes
    assert attrs["k"] == "v"
    assert attrs["CloudPubSubDeadLetterSourceSubscription"] == "dl-source"
    assert attrs["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"


def test_dead_letter_topic_must_exist(engine: Engine) -> None:
    with pytest.raises(errors.NotFound):
        make(engine, "dl-missing", dead_letter_policy=DeadLetterPolicy(TopicName("proj", "nope")))


# -- retry back-off -------------------------------------------------------------------


def test_retry_policy_backs_off_exponentially(lake: LakeSpec) -> None:
    clock = Clock(2_000_000_000_000_000)
    with Engine(lake.settings(clock_us=clock)) as engine:
        sub = make(engine, "retry", retry_policy=RetryPolicy(10, 60))
        engine.publish(TOPIC, [PublishMessage(b"x")])
        waits = []
        (r,) = engine.pull(sub, max_messages=1, return_immediately=True)
        for _ in range(4):
            engine.nack(sub, [r.ack_id])
            waited = 0
            while True:
                got = engine.pull(sub, max_messages=1, return_immediately=True)
                if got:
                    r = got[0]
                    break
                clock.now_us += 5 * US
                waited += 5
            waits.append(waited)
        assert waits == [10, 20, 40, 60]


# -- seek and snapshots ---------------------------------------------------------------


def test_seek_to_time_replays_and_skips(lake: LakeSpec) -> None:
    with Engine(lake.settings()) as engine:
        sub = make(engine, "seeker")
        engine.publish(TOPIC, [PublishMessage(b"old")])
        time.sleep(0.05)
        middle = time.time_ns() // 1000
        time.sleep(0.05)
        engine.publish(TOPIC, [PublishMessage(b"new1"), PublishMessage(b"new2")])
        got = engine.pull(sub, max_messages=10)
        engine.acknowledge(sub, [r.ack_id for r in got])
        engine.seek_to_time(sub, middle)
        assert offsets(engine.pull(sub, max_messages=10)) == [1, 2], "replayed from the time"
        engine.seek_to_time(sub, time.time_ns() // 1000 + 10 * US)
        assert engine.pull(sub, max_messages=10, return_immediately=True) == [], "all acked"


def test_snapshot_and_seek_back(engine: Engine) -> None:
    sub = make(engine, "snapped")
    engine.publish(TOPIC, [PublishMessage(f"{i}".encode()) for i in range(4)])
    got = engine.pull(sub, max_messages=2)
    engine.acknowledge(sub, [got[0].ack_id])  # 0 acked, 1 outstanding, 2-3 not delivered
    snap = SnapshotName("proj", "snap-1")
    created = engine.create_snapshot(snap, sub, labels={"why": "test"})
    assert created.topic == TOPIC and created.expire_time_us > 0
    rest = engine.pull(sub, max_messages=10)
    engine.acknowledge(sub, [r.ack_id for r in [got[1], *rest]])
    assert engine.subscription_state(sub).floor() == 4
    engine.seek_to_snapshot(sub, snap)
    assert offsets(engine.pull(sub, max_messages=10)) == [1, 2, 3]
    assert engine.get_snapshot(snap).labels == {"why": "test"}
    assert engine.list_topic_snapshots(TOPIC) == [snap.path]
    engine.delete_snapshot(snap)
    with pytest.raises(errors.NotFound):
        engine.seek_to_snapshot(sub, snap)


def test_seek_to_snapshot_of_another_topic_fails(engine: Engine) -> None:
    sub = make(engine, "one")
    other = TopicName("proj", "other-topic")
    engine.create_topic(Topic(other))
    other_sub = SubscriptionName("proj", "two")
    engine.create_subscription(Subscription(other_sub, other))
    engine.create_snapshot(SnapshotName("proj", "snap-other"), other_sub)
    with pytest.raises(errors.FailedPrecondition):
        engine.seek_to_snapshot(sub, SnapshotName("proj", "snap-other"))


# -- detach ---------------------------------------------------------------------------


def test_detach_stops_delivery(engine: Engine) -> None:
    sub = make(engine, "detachable")
    engine.publish(TOPIC, [PublishMessage(b"x")])
    engine.detach_subscription(sub)
    assert engine.get_subscription(sub).detached
    with pytest.raises(errors.FailedPrecondition):
        engine.pull(sub, max_messages=1)
    assert engine.subscription_state(sub).rows == {}
