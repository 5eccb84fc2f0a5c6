"""What a delivery dispatcher queues: pulls, acks and deadline changes, truncations,
seeks and flushes, each a small request answered through its future once the
cycle that applied it has committed (``lakepubsub/delivery/dispatcher.py``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from lakepubsub.delivery.ackids import AckId
from lakepubsub.delivery.leases import Row
from lakepubsub.messages import Pull, ReceivedMessage, TruncationEvent


@dataclass
class PullRequest:
    max_messages: int
    wait_until: float  # time.monotonic(); equal to "now" for returnImmediately
    # The lease of what this pull gets, when not the subscription's own
    # (a StreamingPull stream's stream_ack_deadline_seconds).
    ack_deadline_s: int | None = None
    future: Future[Sequence[ReceivedMessage]] = field(default_factory=Future)
    planned: bool = False  # has been part of at least one cycle's demand

    @classmethod
    def of(cls, pull: Pull) -> PullRequest:
        """The request for ``pull``, waiting from now."""
        return cls(pull.max_messages, time.monotonic() + pull.wait_s, pull.ack_deadline_s)


@dataclass
class AckRequest:
    """An ack (``deadline_s`` None), a deadline change (0 is a nack) or, with
    ``leases.RELEASE``, deliveries given back unseen."""

    ack_ids: Sequence[AckId]
    deadline_s: int | None
    future: Future[dict[str, str]] = field(default_factory=Future)


@dataclass
class TruncateRequest:
    """Drop pending messages below ``end_offset`` and queue an event; or, with
    ``silent``, acknowledge them (a batch consumer committing what it processed)."""

    end_offset: int | None  # None: the topic head (drop every pending message)
    reason: str
    silent: bool = False
    future: Future[TruncationEvent] = field(default_factory=Future)


@dataclass
class SeekRequest:
    """Restart the subscription at ``frontier`` with ``rows`` outstanding (seek, snapshots)."""

    frontier: int
    rows: list[Row]
    future: Future[None] = field(default_factory=Future)


@dataclass
class FlushRequest:
    """Commit the lease changes held in memory (a reader of the stored table, such as a
    snapshot, must see them)."""

    future: Future[None] = field(default_factory=Future)


Request = PullRequest | AckRequest | TruncateRequest | SeekRequest | FlushRequest
