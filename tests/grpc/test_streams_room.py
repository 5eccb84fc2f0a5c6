"""The gRPC door's stream room (api/grpc/streams.py): lots of deliveries, settled
by delivery id, and the deadline changes it answers without the dispatcher."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from api.grpc.streams import LEASE_SLACK_S, Lot, Streams, deliveries_of
from lakepubsub.delivery.ackids import Split, split_malformed
from lakepubsub.messages import Message, Received, ReceivedMessage, Run
from lakepubsub.resources.names import SubscriptionName

SUB = SubscriptionName("demo", "sub")
OTHER = SubscriptionName("demo", "other")
TAG = "0a1b2c3d"


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


def ids(*deliveries: int, tag: str = TAG) -> list[str]:
    """Ack ids of messages (offset 100 + delivery id) with these delivery ids."""
    return [f"{tag}-m{100 + d}-{d}" for d in deliveries]


def split(ack_ids: list[str]) -> Split:
    return split_malformed(ack_ids)


def deliver(streams: Streams, stream: Holder, deliveries: list[int], *rest: Any) -> Lot:
    """A pull's answer on a stream: its lot, routed by its delivery ids."""
    made = Lot(stream, TAG, np.array(deliveries, dtype=np.int64), *rest)
    streams.delivered(made)
    return made


def answered(streams: Streams, name: SubscriptionName, ack_ids: list[str], s: int) -> list[str]:
    """The ids of a deadline change that go on to the dispatcher."""
    rest = streams.changing(name, split(ack_ids), s)
    return [*rest.ids, *rest.malformed]


def test_settling_frees_each_lots_share_and_the_rest_of_its_bytes_last() -> None:
    streams, stream = Streams(), Holder()
    a = deliver(streams, stream, [1, 2, 3], 100, time.monotonic() + 60)
    b = deliver(streams, stream, [4, 5], 10, time.monotonic() + 60)
    # Unknown and repeated ids free nothing; another subscription's tag neither.
    streams.settled(split([*ids(1, 4, 99, 1), *ids(2, tag="ffffffff")]).parsed)
    assert (a.left, b.left, stream.freed_count) == (2, 1, 2)
    assert stream.freed_bytes == 100 // 3 + 10 // 2
    streams.settled(split(ids(2, 3, 5)).parsed)
    assert (a.left, b.left, stream.freed_count, stream.freed_bytes) == (0, 0, 5, 110)
    streams.expired(a)  # nothing left to free
    assert stream.freed_count == 5


def test_lots_of_scattered_and_out_of_order_deliveries_are_found() -> None:
    """A pull's answer is usually one run of delivery ids; redeliveries and pulls
    answered together interleave, and every id still finds its lot."""
    streams, stream = Streams(), Holder()
    late = deliver(streams, stream, [20, 21, 22, 40], 0, time.monotonic() + 60)
    early = deliver(streams, stream, [3, 5, 7, 23, 41], 0, time.monotonic() + 60)
    streams.settled(split(ids(5, 21, 40, 41, 6, 24, 39)).parsed)
    assert (late.left, early.left) == (2, 3)
    # Odd ids (an event's, mixed tags) take the general parse, with the same answer.
    odd = [f"{TAG}-e9-22", f"{TAG}-m1-3", "ffffffff-m1-20", f"{TAG}-m1-99999999999999999999"]
    streams.settled(split(odd).parsed)
    assert (late.left, early.left) == (1, 2)
    streams.forget(late, early)  # a stream that ends forgets all its lots at once
    streams.settled(split(ids(20, 3)).parsed)
    assert (late.left, early.left) == (1, 2)  # no longer routed here


def test_a_random_history_settles_as_a_map_of_ids_would() -> None:
    """Lots of runs and of scattered ids, in any order of their numbers, against a
    map of ids to lots."""
    rng = random.Random(7)
    streams, stream = Streams(), Holder()
    lots: list[Lot] = []
    out: dict[int, Lot] = {}
    free = set(range(1, 3000))
    for _ in range(80):
        if rng.random() < 0.5 or not out:  # a pull's answer: a run, or scattered ids
            count = rng.randint(1, 40)
            start = rng.choice(sorted(free))
            if rng.random() < 0.5:
                chosen = [d for d in range(start, start + count) if d in free]
            else:
                chosen = sorted(rng.sample(sorted(free), count))
            free.difference_update(chosen)
            lot = deliver(streams, stream, chosen, 10 * count, time.monotonic() + 60)
            lots.append(lot)
            out.update(dict.fromkeys(chosen, lot))
        else:
            known = list(out)
            picked = rng.sample(known, min(len(known), rng.randint(1, 30)))
            picked += [rng.randint(0, 3100) for _ in range(3)] + picked[:2]
            streams.settled(split(ids(*picked)).parsed)
            for d in picked:
                out.pop(d, None)
        for lot in lots:
            assert lot.left == sum(1 for x in out.values() if x is lot)


def test_a_receipt_change_at_the_pulls_lease_is_answered_at_the_door() -> None:
    streams, stream, eo_stream = Streams(), Holder(), Holder()
    now = time.monotonic()
    deliver(streams, stream, [1, 2], 0, now + 60, (60, now))
    deliver(streams, stream, [3], 0, now + 60, (60, now - LEASE_SLACK_S - 1))
    deliver(streams, eo_stream, [4], 0, now + 60, None)  # exactly-once: no lease here
    assert answered(streams, SUB, ids(1, 2), 60) == []
    assert stream.lease_s == 60
    assert answered(streams, SUB, ids(1), 30) == ids(1)  # another deadline: the dispatcher decides
    # Only the ids it cannot answer go on: pulled more than the slack ago, not out here
    # (acked, or elsewhere), under exactly-once; malformed ones too.
    assert answered(streams, SUB, ids(1, 3, 2), 60) == ids(3)
    assert answered(streams, SUB, [*ids(9, 1, 4, 9), "bad"], 60) == [*ids(9, 4, 9), "bad"]
    assert answered(streams, OTHER, ids(1), 60) == ids(1)  # named under another subscription
    assert answered(streams, SUB, ids(1), 0) == ids(1)  # a nack
    streams.extended(split(ids(2)), 30, {})  # a change reached the dispatcher: the lease moved
    assert answered(streams, SUB, ids(1), 60) == ids(1)
    assert stream.soonest <= time.monotonic() + 30


def test_a_change_after_the_ack_is_judged_by_the_lot_the_id_left() -> None:
    streams, stream = Streams(), Holder()
    now = time.monotonic()
    recent = deliver(streams, stream, [1, 2], 0, now + 60, (60, now))
    deliver(streams, stream, [3], 0, now + 60, (60, now - LEASE_SLACK_S - 1))
    # Google's clients send a message's ack and its receipt change as two calls.
    streams.settled(split(ids(1, 3, 9)).parsed)
    assert answered(streams, SUB, ids(1, 2), 60) == []
    assert answered(streams, SUB, ids(3, 1, 9), 60) == ids(3, 9)
    assert answered(streams, SUB, ids(1), 30) == ids(1)
    # A lot wholly settled stays until its pull is older than the slack, then leaves.
    streams.settled(split(ids(2)).parsed)
    assert answered(streams, SUB, ids(1, 2), 60) == []
    recent.pulled_at = now - LEASE_SLACK_S - 1
    streams._sweep_at = 0.0
    deliver(streams, stream, [5], 0, now + 60, (60, now))
    assert answered(streams, SUB, ids(1, 5), 60) == ids(1)


def test_a_nack_or_a_refused_change_frees_the_room() -> None:
    streams, stream = Streams(), Holder()
    now = time.monotonic()
    lot = deliver(streams, stream, [1, 2, 3, 4], 40, now + 60, (60, now))
    streams.extended(split(ids(1)), 0, {})
    assert (lot.left, stream.freed_count) == (3, 1)
    refused = {ids(2)[0]: "PERMANENT_FAILURE_INVALID_ACK_ID"}
    streams.extended(split(ids(2, 3)), 20, refused)
    assert (lot.left, lot.lease_s, stream.lease_s) == (2, 0, 20)
    assert lot.until <= time.monotonic() + 20


def test_the_deliveries_of_an_answer_by_number_or_by_ack_id() -> None:
    table = pa.table({"offset": [7, 8, 9]})
    run = Run(table, ids(10, 11, 12), range(10, 13))
    message = Message(5, b"", {}, "", "", 0, 0)
    redelivered = [ReceivedMessage(ids(4)[0], 2, message, None)]
    peered = Run(table, ids(13, 14, 15))  # from another process: ack ids only
    tag, numbers = deliveries_of(Received([redelivered, run, peered]))
    assert (tag, numbers.tolist()) == (TAG, [4, 10, 11, 12, 13, 14, 15])
    assert deliveries_of(Received([run])[1:])[1].tolist() == [11, 12]
    assert deliveries_of(Received([]))[1].tolist() == []
