"""A process's deferred lease commits, spaced so their number does not grow with
its subscriptions.

A subscription that is not exactly-once keeps deliveries, acks and deadline
changes in memory and commits them once they are ``lease_flush_s`` old (three
PUTs on S3). Alone, that makes a process's lease commits grow with its busy
subscriptions (100 of them at a 30 s window: 10 PUTs a second, $130 a month).
Instead each due subscription takes the next free slot, at most one per
``Settings.lease_commit_spacing_s`` in the process, in the order they fell due:
with few subscriptions nothing changes; with many, each one's window stretches
(at-least-once redelivers more after a crash) and the PUTs stay bounded.
Commits that cannot wait (exactly-once, truncations, seeks, dead-lettering, a
full buffer, a stop) take no slot.
"""

from __future__ import annotations

import threading
import time


class LeaseSlots:
    """Hands out commit times at least ``spacing_s`` apart (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = -float("inf")

    def reserve(self, spacing_s: float, now: float | None = None) -> float:
        """The time.monotonic() at which the caller may commit: now, or one spacing
        after the slot handed out last."""
        at = time.monotonic() if now is None else now
        with self._lock:
            slot = max(at, self._last + spacing_s)
            self._last = slot
            return slot


# The process's one set of slots (a module global, as the checkpointer is: every
# dispatcher of every engine in the process shares the bound).
PROCESS_LEASE_SLOTS = LeaseSlots()
