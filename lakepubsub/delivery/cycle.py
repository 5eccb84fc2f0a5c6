"""One dispatcher's view of its subscription's tables, and one optimistic attempt
of its cycle on them: load the lease state and the messages table (asking
storage only when told of a commit, or when the next look is due), plan the
queued requests with a ``Planner``, and commit the plan or hold it in memory for
the lease flush window. The dispatcher (``lakepubsub/delivery/dispatcher.py``)
queues the requests, retries a lost race and answers them."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from lakepubsub import metrics
from lakepubsub.constants import MAX_DEFERRED_LEASE_CHANGES, US_PER_S
from lakepubsub.delivery.ackids import AckId, subscription_tag
from lakepubsub.delivery.context import DeliveryContext
from lakepubsub.delivery.lease_slots import LeaseSlots
from lakepubsub.delivery.lease_table import LeaseTable
from lakepubsub.delivery.leases import LEASE_SLACK_US, LeaseState
from lakepubsub.delivery.planner import Planner, change_leaves_leases
from lakepubsub.delivery.planning import (
    Claimer,
    apply,
    apply_pull_deadlines,
    policy_of,
    truncate,
)
from lakepubsub.delivery.requests import (
    AckRequest,
    FlushRequest,
    PullRequest,
    SeekRequest,
    TruncateRequest,
)
from lakepubsub.messages import Received, TruncationEvent
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.retry import optimistic

log = logging.getLogger(__name__)

# The backlog gauge (metrics.BACKLOG) is computed at most this often per subscription.
BACKLOG_EVERY_S = 1.0
Truncates = list[TruncateRequest | SeekRequest | FlushRequest]
Outcome = tuple[list[dict[str, str]], list[TruncationEvent | None], Received]


class CycleTables:
    """A subscription's lease and messages tables as one dispatcher knows them.
    ``attempt`` runs on the dispatcher's thread; ``told``, ``look_again`` and
    ``cached`` may be called from any."""

    def __init__(
        self, context: DeliveryContext, stopping: Callable[[], bool], lease_slots: LeaseSlots
    ) -> None:
        self._context = context
        self._settings = context.settings
        self._stopping = stopping  # whether the dispatcher is stopping (commit everything)
        self.claimer = Claimer(context.dead_letter)
        self._slots = lease_slots
        # The slot taken for the deferred changes pending since the first time.
        self._lease_slot: tuple[float, float] | None = None
        self._backlog_due = 0.0
        # Whether the next cycle asks storage for commits nobody told of (the next
        # commit file of both tables: a GET each on S3), and when it next must;
        # between looks it reads only what it was told of (``told``).
        self._lock = threading.Lock()
        self._look = True
        self._next_look = 0.0
        self._told_version = -1  # the messages table's newest version committed here
        self.committed = False  # the last attempt committed (the flush window applies)
        self.leases: LeaseTable | None = None
        self._messages: MessagesTable | None = None

    @property
    def cached(self) -> LeaseState | None:
        """The lease state as last read, committed or deferred here."""
        return self.leases.cached if self.leases is not None else None

    def told(self, version: int) -> None:
        """A local publish committed the messages table's ``version`` (-1: some
        version not known, so the next cycle looks)."""
        with self._lock:
            if version < 0:
                self._look = True
            self._told_version = max(self._told_version, version)

    def look_again(self) -> None:
        """Another writer committed: the next attempt reads what it did."""
        with self._lock:
            self._look = True

    def leaves_leases(
        self, sub: Subscription, ack_ids: Sequence[AckId], deadline_s: int | None
    ) -> bool:
        """Whether a deadline change of ``ack_ids`` to ``deadline_s`` would leave every
        lease as it is on the state last read, committed or deferred here
        (``planner.change_leaves_leases``); never with exactly-once (each id is
        checked and confirmed)."""
        state = self.cached
        if deadline_s is None or state is None or sub.enable_exactly_once_delivery:
            return False
        tag = subscription_tag(sub.uid)
        now_us = self._settings.clock_us()
        return change_leaves_leases(state, tag, ack_ids, deadline_s, now_us)

    def earliest_due(self, now: float) -> float:
        """When (time.monotonic(), ``now`` being the time now) the first lease of the
        state last known here comes due; infinity if none is known."""
        state = self.cached
        if state is None:
            return math.inf
        now_us = self._settings.clock_us()
        wait_us = state.earliest_due_us(now_us) - now_us
        return now + max(0, wait_us) / US_PER_S

    def flush(self, sub: Subscription) -> None:
        """Commit what waits in memory before the dispatcher goes (a clean stop)."""
        if self.leases is None or not self.leases.pending:
            return
        try:
            optimistic(
                lambda: self.attempt(sub, [], [], []),
                table="leases",
                attempts=self._settings.commit_attempts,
            )
        except Exception:  # a crash would lose them too: they are redelivered
            log.warning("deferred lease changes of %s not written", sub.name)

    def _load(self, sub: Subscription) -> tuple[LeaseTable, MessagesTable, LeaseState]:
        if self.leases is None:
            self.leases = LeaseTable(self._context.lake, sub.uid)
        if self._messages is None:
            self._messages = MessagesTable(self._context.lake, sub.topic_uid)
        now = time.monotonic()
        with self._lock:
            look = self._look or now >= self._next_look
            self._look = False
            told = self._told_version
        state = self.leases.state(look=look)
        if look:
            self._messages.refresh()
            self._next_look = now + self._settings.change_check(self._context.peered())
        elif told > self._messages.version:  # its commit file is in memory: no request
            self._messages.refresh(until=told)
        return self.leases, self._messages, state

    def attempt(
        self,
        sub: Subscription,
        acks: list[AckRequest],
        truncates: Truncates,
        pulls: list[PullRequest],
    ) -> Outcome:
        """Plan the requests on the latest state and commit (or defer) the plan; raises
        ``CommitFailedError`` when another writer got there first."""
        demand = sum(p.max_messages for p in pulls)
        table, messages, state = self._load(sub)
        policy = policy_of(sub)
        deadlines = {p.ack_deadline_s for p in pulls}
        uniform = len(deadlines) == 1
        if uniform and (deadline := deadlines.pop()) is not None:
            # every pull's own lease (a stream's), with the slack for receipt modacks
            policy = replace(policy, ack_deadline_s=deadline, lease_slack_us=LEASE_SLACK_US)
        planner = Planner(state, policy, self._settings.clock_us())
        self.claimer.moved = False
        ack_results = [apply(planner, r) for r in acks]
        events: list[TruncationEvent | None] = []
        for request in truncates:
            if isinstance(request, FlushRequest):
                events.append(None)
            elif isinstance(request, SeekRequest):
                planner.reset(request.frontier, request.rows)
                events.append(None)
            else:
                events.append(truncate(planner, messages, request))
        deliveries = self.claimer.claim(sub, planner, messages, demand) if demand else Received()
        if not uniform:
            apply_pull_deadlines(planner, deliveries, pulls)
        if planner.dirty or table.pending:
            if self._must_commit(sub, table, truncates):
                table.commit(planner)
                self.committed = True
            elif planner.dirty:
                table.defer(planner)
        self._observe(sub, planner, messages, ack_results, acks)
        return ack_results, events, deliveries

    def _must_commit(self, sub: Subscription, table: LeaseTable, truncates: Truncates) -> bool:
        """Whether this cycle commits, or leaves its changes in memory for a later one:
        an exactly-once subscription confirms nothing before it is stored, nor do
        truncations, seeks and dead-lettering wait; a push subscription may also be
        dispatched by ``lakepubsub push`` processes, which are not peered and must
        see its leases; the others wait up to the lease flush window."""
        flush_s = self._settings.lease_flush_s(self._context.peered())
        if (
            flush_s <= 0
            or self._stopping()
            or truncates
            or self.claimer.moved
            or sub.enable_exactly_once_delivery
            or sub.push_config.is_push
            or table.pending >= MAX_DEFERRED_LEASE_CHANGES
        ):
            return True
        return time.monotonic() >= self.flush_at()

    def flush_at(self) -> float:
        """When deferred lease changes are committed (time.monotonic()): once they
        are a lease flush window old, at the process's next free slot (LeaseSlots)."""
        since = self.leases.pending_since if self.leases is not None else None
        if since is None:
            self._lease_slot = None
            return math.inf
        if self._lease_slot is not None and self._lease_slot[0] == since:
            return self._lease_slot[1]
        due = since + self._settings.lease_flush_s(self._context.peered())
        spacing_s = self._settings.lease_commit_spacing_s(self._context.peered())
        if spacing_s <= 0 or time.monotonic() < due:
            return due
        self._lease_slot = (since, self._slots.reserve(spacing_s))
        return self._lease_slot[1]

    def _observe(
        self,
        sub: Subscription,
        planner: Planner,
        messages: MessagesTable,
        ack_results: list[dict[str, str]],
        acks: list[AckRequest],
    ) -> None:
        """Metrics of a committed cycle: acks applied, and (at most every
        BACKLOG_EVERY_S) the subscription's backlog."""
        metrics.ACKED.inc(
            sum(
                len(r.ack_ids) - len(f)
                for r, f in zip(acks, ack_results, strict=True)
                if r.deadline_s is None
            )
        )
        now = time.monotonic()
        if now >= self._backlog_due:
            self._backlog_due = now + BACKLOG_EVERY_S
            backlog = messages.head() - planner.cursor.frontier + planner.outstanding()
            metrics.BACKLOG.labels(sub.name.path).set(backlog)
