"""The open StreamingPull streams of this process, by the ack ids they have out.

Acks and deadline changes reach a process on the stream that delivered them or,
as Google's clients send them, through unary Acknowledge and ModifyAckDeadline
calls; ``Streams`` routes each to the stream that has the ack id out, so that
the stream's flow-control room follows (``api/grpc/streaming.py``).
"""

from __future__ import annotations

import time
from typing import Protocol

from lakepubsub import constants


class Held(Protocol):
    """What ``Streams`` needs of a stream (``streaming.Stream``)."""

    lease_s: int | None
    # ack id -> (bytes, lease end), on time.monotonic()
    out: dict[str, tuple[int, float]]

    def release(self, ack_ids: list[str]) -> None: ...

    def extend(self, ack_ids: list[str], until: float) -> None: ...


class Streams:
    """The open streams of this process by the ack ids they have out. Used on the
    door's event loop only."""

    def __init__(self) -> None:
        self._owner: dict[str, Held] = {}

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
