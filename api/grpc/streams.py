"""The open StreamingPull streams of this process, by the ack ids they have out.

Acks and deadline changes reach a process on the stream that delivered them or,
as Google's clients send them, through unary Acknowledge and ModifyAckDeadline
calls; ``Streams`` routes each to the stream that has the ack id out, so that
the stream's flow-control room follows (``api/grpc/streaming.py``).
"""

from __future__ import annotations

import time
from typing import Protocol

from prometheus_client import Counter

from lakepubsub import constants

# How long an acknowledged ack id is remembered for ``Streams.unchanged`` (at least
# this long): receipt modacks that follow an ack come within a client's ack batching
# interval (100 ms for Google's clients). Remembering only saves work: an ack id is
# never issued again, so a change to an acknowledged one is a no-op whenever it comes.
ACKED_MEMORY_S = 2.0
DOOR_DEADLINE_CHANGES = Counter(
    "lakepubsub_grpc_deadline_changes_unchanged_total",
    "Ack ids of deadline changes answered by the gRPC door without the dispatcher: "
    "the change would leave the lease as it is (Streams.unchanged)",
)
# A delivery's lower bound on its lease end, once a deadline change was applied.
UNKNOWN = float("-inf")


class Held(Protocol):
    """What ``Streams`` needs of a stream (``streaming.Stream``)."""

    uid: str
    exactly_once: bool
    lease_s: int | None
    # ack id -> (bytes, lease end, lease end at least), on time.monotonic()
    out: dict[str, tuple[int, float, float]]

    def release(self, ack_ids: list[str]) -> None: ...

    def extend(self, ack_ids: list[str], until: float) -> None: ...


class Streams:
    """The open streams of this process by the ack ids they have out. Used on the
    door's event loop only."""

    def __init__(self) -> None:
        self._owner: dict[str, Held] = {}
        # Ack ids of this process's streams acknowledged through this process, in
        # two generations of at most ACKED_MEMORY_S each (see ``unchanged``).
        self._acked: set[str] = set()
        self._acked_before: set[str] = set()
        self._acked_since = time.monotonic()

    def delivered(self, stream: Held, ack_ids: list[str]) -> None:
        for ack_id in ack_ids:
            self._owner[ack_id] = stream

    def settled(self, ack_ids: list[str]) -> list[str]:
        """Acked (or, through ``extended``, nacked or refused): out of the room.
        Returns those of ``ack_ids`` that a stream of this process had out."""
        pop = self._owner.pop
        found = []
        last: Held | None = None
        mine: list[str] = []
        for ack_id in ack_ids:
            stream = pop(ack_id, None)
            if stream is None:
                continue
            if stream is not last:
                if last is not None:
                    last.release(mine)
                last, mine = stream, []
            mine.append(ack_id)
            found.append(ack_id)
        if last is not None:
            last.release(mine)
        return found

    def acked(self, ack_ids: list[str]) -> None:
        """``ack_ids`` (from ``settled``) were acknowledged: their rows are gone."""
        now = time.monotonic()
        if now - self._acked_since > ACKED_MEMORY_S:
            self._acked_before, self._acked = self._acked, set()
            self._acked_since = now
        self._acked.update(ack_ids)

    def unchanged(self, uid: str, ack_ids: list[str], seconds: int) -> bool:
        """Whether extending ``ack_ids`` of subscription ``uid`` to ``seconds`` from now
        would leave every lease as it is, so the change needs no dispatcher.

        Google's clients send such a change for every message they receive (the
        receipt modack, asking for the deadline the stream leased for). The
        dispatcher already leaves those leases alone (``leases.LEASE_SLACK_US``);
        deciding it here saves parsing, routing and planning one change per
        delivered message. It is decided only when this process knows every
        lease, for a subscription without exactly-once (the caller checks: its
        clients wait for a confirmation). Each id must be either
        - acknowledged through this process a moment ago (``acked``): the row is
          gone, and the dispatcher would find nothing to change. Google's clients
          often send the receipt modack after the ack of a message handled fast;
        - or out on one of this process's streams of that subscription, untouched
          by any deadline change since it was delivered. Its lease then ends
          between the stream's pull being sent and answered, plus the lease and
          the slack, and the change is skipped when both bounds give the
          dispatcher's answer: the lease lasts at least ``seconds`` from now and
          at most the slack more.
        """
        if not 0 < seconds <= constants.MAX_ACK_DEADLINE_S or not ack_ids:
            return False
        target = time.monotonic() + seconds
        owner_of = self._owner
        last: Held | None = None
        out: dict[str, tuple[int, float, float]] = {}
        for ack_id in set(ack_ids).difference(self._acked, self._acked_before):
            stream = owner_of.get(ack_id)
            if stream is None:
                return False
            if stream is not last:
                if stream.uid != uid or stream.exactly_once:
                    return False
                last, out = stream, stream.out
            entry = out.get(ack_id)
            if entry is None or not entry[1] <= target <= entry[2]:
                return False
        DOOR_DEADLINE_CHANGES.inc(len(ack_ids))
        return True

    def extended(self, ack_ids: list[str], seconds: int, failures: dict[str, str]) -> None:
        if seconds == 0:
            self.settled(ack_ids)
            return
        if failures:
            self.settled([a for a in ack_ids if a in failures])
        until = time.monotonic() + seconds
        owner_of = self._owner
        owners = {s for a in ack_ids if a not in failures and (s := owner_of.get(a)) is not None}
        for stream in owners:
            stream.extend(ack_ids, until)
            stream.lease_s = max(constants.MIN_ACK_DEADLINE_S, seconds)

    def closed(self, stream: Held) -> None:
        for ack_id in list(stream.out):
            if self._owner.get(ack_id) is stream:
                del self._owner[ack_id]
