"""Pull, acknowledge, nack, deadlines, truncation: the delivery semantics."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import REGISTRY

from lakepubsub import (
    Engine,
    PublishMessage,
    ReceivedMessage,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
    errors,
)
from lakepubsub.delivery.ackids import INVALID_ACK_ID
from lakepubsub.delivery.cycle import BACKLOG_EVERY_S
from lakepubsub.delivery.leases import LeaseState

TOPIC = TopicName("proj", "work")
SUB = SubscriptionName("proj", "workers")


@pytest.fixture
def sub(engine: Engine) -> SubscriptionName:
    engine.create_topic(Topic(TOPIC))
    engine.create_subscription(Subscription(SUB, TOPIC))
    return SUB


def publish(engine: Engine, n: int, prefix: str = "m") -> list[str]:
    return engine.publish(TOPIC, [PublishMessage(f"{prefix}{i}".encode()) for i in range(n)])


def datas(received: list[ReceivedMessage]) -> list[bytes]:
    return [r.message.data for r in received if r.message is not None]


def lease_state(engine: Engine, name: SubscriptionName) -> LeaseState:
    table = engine.lake.open(engine.lake.leases_uri(engine.get_subscription(name).uid))
    return LeaseState.from_arrow(table.to_pyarrow_table(), table.version())


def test_pull_leases_and_ack_removes(engine: Engine, sub: SubscriptionName) -> None:
    ids = publish(engine, 5)
    got = engine.pull(sub, max_messages=3)
    assert datas(got) == [b"m0", b"m1", b"m2"]
    assert [r.message.message_id for r in got if r.message] == ids[:3]
    assert all(r.delivery_attempt == 1 for r in got)
    assert len({r.ack_id for r in got}) == 3
    # leased messages are not handed out again while the lease is live
    rest = engine.pull(sub, max_messages=10, return_immediately=True)
    assert datas(rest) == [b"m3", b"m4"]
    assert engine.pull(sub, max_messages=10, return_immediately=True) == []
    assert engine.acknowledge(sub, [r.ack_id for r in got + rest]) == {}
    state = lease_state(engine, sub)
    assert state.rows == {}, "acked rows leave the lease table"
    assert state.cursor.frontier == 5
    assert state.floor() == 5


def test_ack_is_idempotent(engine: Engine, sub: SubscriptionName) -> None:
    publish(engine, 1)
    (msg,) = engine.pull(sub, max_messages=1)
    assert engine.acknowledge(sub, [msg.ack_id]) == {}
    assert engine.acknowledge(sub, [msg.ack_id]) == {}
    assert engine.pull(sub, max_messages=1, return_immediately=True) == []


def test_nack_redelivers_with_next_attempt(engine: Engine, sub: SubscriptionName) -> None:
    publish(engine, 2)
    first = engine.pull(sub, max_messages=2)
    engine.nack(sub, [first[1].ack_id])
    again = engine.pull(sub, max_messages=5, return_immediately=True)
    assert datas(again) == [b"m1"]
    assert again[0].delivery_attempt == 2
    assert again[0].ack_id != first[1].ack_id


def test_expired_lease_is_redelivered(engine: Engine, sub: SubscriptionName) -> None:
    publish(engine, 1)
    (msg,) = engine.pull(sub, max_messages=1)
    engine.modify_ack_deadline(sub, [msg.ack_id], 1)
    assert engine.pull(sub, max_messages=1, return_immediately=True) == []
    time.sleep(1.1)
    (again,) = engine.pull(sub, max_messages=1, return_immediately=True)
    assert again.delivery_attempt == 2
    # the old ack id still acks without exactly-once (at-least-once semantics)
    assert engine.acknowledge(sub, [msg.ack_id]) == {}
    assert lease_state(engine, sub).rows == {}


def test_extend_deadline_keeps_lease(engine: Engine, sub: SubscriptionName) -> None:
    publish(engine, 1)
    (msg,) = engine.pull(sub, max_messages=1)
    engine.modify_ack_deadline(sub, [msg.ack_id], 1)
    engine.modify_ack_deadline(sub, [msg.ack_id], 60)
    time.sleep(1.1)
    assert engine.pull(sub, max_messages=1, return_immediately=True) == []


@pytest.mark.parametrize("bad", ["", "nonsense", "abcdefgh-x1-2", "ABCDEFGH-m1-2"])
def test_a_malformed_ack_id_fails_alone(engine: Engine, sub: SubscriptionName, bad: str) -> None:
    """One answer on every door (ackids.split_malformed): the malformed id is an invalid
    ack id, reported per id; the request's other ids take effect."""
    publish(engine, 1)
    (msg,) = engine.pull(sub, max_messages=1)
    assert engine.modify_ack_deadline(sub, [bad], 10) == {bad: INVALID_ACK_ID}
    assert engine.acknowledge(sub, [msg.ack_id, bad]) == {bad: INVALID_ACK_ID}
    with pytest.raises(errors.InvalidArgument):
        engine.acknowledge(sub, [])
    engine.nack(sub, [msg.ack_id])  # acked: there is nothing left to give back
    assert engine.pull(sub, max_messages=1, return_immediately=True) == []


@pytest.mark.parametrize("deadline", [-1, 601])
def test_deadline_out_of_range(engine: Engine, sub: SubscriptionName, deadline: int) -> None:
    publish(engine, 1)
    (msg,) = engine.pull(sub, max_messages=1)
    with pytest.raises(errors.InvalidArgument):
        engine.modify_ack_deadline(sub, [msg.ack_id], deadline)


def test_pull_validates_max_messages(engine: Engine, sub: SubscriptionName) -> None:
    with pytest.raises(errors.InvalidArgument):
        engine.pull(sub, max_messages=0)


def test_cursor_advances_over_contiguous_acked_prefix(
    engine: Engine, sub: SubscriptionName
) -> None:
    publish(engine, 6)
    got = engine.pull(sub, max_messages=6)
    engine.acknowledge(sub, [got[i].ack_id for i in (0, 1, 3, 5)])
    state = lease_state(engine, sub)
    assert state.floor() == 2
    assert sorted(k[1] for k in state.rows) == [2, 4]
    engine.acknowledge(sub, [got[2].ack_id])
    assert lease_state(engine, sub).floor() == 4


def test_truncate_drops_pending_and_delivers_event_first(
    engine: Engine, sub: SubscriptionName
) -> None:
    publish(engine, 4)
    leased = engine.pull(sub, max_messages=2)
    event = engine.truncate(sub)
    assert (event.first_offset, event.end_offset) == (0, 4)
    publish(engine, 2, prefix="new")
    got = engine.pull(sub, max_messages=10)
    assert got[0].event is not None and got[0].event.end_offset == 4
    assert datas(got[1:]) == [b"new0", b"new1"]
    # acks of dropped leases are harmless
    assert engine.acknowledge(sub, [r.ack_id for r in leased]) == {}
    assert engine.acknowledge(sub, [r.ack_id for r in got]) == {}
    state = lease_state(engine, sub)
    assert state.rows == {} and state.cursor.frontier == 6


def test_unacked_event_is_redelivered(engine: Engine, sub: SubscriptionName) -> None:
    publish(engine, 1)
    engine.truncate(sub)
    (event,) = engine.pull(sub, max_messages=1)
    engine.nack(sub, [event.ack_id])
    (again,) = engine.pull(sub, max_messages=1, return_immediately=True)
    assert again.event is not None and again.delivery_attempt == 2


def test_long_poll_wakes_on_publish_from_another_engine(lake, sub: SubscriptionName) -> None:  # type: ignore[no-untyped-def]
    with Engine(lake.settings(pull_wait_s=10.0)) as puller:
        box: list[list[ReceivedMessage]] = []
        thread = threading.Thread(target=lambda: box.append(puller.pull(sub, max_messages=5)))
        started = time.monotonic()
        thread.start()
        time.sleep(0.3)
        with Engine(lake.settings()) as publisher:
            publisher.publish(TOPIC, [PublishMessage(b"wake")])
        thread.join(timeout=10)
        assert datas(box[0]) == [b"wake"]
        assert time.monotonic() - started < 5


def test_long_poll_returns_empty_after_wait(engine: Engine, sub: SubscriptionName) -> None:
    started = time.monotonic()
    assert engine.pull(sub, max_messages=1) == []
    assert 1.5 <= time.monotonic() - started < 6


def test_two_engines_never_share_a_live_lease(lake, sub: SubscriptionName) -> None:  # type: ignore[no-untyped-def]
    with Engine(lake.settings()) as a, Engine(lake.settings()) as b:
        a.publish(TOPIC, [PublishMessage(f"{i}".encode()) for i in range(200)])
        got: dict[str, list[ReceivedMessage]] = {"a": [], "b": []}

        def drain(name: str, eng: Engine) -> None:
            while True:
                batch = eng.pull(SUB, max_messages=20, return_immediately=True)
                if not batch:
                    return
                got[name] += batch

        threads = [threading.Thread(target=drain, args=x) for x in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        offsets = [r.message.offset for r in got["a"] + got["b"] if r.message]
        assert sorted(offsets) == list(range(200)), "each message delivered exactly once"


def test_exactly_once_rejects_stale_ack_ids(engine: Engine) -> None:
    engine.create_topic(Topic(TOPIC))
    name = SubscriptionName("proj", "eod")
    engine.create_subscription(Subscription(name, TOPIC, enable_exactly_once_delivery=True))
    publish(engine, 1)
    (first,) = engine.pull(name, max_messages=1)
    engine.nack(name, [first.ack_id])
    (second,) = engine.pull(name, max_messages=1, return_immediately=True)
    failures = engine.acknowledge(name, [first.ack_id, second.ack_id])
    assert failures == {first.ack_id: "PERMANENT_FAILURE_INVALID_ACK_ID"}
    assert engine.acknowledge(name, [second.ack_id]) == {
        second.ack_id: "PERMANENT_FAILURE_INVALID_ACK_ID"
    }, "a second successful ack is impossible"


def test_truncating_nothing_queues_no_event(engine: Engine, sub: SubscriptionName) -> None:
    engine.truncate(sub)
    assert engine.pull(sub, max_messages=1, return_immediately=True) == []


def test_commit_offset_acks_everything_below(engine: Engine, sub: SubscriptionName) -> None:
    publish(engine, 6)
    leased = engine.pull(sub, max_messages=2)
    engine.commit_offset(sub, 4)
    state = lease_state(engine, sub)
    assert state.rows == {} and state.cursor.frontier == 4
    assert datas(engine.pull(sub, max_messages=10)) == [b"m4", b"m5"]
    assert engine.acknowledge(sub, [r.ack_id for r in leased]) == {}


def test_idle_long_polls_keep_the_subscription_active(lake) -> None:  # type: ignore[no-untyped-def]
    now = [10**15]
    with Engine(lake.settings(pull_wait_s=0.1, clock_us=lambda: now[0])) as engine:
        engine.create_topic(Topic(TOPIC))
        engine.create_subscription(Subscription(SUB, TOPIC))
        before = engine.subscription_state(SUB).cursor.active_us
        now[0] += 2 * 3600 * 1_000_000
        assert engine.pull(SUB, max_messages=1) == []
        assert engine.subscription_state(SUB).cursor.active_us == now[0] > before


def test_ack_and_backlog_metrics(engine: Engine, sub: SubscriptionName) -> None:
    def acked() -> float:
        return REGISTRY.get_sample_value("lakepubsub_acked_messages_total") or 0.0

    def backlog() -> float | None:
        return REGISTRY.get_sample_value(
            "lakepubsub_subscription_backlog_messages", {"subscription": sub.path}
        )

    publish(engine, 5)
    before = acked()
    got = engine.pull(sub, max_messages=3)
    engine.acknowledge(sub, [r.ack_id for r in got[:2]])
    assert acked() - before == 2
    time.sleep(BACKLOG_EVERY_S + 0.1)
    engine.pull(sub, max_messages=1, return_immediately=True)  # a cycle past the interval
    # 5 published, 2 acknowledged; the third pulled one and the one just pulled are out.
    assert backlog() == 3
