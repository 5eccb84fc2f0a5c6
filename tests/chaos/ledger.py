"""What the clients saw, and the delivery invariants checked against it.

Times are ``time.time()`` on the client; the servers run on the same host and
stamp leases with the same wall clock, so a request's send time is a lower
bound for anything the server decided while serving it.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

# Clock granularity allowance when comparing client and server times.
CLOCK_SLACK_S = 0.005


@dataclass(frozen=True)
class Delivery:
    message_id: str
    ack_id: str
    attempt: int
    sent: float  # when the pull that returned it was sent
    received: float  # when its response arrived


@dataclass(frozen=True)
class LeaseChange:
    """An ack deadline change a client asked for (0 is a nack); ``sent`` bounds it below."""

    ack_id: str
    deadline_s: int
    sent: float


@dataclass
class SubscriptionLog:
    ack_deadline_s: int
    exactly_once: bool
    deliveries: dict[str, list[Delivery]] = field(default_factory=lambda: defaultdict(list))
    # message id -> arrival times of acks the server reported as successful
    acked: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    changes: dict[str, list[LeaseChange]] = field(default_factory=lambda: defaultdict(list))
    failed_acks: int = 0  # exactly-once ack ids the server refused


@dataclass
class Invariants:
    """The counts a chaos run reports. ``lost`` and ``duplicated_after_ack`` must be 0."""

    published: int = 0  # messages whose publish got a 200
    acked: int = 0  # (subscription, message) pairs with a successful ack
    lost: int = 0  # published with a 200 but missing from the topic, or never delivered
    duplicated_after_ack: int = 0  # delivered by a pull sent after a successful ack
    acked_twice: int = 0  # exactly-once: messages successfully acked more than once
    live_lease_overlaps: int = 0  # delivered again while an earlier lease was surely live
    missing_from_topic: int = 0
    undelivered: int = 0
    stored_duplicates: int = 0  # extra copies stored (at-least-once publish; not a failure)

    def line(self) -> str:
        return (
            f"published={self.published} acked={self.acked} lost={self.lost} "
            f"duplicated-after-ack={self.duplicated_after_ack} acked-twice={self.acked_twice} "
            f"live-lease-overlaps={self.live_lease_overlaps} "
            f"stored-duplicates={self.stored_duplicates}"
        )


class Ledger:
    """Thread-safe record of every client-visible outcome."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.published: dict[str, str] = {}  # message id -> payload, from 200 responses
        self.unconfirmed_publishes = 0  # messages in publishes without a 200
        self.subscriptions: dict[str, SubscriptionLog] = {}
        self.statuses: Counter[tuple[str, str]] = Counter()  # (operation, status or error)

    def add_subscription(self, name: str, *, ack_deadline_s: int, exactly_once: bool) -> None:
        self.subscriptions[name] = SubscriptionLog(ack_deadline_s, exactly_once)

    def status(self, operation: str, outcome: int | str) -> None:
        with self._lock:
            self.statuses[(operation, str(outcome))] += 1

    def publish_ok(self, ids: list[str], payloads: list[str]) -> None:
        with self._lock:
            for message_id, payload in zip(ids, payloads, strict=True):
                self.published[message_id] = payload

    def publish_unknown(self, count: int) -> None:
        with self._lock:
            self.unconfirmed_publishes += count

    def delivered(self, sub: str, items: list[Delivery]) -> None:
        with self._lock:
            log = self.subscriptions[sub]
            for item in items:
                log.deliveries[item.message_id].append(item)

    def acked(self, sub: str, message_ids: list[str], failed: int, at: float) -> None:
        with self._lock:
            log = self.subscriptions[sub]
            for message_id in message_ids:
                log.acked[message_id].append(at)
            log.failed_acks += failed

    def changed(self, sub: str, message_id: str, change: LeaseChange) -> None:
        with self._lock:
            self.subscriptions[sub].changes[message_id].append(change)

    # -- checks ----------------------------------------------------------------------------

    def operations(self) -> int:
        return sum(self.statuses.values())

    def server_errors(self, allowed: frozenset[str] = frozenset()) -> int:
        """Responses with a 5xx status, other than the ``allowed`` ones (e.g. "503")."""
        return sum(
            n for (_, s), n in self.statuses.items() if s.startswith("5") and s not in allowed
        )

    def check(self, stored: dict[str, str]) -> Invariants:
        """The invariants, given the topic's stored messages (message id -> payload)."""
        out = Invariants(published=len(self.published))
        out.missing_from_topic = sum(
            1 for mid, payload in self.published.items() if stored.get(mid) != payload
        )
        out.stored_duplicates = len(stored) - len(set(stored.values()))
        for log in self.subscriptions.values():
            out.acked += len(log.acked)
            out.undelivered += sum(1 for mid in self.published if mid not in log.deliveries)
            if log.exactly_once:
                out.acked_twice += sum(1 for times in log.acked.values() if len(times) > 1)
            for mid, deliveries in log.deliveries.items():
                first_ack = min(log.acked.get(mid, []), default=None)
                if first_ack is not None:
                    out.duplicated_after_ack += sum(1 for d in deliveries if d.sent > first_ack)
                out.live_lease_overlaps += _overlaps(log, deliveries, log.changes.get(mid, []))
        out.lost = out.missing_from_topic + out.undelivered
        return out


def _overlaps(log: SubscriptionLog, deliveries: list[Delivery], changes: list[LeaseChange]) -> int:
    """Deliveries that arrived before an earlier delivery's lease can have ended.

    A lease granted while serving a pull sent at ``s`` lasts until at least
    ``s + ack_deadline`` unless a deadline change (sent at ``c``, to ``d`` s)
    cut it to no earlier than ``c + d``.
    """
    by_ack = defaultdict(list)
    for change in changes:
        by_ack[change.ack_id].append(change.sent + change.deadline_s)
    ordered = sorted(deliveries, key=lambda d: d.received)
    count = 0
    for i, later in enumerate(ordered):
        for earlier in ordered[:i]:
            end = min([earlier.sent + log.ack_deadline_s, *by_ack.get(earlier.ack_id, [])])
            if later.received + CLOCK_SLACK_S < end and later.ack_id != earlier.ack_id:
                count += 1
                break
    return count
