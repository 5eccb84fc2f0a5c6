"""The lease/cursor state machine against a simple in-memory model (Hypothesis).

The engine runs for real on a Delta lake; only the clock is driven by the test,
so lease expiry can be explored without sleeping.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support import Clock

from lakepubsub import (
    Engine,
    PublishMessage,
    Settings,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
)
from lakepubsub.delivery.leases import LeaseState

TOPIC = TopicName("proj", "model")
SUB = SubscriptionName("proj", "model-sub")
DEADLINE_S = 10
US = 1_000_000


@dataclass
class Delivery:
    ack_id: str
    deadline_us: int  # lease end; for a nacked message, when it may be redelivered
    nacked: bool = False


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.clock = Clock()
        self.engine = Engine(Settings(lake=self.dir.name, pull_wait_s=0.2, clock_us=self.clock))
        self.engine.create_topic(Topic(TOPIC))
        self.engine.create_subscription(Subscription(SUB, TOPIC, ack_deadline_s=DEADLINE_S))
        self.published = 0
        self.acked: set[int] = set()
        self.out: dict[int, Delivery] = {}  # delivered, not acked
        self.frontier = 0
        self.stale: list[str] = []  # ack ids of earlier deliveries

    def teardown(self) -> None:
        self.engine.close()
        self.dir.cleanup()

    def _available(self, offset: int) -> bool:
        d = self.out[offset]
        return d.deadline_us <= self.clock.now_us

    @rule(n=st.integers(1, 5))
    def publish(self, n: int) -> None:
        ids = self.engine.publish(TOPIC, [PublishMessage(b"x")] * n)
        assert [int(i) for i in ids] == list(range(self.published, self.published + n))
        self.published += n

    @rule(k=st.integers(1, 6))
    def pull(self, k: int) -> None:
        expected = sorted(o for o in self.out if self._available(o))[:k]
        fresh = list(range(self.frontier, self.published))[: k - len(expected)]
        got = self.engine.pull(SUB, max_messages=k, return_immediately=True)
        offsets = [r.message.offset for r in got if r.message is not None]
        assert offsets == expected + fresh
        for r in got:
            assert r.message is not None
            offset = r.message.offset
            if offset in self.out:
                self.stale.append(self.out[offset].ack_id)
            self.out[offset] = Delivery(r.ack_id, self.clock.now_us + DEADLINE_S * US)
        self.frontier = max([self.frontier, *[o + 1 for o in fresh]])

    @precondition(lambda self: self.out)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        offsets = data.draw(st.lists(st.sampled_from(sorted(self.out)), min_size=1, max_size=4))
        assert self.engine.acknowledge(SUB, [self.out[o].ack_id for o in offsets]) == {}
        for o in set(offsets):
            del self.out[o]
            self.acked.add(o)

    @precondition(lambda self: self.out)
    @rule(data=st.data(), seconds=st.sampled_from([0, 1, 5, 30]))
    def modify(self, data: st.DataObject, seconds: int) -> None:
        offsets = data.draw(st.lists(st.sampled_from(sorted(self.out)), min_size=1, max_size=3))
        self.engine.modify_ack_deadline(SUB, [self.out[o].ack_id for o in offsets], seconds)
        for o in set(offsets):
            d = self.out[o]
            # Without exactly-once, the newest delivery's ack id may change its
            # deadline until it is nacked, even after the lease expired.
            if not d.nacked:
                d.deadline_us = self.clock.now_us + seconds * US
                d.nacked = seconds == 0

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def stale_ack_is_harmless(self, data: st.DataObject) -> None:
        ack_id = data.draw(st.sampled_from(self.stale))
        offset = int(ack_id.split("-")[1][1:])
        self.engine.acknowledge(SUB, [ack_id])
        if offset in self.out:  # without exactly-once an old ack id still acks
            del self.out[offset]
            self.acked.add(offset)

    @rule(seconds=st.sampled_from([1, 5, 11]))
    def time_passes(self, seconds: int) -> None:
        self.clock.now_us += seconds * US

    @invariant()
    def lease_table_matches_model(self) -> None:
        uid = self.engine.get_subscription(SUB).uid
        table = self.engine.lake.open(self.engine.lake.leases_uri(uid))
        state = LeaseState.from_arrow(table.to_pyarrow_table(), table.version())
        assert state.cursor.frontier == self.frontier
        assert sorted(k[1] for k in state.rows) == sorted(self.out)
        unacked = [o for o in range(self.published) if o not in self.acked]
        assert state.floor() == min(
            [o for o in unacked if o < self.frontier], default=self.frontier
        )


LeaseMachine.TestCase.settings = hsettings(max_examples=40, stateful_step_count=20, deadline=None)
TestLeaseMachine = LeaseMachine.TestCase
