"""Stream leases (a pull with its own ``ack_deadline_s``, as StreamingPull makes):
they run ``LEASE_SLACK_US`` past the deadline asked for, so the deadline change
Google's clients send on receipt is not written, and the deadlines still hold.

The engine runs for real on a local Delta lake; only the clock is driven.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from support import Clock

from api.app import create_app
from lakepubsub import (
    Engine,
    PublishMessage,
    Settings,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
)
from lakepubsub._lake.table_schemas import KIND_MESSAGE
from lakepubsub.delivery.ackids import AckId
from lakepubsub.delivery.lease_table import LeaseTable
from lakepubsub.delivery.leases import LEASE_SLACK_US, LEASED, Cursor, LeaseState, Row
from lakepubsub.delivery.planner import change_leaves_leases
from lakepubsub.metrics import DEADLINE_CHANGES_UNCHANGED

TOPIC = TopicName("proj", "stream-leases")
SUB = SubscriptionName("proj", "stream-leases-sub")
US = 1_000_000


@pytest.fixture
def clock() -> Clock:
    return Clock()


def start(tmp_path: object, clock: Clock, *, exactly_once: bool = False) -> Engine:
    engine = Engine(Settings(lake=str(tmp_path), pull_wait_s=0.2, clock_us=clock))
    engine.create_topic(Topic(TOPIC))
    engine.create_subscription(
        Subscription(SUB, TOPIC, ack_deadline_s=10, enable_exactly_once_delivery=exactly_once)
    )
    engine.publish(TOPIC, [PublishMessage(b"one")])
    return engine


@pytest.fixture
def engine(tmp_path: object, clock: Clock) -> Iterator[Engine]:
    with start(tmp_path, clock) as eng:
        yield eng


def leases(engine: Engine) -> LeaseState:
    uid = engine.get_subscription(SUB).uid
    return LeaseTable(engine.lake, uid).state()


def stream_pull(engine: Engine, deadline_s: int) -> str:
    got = engine.pull_future(SUB, max_messages=10, ack_deadline_s=deadline_s).result()
    assert len(got) == 1
    return got[0].ack_id


def unchanged_count() -> float:
    return DEADLINE_CHANGES_UNCHANGED._value.get()


def redelivered(engine: Engine) -> bool:
    return bool(engine.pull(SUB, max_messages=10, return_immediately=True))


def test_a_stream_lease_runs_the_slack_past_its_deadline(engine: Engine, clock: Clock) -> None:
    ack_id = stream_pull(engine, 30)
    row = leases(engine).rows[AckId.parse(ack_id).key]
    assert row.deadline_us == clock.now_us + 30 * US + LEASE_SLACK_US
    clock.now_us += 30 * US + LEASE_SLACK_US - 1
    assert not redelivered(engine)
    clock.now_us += 2
    assert redelivered(engine)


def test_the_receipt_deadline_change_is_not_written(engine: Engine, clock: Clock) -> None:
    ack_id = stream_pull(engine, 30)
    version = leases(engine).version
    clock.now_us += LEASE_SLACK_US // 2  # the client's receipt change, a moment later
    before = unchanged_count()
    assert engine.modify_ack_deadline(SUB, [ack_id], 30) == {}
    assert leases(engine).version == version
    assert unchanged_count() == before + 1  # answered without a dispatcher cycle
    # The lease still lasts at least the 30 s asked for on receipt.
    clock.now_us += 30 * US
    assert not redelivered(engine)


def test_a_shorter_deadline_is_written_and_holds(engine: Engine, clock: Clock) -> None:
    ack_id = stream_pull(engine, 60)
    engine.modify_ack_deadline(SUB, [ack_id], 10)
    row = leases(engine).rows[AckId.parse(ack_id).key]
    assert row.deadline_us == clock.now_us + 10 * US
    clock.now_us += 10 * US + 1
    assert redelivered(engine)


def test_a_longer_deadline_is_written(engine: Engine, clock: Clock) -> None:
    ack_id = stream_pull(engine, 10)
    clock.now_us += 5 * US
    engine.modify_ack_deadline(SUB, [ack_id], 10)
    row = leases(engine).rows[AckId.parse(ack_id).key]
    assert row.deadline_us == clock.now_us + 10 * US


def test_exactly_once_still_refuses_a_stale_id_whose_change_is_skipped(
    tmp_path: object, clock: Clock
) -> None:
    with start(tmp_path, clock, exactly_once=True) as engine:
        first = stream_pull(engine, 10)
        engine.nack(SUB, [first])
        second = stream_pull(engine, 10)
        before = unchanged_count()
        assert engine.modify_ack_deadline(SUB, [second], 10) == {}
        assert unchanged_count() == before  # exactly-once: every change is planned
        failures = engine.modify_ack_deadline(SUB, [first], 10)
        assert failures == {first: "PERMANENT_FAILURE_INVALID_ACK_ID"}


def test_the_rest_door_gets_the_shortcut(engine: Engine, clock: Clock) -> None:
    """The delivery room, not a door, decides that a deadline change leaves the lease
    as it is: REST's modifyAckDeadline of a receipt change makes no lease commit."""
    ack_id = stream_pull(engine, 30)
    version = leases(engine).version
    before = unchanged_count()
    app = create_app(engine, grpc=False)
    app.state.engine = engine  # the lifespan, which sets it, is not run here

    async def modack(seconds: int) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rest") as http:
            body = {"ackIds": [ack_id], "ackDeadlineSeconds": seconds}
            return await http.post(f"/v1/{SUB.path}:modifyAckDeadline", json=body)

    clock.now_us += LEASE_SLACK_US // 2  # the client's receipt change, a moment later
    response = asyncio.run(modack(30))
    assert response.status_code == 200 and response.json() == {}
    assert leases(engine).version == version
    assert unchanged_count() == before + 1
    response = asyncio.run(modack(10))  # shorter: written
    assert response.status_code == 200
    assert leases(engine).version == version + 1
    assert unchanged_count() == before + 1


def test_which_changes_leave_the_leases_as_they_are() -> None:
    """``change_leaves_leases``, the rule the dispatcher answers by without a cycle."""
    now = 1_000 * US
    lease_end = now + 30 * US + LEASE_SLACK_US // 2
    leased = Row(KIND_MESSAGE, 5, delivery_id=7, attempt=1, state=LEASED, deadline_us=lease_end)
    state = LeaseState(1, Cursor(10, 9, 0, now), {leased.key: leased})
    tag = "abcdef01"

    def leaves(ack: AckId, seconds: int) -> bool:
        return change_leaves_leases(state, tag, [ack], seconds, now)

    out = AckId(tag, KIND_MESSAGE, 5, 7)
    assert leaves(out, 30)  # lasts that long, and at most the slack more
    assert not leaves(out, 20)  # shorter: must be written
    assert not leaves(out, 32)  # longer than the lease: the same
    assert not leaves(out, 0)  # a nack
    assert leaves(AckId(tag, KIND_MESSAGE, 5, 6), 10)  # delivered again since: nothing to change
    assert leaves(AckId(tag, KIND_MESSAGE, 3, 2), 10)  # acknowledged: nothing to change
    assert not leaves(AckId(tag, KIND_MESSAGE, 8, 9), 30)  # a delivery this state does not know
    assert leaves(AckId("00000000", KIND_MESSAGE, 5, 7), 20)  # another subscription's: ignored
