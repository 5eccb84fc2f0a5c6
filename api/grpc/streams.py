"""The open StreamingPull streams of this process, by the deliveries they have out.

Acks and deadline changes reach a process on the stream that delivered them or,
as Google's clients send them, through unary Acknowledge and ModifyAckDeadline
calls; ``Streams`` routes each to the stream that has the delivery out, so that
the stream's flow-control room follows (``api/grpc/streaming.py``).

A stream's room is kept by ``Lot``: the deliveries of one pull's answer, which
go out together, with one lease end. Deliveries are found by number, not by ack
id text: an ack id names its subscription's tag and a delivery id, unique within
the subscription, and a dispatcher numbers a pull's deliveries consecutively
(``messages.Run.deliveries``). So a lot is a few segments of consecutive
delivery ids, and the ids of a request (parsed once, by numpy, for the engine as
well: ``ackids.MessageIds.deliveries``) are looked up among every lot's segments
with one ``searchsorted``; a lot keeps which of its deliveries are settled as a
numpy array of flags.

Written by hand because keying by ack id text cost three dict operations on new
strings per delivery (routing it, settling it, and remembering where it was
settled for the receipt change that follows the ack): about a fifth of the
door's CPU per message of a StreamingPull drain.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from lakepubsub import constants
from lakepubsub.delivery.ackids import AckId, MessageIds, Split, split_malformed
from lakepubsub.delivery.leases import LEASE_SLACK_US
from lakepubsub.messages import Received, Run
from lakepubsub.metrics import DEADLINE_CHANGES_UNCHANGED
from lakepubsub.resources.names import SubscriptionName

# How far past the pull's lease a stream's leases run, in seconds.
LEASE_SLACK_S = LEASE_SLACK_US / constants.US_PER_S
_INT64_MAX = 2**63 - 1
_NONE = np.empty(0, dtype=np.int64)
# A delivery's lot and its place in the lot as one number (``settled_deliveries``): a
# lot holds far fewer deliveries than 2**32.
_PLACE_BITS = 32
_PLACE_MASK = (1 << _PLACE_BITS) - 1


class Holder(Protocol):
    """What ``Streams`` needs of a stream (``streaming.Stream``)."""

    lease_s: int | None
    name: SubscriptionName

    def freed(self, lot: Lot, count: int, size: int) -> None: ...

    def held_until(self, until: float) -> None: ...


class Lot:
    """The deliveries of one answer a stream holds (their delivery ids, ascending,
    under one subscription tag): how many are not settled yet, their bytes, and
    until when their room is held (time.monotonic())."""

    __slots__ = (
        "deliveries",
        "lease_s",
        "left",
        "pulled_at",
        "settled",
        "size",
        "stream",
        "tag",
        "until",
    )

    def __init__(
        self,
        stream: Holder,
        tag: str,
        deliveries: np.ndarray,
        size: int,
        until: float,
        lease: tuple[int, float] | None = None,
    ) -> None:
        self.stream = stream
        self.tag = tag
        self.deliveries = deliveries
        self.settled = np.zeros(len(deliveries), dtype=bool)
        self.left = len(deliveries)
        self.size = size
        self.until = until
        # The lease its pull asked for and when the pull started (time.monotonic()),
        # while no deadline change has reached the dispatcher: ``Streams.changing``.
        # None with exactly-once, whose every change the dispatcher checks.
        self.lease_s, self.pulled_at = lease if lease is not None else (0, 0.0)

    def settle(self, count: int) -> None:
        """``count`` of its deliveries were settled: their share of the bytes frees."""
        count = min(count, self.left)
        freed = self.size if count == self.left else self.size * count // self.left
        self.left -= count
        self.size -= freed
        self.stream.freed(self, count, freed)


def deliveries_of(received: Received) -> tuple[str, np.ndarray]:
    """The subscription tag and delivery ids (ascending) of a pull's answer: a run's
    from its numbers, any other's from its ack ids."""
    tag = ""
    pieces: list[np.ndarray] = []
    for part in received.parts:
        if isinstance(part, Run) and part.deliveries is not None:
            tag = tag or part.tag
            pieces.append(np.arange(part.deliveries.start, part.deliveries.stop, dtype=np.int64))
            continue
        ids = part.ack_ids if isinstance(part, Run) else [r.ack_id for r in part]
        for group_tag, numbers, _ in _groups(split_malformed(ids).parsed):
            if group_tag == (tag := tag or group_tag):  # one subscription's answer: one tag
                pieces.append(numbers)
    if not pieces:
        return tag, _NONE
    numbers = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
    if len(numbers) > 1 and not bool((numbers[1:] > numbers[:-1]).all()):
        numbers = np.unique(numbers)
    return tag, numbers


def _groups(parsed: Sequence[AckId]) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
    """Parsed ids by subscription tag: (tag, delivery ids, their places in ``parsed``,
    None for all of them in order). Delivery ids past int64 are never issued here
    and are left out."""
    if isinstance(parsed, MessageIds) and parsed.deliveries is not None:
        return [(parsed.tag, parsed.deliveries, None)]
    by_tag: dict[str, tuple[list[int], list[int]]] = {}
    for at, ack in enumerate(parsed):
        if ack.delivery_id <= _INT64_MAX:
            numbers, places = by_tag.setdefault(ack.tag, ([], []))
            numbers.append(ack.delivery_id)
            places.append(at)
    return [
        (tag, np.array(numbers, dtype=np.int64), np.array(places, dtype=np.intp))
        for tag, (numbers, places) in by_tag.items()
    ]


class _Tag:
    """The lots out under one subscription tag, as segments of consecutive delivery
    ids: the first id of each (ascending), its length, its lot (a number in
    ``lots``) and where in the lot it starts. A new lot's segments come after the
    others' (delivery ids grow), so adding one appends to the arrays; the arrays are
    rebuilt when lots leave."""

    __slots__ = ("counts", "firsts", "lots", "places", "starts")

    def __init__(self, lots: list[Lot]) -> None:
        self._build(lots)

    def _build(self, lots: list[Lot]) -> None:
        self.lots = list(lots)
        self.firsts = self.counts = self.starts = _NONE
        self.places = np.empty(0, dtype=np.intp)
        pieces = [(*_segments(lot.deliveries), number) for number, lot in enumerate(lots)]
        if pieces:
            first = np.concatenate([p[0] for p in pieces])
            order = np.argsort(first, kind="stable")
            self.firsts = first[order]
            self.counts = np.concatenate([p[1] for p in pieces])[order]
            self.starts = np.concatenate([p[2] for p in pieces])[order]
            places = [np.full(len(p[0]), p[3], dtype=np.intp) for p in pieces]
            self.places = np.concatenate(places)[order]

    def add(self, lot: Lot) -> None:
        firsts, counts, starts = _segments(lot.deliveries)
        if len(self.firsts) and len(firsts) and firsts[0] <= self.firsts[-1]:
            self._build([*self.lots, lot])  # out of order: rebuilt
            return
        self.firsts = np.concatenate((self.firsts, firsts))
        self.counts = np.concatenate((self.counts, counts))
        self.starts = np.concatenate((self.starts, starts))
        self.places = np.concatenate((self.places, np.full(len(firsts), len(self.lots))))
        self.lots.append(lot)

    def find(self, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each delivery id: the number of its lot in ``lots`` (-1: none here)
        and its place in that lot."""
        segment = np.searchsorted(self.firsts, numbers, side="right") - 1
        known = segment >= 0
        segment[~known] = 0
        past = numbers - self.firsts[segment]
        known &= past < self.counts[segment]
        lot = np.where(known, self.places[segment], -1)
        return lot, self.starts[segment] + past


def _segments(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ascending delivery ids as runs of consecutive ones: each run's first id, its
    length, and where it starts among ``ids``."""
    if not len(ids):
        return _NONE, _NONE, _NONE
    if int(ids[-1]) - int(ids[0]) + 1 == len(ids):  # one run: a pull's answer, usually
        return ids[:1], np.array([len(ids)], dtype=np.int64), np.zeros(1, dtype=np.int64)
    breaks = np.flatnonzero(ids[1:] - ids[:-1] != 1) + 1
    begin = np.concatenate(([0], breaks))
    end = np.concatenate((breaks, [len(ids)]))
    return ids[begin], end - begin, begin


class Streams:
    """The open streams of this process by the deliveries they have out. Used on the
    door's event loop only."""

    def __init__(self) -> None:
        self._tags: dict[str, _Tag] = {}
        # A lot stays here after its last delivery is settled until it can answer no
        # receipt change (its pull started more than the slack ago): Google's clients
        # send a message's receipt change and its ack as two calls, and the ack often
        # arrives first. ``changing`` judges such a delivery by the lot it left.
        self._sweep_at = 0.0

    def delivered(self, lot: Lot) -> None:
        """Route the lot's deliveries to it."""
        self._sweep()
        index = self._tags.get(lot.tag)
        if index is None:
            self._tags[lot.tag] = _Tag([lot])
        else:
            index.add(lot)

    def _sweep(self) -> None:
        now = time.monotonic()
        if now < self._sweep_at:
            return
        self._sweep_at = now + LEASE_SLACK_S / 4
        latest = now - LEASE_SLACK_S
        for tag, index in list(self._tags.items()):
            kept = [lot for lot in index.lots if lot.left > 0 or lot.pulled_at >= latest]
            if len(kept) != len(index.lots):
                self._set(tag, kept)

    def _set(self, tag: str, lots: list[Lot]) -> None:
        if lots:
            self._tags[tag] = _Tag(lots)
        else:
            self._tags.pop(tag, None)

    def _find(self, tag: str, numbers: np.ndarray) -> tuple[list[Lot], np.ndarray, np.ndarray]:
        """The lots under ``tag``, and for each delivery id its lot's number among
        them (-1: not out here) and its place in the lot."""
        index = self._tags.get(tag)
        if index is None or not len(numbers):
            none = np.full(len(numbers), -1, dtype=np.intp)
            return [], none, none
        lot, place = index.find(numbers)
        return index.lots, lot, place

    def settled(self, parsed: Sequence[AckId], among: np.ndarray | None = None) -> None:
        """Acked (or, through ``extended``, nacked or refused): out of the room.
        ``among``: only the ids of ``parsed`` it flags."""
        for tag, numbers, places in _groups(parsed):
            picked = numbers
            if among is not None:
                picked = numbers[among if places is None else among[places]]
            self.settled_deliveries(tag, picked)

    def settled_deliveries(self, tag: str, numbers: np.ndarray) -> None:
        lots, lot_of, place = self._find(tag, numbers)
        found = lot_of >= 0
        if not found.any():
            return
        # One sort groups the ids by lot and drops repeated ones; then a few numpy
        # calls a lot, not a pass over every id for each lot.
        keys = np.sort((lot_of[found] << _PLACE_BITS) | place[found])
        repeated = keys[1:] == keys[:-1]
        if repeated.any():
            keys = keys[np.concatenate(([True], ~repeated))]
        numbers_of = (keys >> _PLACE_BITS).astype(np.intp)
        places = keys & _PLACE_MASK
        bounds = [0, *(np.flatnonzero(numbers_of[1:] != numbers_of[:-1]) + 1).tolist(), len(keys)]
        for start, end in itertools.pairwise(bounds):
            lot = lots[int(numbers_of[start])]
            mine = places[start:end]
            fresh = mine[~lot.settled[mine]]
            if len(fresh):
                lot.settled[fresh] = True
                lot.settle(len(fresh))

    def changing(self, name: SubscriptionName, split: Split, seconds: int) -> Split:
        """Of a deadline change of ``split`` (under ``name``, to ``seconds``), the ids
        the dispatcher must see: all but those known here to keep their leases as
        they are.

        An id is known so when it is out on a stream of ``name`` in this process, in
        an answer whose pull asked for this very lease (a stream leases for the
        client's latest deadline change, and Google's clients send one for every
        message received) and started at most the lease slack ago, with no deadline
        change since. The dispatcher leased those messages after the pull started,
        until then plus ``seconds`` plus the slack, so the change asks for no more,
        and at most the slack less (``planner.lease_holds``). Never with
        exactly-once: such lots have no lease here. Those answered here count in
        ``DEADLINE_CHANGES_UNCHANGED``.

        An id settled here already (acked, nacked) is judged by the lot it left: a
        change to a delivery no longer leased changes nothing. Google's clients send
        a message's receipt change and its ack as two calls, and the ack often comes
        first (three in four of a drain's receipt changes through the Go client).

        The others go on alone: an id not out here (pulled elsewhere, or its lot
        gone: expired, its stream ended, or wholly settled and pulled more than the
        slack ago), or out on a lot whose lease may have moved. Sending the whole
        change on for one such id had the dispatcher parse and check every id of it,
        and its answer mark every lot named as moved, so that the next receipt
        changes went on too: in a StreamingPull drain through Google's Go client
        nearly every change reached the dispatcher."""
        if seconds <= 0 or not split.ids:
            return split
        latest = time.monotonic() - LEASE_SLACK_S
        answered = np.zeros(len(split.ids), dtype=bool)
        for tag, numbers, places in _groups(split.parsed):
            lots, lot_of, _ = self._find(tag, numbers)
            if not lots:
                continue
            # Which lots hold their leases as asked (the last entry: not out here),
            # then each id by its lot's answer: numpy calls a request, not a lot.
            holds = np.zeros(len(lots) + 1, dtype=bool)
            named = np.bincount(lot_of + 1, minlength=len(lots) + 1)[1:].nonzero()[0]
            for number in named.tolist():
                lot = lots[number]
                if lot.lease_s == seconds and lot.pulled_at >= latest and lot.stream.name == name:
                    lot.stream.lease_s = seconds
                    holds[number] = True
            here = holds[lot_of]
            if places is None:
                answered |= here
            else:
                answered[places[here]] = True
        count = int(answered.sum())
        if not count:
            return split
        DEADLINE_CHANGES_UNCHANGED.inc(count)
        if count == len(split.ids):
            return Split([], [], split.malformed)
        rest = [a for a, done in zip(split.ids, answered.tolist(), strict=True) if not done]
        return split_malformed(rest)._replace(malformed=split.malformed)

    def extended(self, split: Split, seconds: int, failures: dict[str, str]) -> None:
        if seconds == 0:
            self.settled(split.parsed)
            return
        if failures:
            self.settled(split.parsed, np.array([a in failures for a in split.ids], dtype=bool))
        until = time.monotonic() + seconds
        for tag, numbers, _ in _groups(split.parsed):
            lots, lot_of, place = self._find(tag, numbers)
            for number in np.unique(lot_of[lot_of >= 0]).tolist():
                lot = lots[number]
                if lot.settled[place[lot_of == number]].all():
                    continue  # none of its deliveries named is out any more
                # The lot's room is held as long as its latest deadline change asks (a
                # change for some of its ids holds all of them: room, not leases).
                lot.until = until
                lot.lease_s = 0  # its leases may have moved: changes go to the dispatcher
                lot.stream.held_until(until)
                lot.stream.lease_s = max(constants.MIN_ACK_DEADLINE_S, seconds)

    def expired(self, *lots: Lot) -> None:
        """The lots' leases ran out: what they still hold leaves the room."""
        self.forget(*lots)
        for lot in lots:
            lot.settle(lot.left)

    def forget(self, *lots: Lot) -> None:
        """Route none of the lots' deliveries any more (their stream ended, or they
        expired): each tag's index is rebuilt once, however many of its lots leave."""
        gone = set(lots)
        for tag in {lot.tag for lot in lots}:
            index = self._tags.get(tag)
            if index is not None and not gone.isdisjoint(index.lots):
                self._set(tag, [lot for lot in index.lots if lot not in gone])
