"""The open StreamingPull streams of this process, by the ack ids they have out.

Acks and deadline changes reach a process on the stream that delivered them or,
as Google's clients send them, through unary Acknowledge and ModifyAckDeadline
calls; ``Streams`` routes each to the stream that has the ack id out, so that
the stream's flow-control room follows (``api/grpc/streaming.py``).

A stream's room is kept by ``Lot``: the deliveries of one pull's answer, which
go out together, with one lease end. An ack id maps to its lot (one dict entry,
written for the whole answer at once); settling ids counts them per lot and
frees their share of the lot's bytes (the rest of the bytes with the last id).
Per id that is one dict operation, where a stream's own map of ids to sizes and
lease ends and the routing map cost two, each in Python (about a fifth of the
server's CPU per message of a StreamingPull drain).
"""

from __future__ import annotations

import collections
import time
from itertools import repeat
from typing import Protocol

from lakepubsub import constants
from lakepubsub.delivery.leases import LEASE_SLACK_US
from lakepubsub.metrics import DEADLINE_CHANGES_UNCHANGED
from lakepubsub.resources.names import SubscriptionName

# How far past the pull's lease a stream's leases run, in seconds.
LEASE_SLACK_S = LEASE_SLACK_US / constants.US_PER_S
# A generation of ids settled lately ends after the slack or this many ids, whichever
# comes first. Google's Go client sends a message's receipt change within a few
# thousand acks of the ack: in a 1,000,000-message drain, 1-2 % of its receipt changes
# went on to the dispatcher with generations of 8,192 to 32,768 ids (12 % with 4,096),
# and 2.5-2.8 % with generations of the whole slack (about 180,000 ids). Those large
# dicts cost 0.3-0.45 µs of server CPU a message more, in the processor's cache misses
# on every lookup and insertion (``bench/results/ab-settled-generations.md``).
SETTLED_GENERATION_IDS = 16_384


class Holder(Protocol):
    """What ``Streams`` needs of a stream (``streaming.Stream``)."""

    lease_s: int | None
    name: SubscriptionName

    def freed(self, lot: Lot, count: int, size: int) -> None: ...

    def held_until(self, until: float) -> None: ...


class Lot:
    """The deliveries of one answer a stream holds: how many are not settled yet,
    their bytes, and until when their room is held (time.monotonic())."""

    __slots__ = ("ack_ids", "lease_s", "left", "pulled_at", "size", "stream", "until")

    def __init__(
        self,
        stream: Holder,
        ack_ids: list[str],
        size: int,
        until: float,
        lease: tuple[int, float] | None = None,
    ) -> None:
        self.stream = stream
        self.ack_ids = ack_ids
        self.left = len(ack_ids)
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


class Streams:
    """The open streams of this process by the ack ids they have out. Used on the
    door's event loop only."""

    def __init__(self) -> None:
        self._lot_of: dict[str, Lot] = {}
        # Ids settled here lately, with the lot they left (None: not out here), in two
        # generations of the lease slack or ``SETTLED_GENERATION_IDS`` each: Google's
        # clients send the receipt change of a message and its ack as two calls, and
        # the ack often arrives first. ``changing`` judges such an id by the lot it left.
        self._settled: dict[str, Lot | None] = {}
        self._settled_before: dict[str, Lot | None] = {}
        self._rotate_at = time.monotonic() + LEASE_SLACK_S

    def delivered(self, lot: Lot) -> None:
        """Route the lot's ack ids to it."""
        self._lot_of.update(dict.fromkeys(lot.ack_ids, lot))

    def settled(self, ack_ids: list[str]) -> None:
        """Acked (or, through ``extended``, nacked or refused): out of the room."""
        # Counted in C (Counter of an iterable); ids not out here count under None.
        lots = list(map(self._lot_of.pop, ack_ids, repeat(None)))
        now = time.monotonic()
        if now >= self._rotate_at or len(self._settled) >= SETTLED_GENERATION_IDS:
            self._settled_before, self._settled = self._settled, {}
            self._rotate_at = now + LEASE_SLACK_S
        self._settled.update(zip(ack_ids, lots, strict=True))
        found: collections.Counter[Lot | None] = collections.Counter(lots)
        for lot, count in found.items():
            if lot is not None:
                lot.settle(count)

    def changing(self, name: SubscriptionName, ack_ids: list[str], seconds: int) -> list[str]:
        """Of a deadline change of ``ack_ids`` of ``name`` to ``seconds``, the ids the
        dispatcher must see: all but those known here to keep their leases as they are.

        An id is known so when it is out on a stream of ``name`` in this process, in an
        answer whose pull asked for this very lease (a stream leases for the client's
        latest deadline change, and Google's clients send one for every message
        received) and started at most the lease slack ago, with no deadline change
        since. The dispatcher leased those messages after the pull started, until
        then plus ``seconds`` plus the slack, so the change asks for no more, and at
        most the slack less (``planner.lease_holds``). Never with exactly-once: such
        lots have no lease here. Those answered here count in
        ``DEADLINE_CHANGES_UNCHANGED``.

        An id settled here lately (acked, nacked) is judged by the lot it left: a
        change to a delivery no longer leased changes nothing. Google's clients send
        a message's receipt change and its ack as two calls, and the ack often comes
        first (three in four of a drain's receipt changes through the Go client).

        The others go on alone: an id not out here (pulled elsewhere, or settled too
        long ago), or out on a lot whose lease may have moved. Sending the
        whole change on for one such id had the dispatcher parse and check every id
        of it, and its answer mark every lot named as moved, so that the next receipt
        changes went on too: in a StreamingPull drain through Google's Go client
        nearly every change reached the dispatcher."""
        if seconds <= 0 or not ack_ids:
            return ack_ids
        latest = time.monotonic() - LEASE_SLACK_S
        # The latest generation of settled ids first: three in four receipt changes come
        # after the ack. Then the ids out here, then the older generation, each by
        # ``dict.get`` with the lot found so far as the default and only while some id
        # has none, all in C (a loop over the ids in Python was 4 % of a drain's GIL
        # samples). An id is in at most one of them (ack ids are never issued twice),
        # so a lot found passes through as the default. In a simulated drain the
        # door's routing cost 337 ns a message against 403-426 looking up the ids out
        # here first.
        lots = list(map(self._settled.get, ack_ids))
        distinct = set(lots)
        if None in distinct:
            lots = list(map(self._lot_of.get, ack_ids, lots))
            distinct = set(lots)
            if None in distinct:  # settled here lately? (a change after its ack changes nothing)
                lots = list(map(self._settled_before.get, ack_ids, lots))
                distinct = set(lots)
        other: set[Lot | None] = set()
        for lot in distinct:
            if (
                lot is None
                or lot.lease_s != seconds
                or lot.pulled_at < latest
                or lot.stream.name != name
            ):
                other.add(lot)
            else:
                lot.stream.lease_s = seconds
        if len(other) == len(distinct):  # none answered here
            return ack_ids
        rest = [a for a, lot in zip(ack_ids, lots, strict=True) if lot in other] if other else []
        DEADLINE_CHANGES_UNCHANGED.inc(len(ack_ids) - len(rest))
        return rest

    def extended(self, ack_ids: list[str], seconds: int, failures: dict[str, str]) -> None:
        if seconds == 0:
            self.settled(ack_ids)
            return
        if failures:
            self.settled([a for a in ack_ids if a in failures])
        until = time.monotonic() + seconds
        lots = {lot for lot in map(self._lot_of.get, ack_ids) if lot is not None}
        for lot in lots:
            # The lot's room is held as long as its latest deadline change asks (a
            # change for some of its ids holds all of them: room, not leases).
            lot.until = until
            lot.lease_s = 0  # its leases may have moved: changes go to the dispatcher
            lot.stream.held_until(until)
            lot.stream.lease_s = max(constants.MIN_ACK_DEADLINE_S, seconds)

    def expired(self, lot: Lot) -> None:
        """The lot's leases ran out: what it still holds leaves the room."""
        self.forget(lot)
        lot.settle(lot.left)

    def forget(self, lot: Lot) -> None:
        """Route none of the lot's ids any more (its stream ended, or it expired)."""
        lot_of = self._lot_of
        for ack_id in lot.ack_ids:
            if lot_of.get(ack_id) is lot:
                del lot_of[ack_id]
