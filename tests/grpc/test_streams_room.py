"""The gRPC door's stream room (api/grpc/streams.py): lots of deliveries, settled
by ack id, and the deadline changes it answers without the dispatcher."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from api.grpc.streams import LEASE_SLACK_S, Lot, Streams
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
    assert streams.unchanged(SUB, ["a1", "a2"], 60)
    assert stream.lease_s == 60
    assert not streams.unchanged(SUB, ["a1"], 30)  # another deadline: the dispatcher decides
    assert not streams.unchanged(SUB, ["a1", "old"], 60)  # pulled more than the slack ago
    assert not streams.unchanged(SUB, ["a1", "nope"], 60)  # not out here (acked, or elsewhere)
    assert not streams.unchanged(OTHER, ["a1"], 60)  # named under another subscription
    assert not streams.unchanged(SUB, ["eo"], 60)
    assert not streams.unchanged(SUB, ["a1"], 0)  # a nack
    streams.extended(["a2"], 30, {})  # a change reached the dispatcher: the lot's lease moved
    assert not streams.unchanged(SUB, ["a1"], 60)
    assert stream.soonest <= time.monotonic() + 30
