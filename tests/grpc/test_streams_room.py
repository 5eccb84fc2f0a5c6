"""The gRPC door's stream room (api/grpc/streams.py): lots of deliveries, settled
by ack id, and the deadline changes it answers without the dispatcher."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from api.grpc.streams import LEASE_SLACK_S, SETTLED_GENERATION_IDS, Lot, Streams
from lakepubsub.resources.names import SubscriptionName

SUB = SubscriptionName("demo", "sub")
OTHER = SubscriptionName("demo", "other")


@dataclass(eq=False)
class Holder:
    name: SubscriptionName = SUB
    lease_s: int | None = None
    freed_count: int = 0
    freed_bytes: int = 0
    soonest: float = float("inf")
    lots: set[Lot] = field(default_factory=set)

    def freed(self, lot: Lot, count: int, size: int) -> None:
        self.freed_count += count
        self.freed_bytes += size

    def held_until(self, until: float) -> None:
        self.soonest = min(self.soonest, until)


def deliver(streams: Streams, *lot: Any) -> Lot:
    """A pull's answer on a stream: its lot, routed by its ack ids."""
    made = Lot(*lot)
    streams.delivered(made)
    return made


def test_settling_frees_each_lots_share_and_the_rest_of_its_bytes_last() -> None:
    streams, stream = Streams(), Holder()
    a = deliver(streams, stream, ["a1", "a2", "a3"], 100, time.monotonic() + 60)
    b = deliver(streams, stream, ["b1", "b2"], 10, time.monotonic() + 60)
    streams.settled(["a1", "b1", "zz", "a1"])  # unknown and repeated ids free nothing
    assert (a.left, b.left, stream.freed_count) == (2, 1, 2)
    assert stream.freed_bytes == 100 // 3 + 10 // 2
    streams.settled(["a2", "a3", "b2"])
    assert (a.left, b.left, stream.freed_count, stream.freed_bytes) == (0, 0, 5, 110)
    streams.expired(a)  # nothing left to free
    assert stream.freed_count == 5


def test_a_receipt_change_at_the_pulls_lease_is_answered_at_the_door() -> None:
    streams, stream, eo_stream = Streams(), Holder(), Holder()
    now = time.monotonic()
    deliver(streams, stream, ["a1", "a2"], 0, now + 60, (60, now))
    deliver(streams, stream, ["old"], 0, now + 60, (60, now - LEASE_SLACK_S - 1))
    deliver(streams, eo_stream, ["eo"], 0, now + 60, None)  # exactly-once: no lease here
    assert streams.changing(SUB, ["a1", "a2"], 60) == []
    assert stream.lease_s == 60
    assert streams.changing(SUB, ["a1"], 30) == ["a1"]  # another deadline: the dispatcher decides
    # Only the ids it cannot answer go on: pulled more than the slack ago, not out here
    # (acked, or elsewhere), under exactly-once.
    assert streams.changing(SUB, ["a1", "old", "a2"], 60) == ["old"]
    assert streams.changing(SUB, ["nope", "a1", "eo", "nope"], 60) == ["nope", "eo", "nope"]
    assert streams.changing(OTHER, ["a1"], 60) == ["a1"]  # named under another subscription
    assert streams.changing(SUB, ["a1"], 0) == ["a1"]  # a nack
    streams.extended(["a2"], 30, {})  # a change reached the dispatcher: the lot's lease moved
    assert streams.changing(SUB, ["a1"], 60) == ["a1"]
    assert stream.soonest <= time.monotonic() + 30


def test_a_change_after_the_ack_is_judged_by_the_lot_the_id_left() -> None:
    streams, stream = Streams(), Holder()
    now = time.monotonic()
    deliver(streams, stream, ["a1", "a2"], 0, now + 60, (60, now))
    deliver(streams, stream, ["old"], 0, now + 60, (60, now - LEASE_SLACK_S - 1))
    # Google's clients send a message's ack and its receipt change as two calls.
    streams.settled(["a1", "old", "elsewhere"])
    assert streams.changing(SUB, ["a1", "a2"], 60) == []
    assert streams.changing(SUB, ["old", "a1", "elsewhere"], 60) == ["old", "elsewhere"]
    assert streams.changing(SUB, ["a1"], 30) == ["a1"]
    # Two generations of the slack later the ack is forgotten: the change goes on.
    for _ in range(2):
        streams._rotate_at = 0.0
        streams.settled(["zz"])
    assert streams.changing(SUB, ["a1"], 60) == ["a1"]


def test_a_generation_of_settled_ids_ends_at_its_size_as_well_as_its_time() -> None:
    streams, stream = Streams(), Holder()
    now = time.monotonic()
    deliver(streams, stream, ["a1", "a2"], 0, now + 60, (60, now))
    streams.settled(["a1"])
    # Long before the slack is over, other settled ids fill two more generations and
    # push the ack out: its receipt change goes on to the dispatcher, which answers it.
    for n in range(3):
        streams.settled([f"x{n}-{i}" for i in range(SETTLED_GENERATION_IDS)])
        assert streams.changing(SUB, ["a1", "a2"], 60) == ([] if n < 2 else ["a1"])
    assert time.monotonic() - now < LEASE_SLACK_S
