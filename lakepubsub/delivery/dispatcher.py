"""The delivery dispatcher: one thread per active subscription per process.

Pulls, acks, deadline changes and truncations queue here as small requests;
each cycle the dispatcher takes everything queued, applies it to the lease
state with a ``Planner`` and commits the result as ONE MERGE on the
subscription's lease table, with a strict compare-and-swap on the table
version. A lost race (another process, a job) rereads the state and replans.
Nothing is answered before its commit has landed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import replace
from typing import Any, TypeVar, cast

from lakepubsub import errors, metrics
from lakepubsub._lake import Lake
from lakepubsub.constants import (
    CONTENTION_MEMORY_S,
    MAX_DEFERRED_LEASE_CHANGES,
    PACE_FACTOR,
    PACE_MAX_S,
    US_PER_S,
)
from lakepubsub.delivery.ackids import AckId
from lakepubsub.delivery.lease_slots import PROCESS_LEASE_SLOTS, LeaseSlots
from lakepubsub.delivery.lease_table import LeaseTable
from lakepubsub.delivery.leases import LEASE_SLACK_US, RELEASE, LeaseState, Planner
from lakepubsub.delivery.planning import (
    Claimer,
    DeadLetterSink,
    apply,
    apply_pull_deadlines,
    policy_of,
    received,
    truncate,
)
from lakepubsub.delivery.requests import (
    AckRequest,
    FlushRequest,
    PullRequest,
    Request,
    SeekRequest,
    TruncateRequest,
)
from lakepubsub.messages import ReceivedMessage, TruncationEvent
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.retry import optimistic
from lakepubsub.settings import Settings

log = logging.getLogger(__name__)
SubscriptionLookup = Callable[[], Subscription | None]
# The backlog gauge (metrics.BACKLOG) is computed at most this often per subscription.
BACKLOG_EVERY_S = 1.0


class Dispatcher:
    """Serves one subscription in this process. Thread-safe entry points."""

    def __init__(
        self,
        lake: Lake,
        settings: Settings,
        subscription: Subscription,
        lookup: SubscriptionLookup,
        on_exit: Callable[[Dispatcher], None],
        dead_letter: DeadLetterSink,
        peered: Callable[[], bool] = lambda: False,
        lease_slots: LeaseSlots = PROCESS_LEASE_SLOTS,
    ) -> None:
        self.subscription = subscription
        self._peered = peered
        self._lake = lake
        self._settings = settings
        self._lookup = lookup
        self._on_exit = on_exit
        self._claimer = Claimer(dead_letter)
        self._slots = lease_slots
        # The slot taken for the deferred changes pending since the first time.
        self._lease_slot: tuple[float, float] | None = None
        self._contended_until = 0.0
        self._backlog_due = 0.0
        self._cond = threading.Condition()
        self._pulls: list[PullRequest] = []
        self._acks: list[AckRequest] = []
        self._truncates: list[TruncateRequest | SeekRequest | FlushRequest] = []
        self._nudged = True
        # The last cycle found less than its pulls asked for, and nothing was said
        # to have changed since: a new pull waits for a nudge, the next check
        # (Settings.change_check_s) or the earliest lease due, without a cycle
        # that would read both tables for nothing (two GETs on S3).
        self._dry = False
        self._poll_at = 0.0  # time.monotonic() of the next unprompted cycle for waiting pulls
        # Whether the next cycle asks storage for commits nobody told of (the next
        # commit file of both tables: a GET each on S3), and when it next must;
        # between looks it reads only what it was told of (``nudge``).
        self._look = True
        self._next_look = 0.0
        self._committed = False  # the last cycle committed (the flush window applies)
        self._told_version = -1  # the messages table's newest version committed here
        self._stopped = False
        self._leases: LeaseTable | None = None
        self._messages: MessagesTable | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"deliver-{subscription.uid[:8]}", daemon=True
        )
        self._thread.start()

    # -- entry points --------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        with self._cond:
            if self._stopped:
                raise errors.Unavailable("subscription dispatcher stopped; retry")
            if isinstance(request, PullRequest):
                self._pulls.append(request)
                if self._dry and not self._nudged and request.wait_until > time.monotonic():
                    request.planned = True  # it waits (and may expire) like a planned pull
                    self._cond.notify()
                    return
            elif isinstance(request, AckRequest):
                self._acks.append(request)
                # An ack frees nothing to deliver, except the next message of an
                # ordering key; a nack, deadline change or release may.
                if request.deadline_s is not None or self.subscription.enable_message_ordering:
                    self._dry = False
            else:
                self._truncates.append(request)
                self._dry = False
            self._nudged = True
            self._cond.notify()

    def nudge(self, version: int = -1) -> None:
        """A local publish committed the messages table's ``version`` (-1: some version
        not known, so the next cycle looks)."""
        with self._cond:
            self._nudged = True
            self._dry = False
            if version < 0:
                self._look = True
            self._told_version = max(self._told_version, version)
            self._cond.notify()

    def stop(self, reason: errors.LakePubSubError | None = None) -> None:
        with self._cond:
            self._stopped = True
            pending: list[Request] = [
                *self._pulls,
                *self._acks,
                *self._truncates,
            ]
            self._pulls, self._acks, self._truncates = [], [], []
            self._cond.notify()
        for request in pending:
            if reason is not None:
                _fail(request.future, reason)
            elif isinstance(request, PullRequest):
                _settle(request.future, [])
            else:
                _fail(request.future, errors.Unavailable("the service is shutting down; retry"))

    @property
    def alive(self) -> bool:
        return not self._stopped

    def join(self, timeout_s: float) -> None:
        """Wait for the loop to end after ``stop`` (its cycle in progress commits first)."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        last_work = time.monotonic()
        try:
            while True:
                with self._cond:
                    while not self._stopped:
                        now = time.monotonic()
                        if self._acks or self._truncates:
                            break
                        if self._pulls and (self._nudged or now >= self._poll_at):
                            break
                        flush_at = self._flush_at()
                        if now >= flush_at:  # deferred lease changes are due
                            break
                        if not self._pulls and now - last_work > self._settings.worker_idle_exit_s:
                            self._stopped = True
                            break
                        timeout = self._poll_at - now if self._pulls else 1.0
                        earliest = min((p.wait_until for p in self._pulls), default=None)
                        if earliest is not None:
                            timeout = min(timeout, earliest - now)
                        timeout = min(timeout, flush_at - now)
                        waiting = bool(self._pulls)
                        self._cond.wait(timeout=max(0.001, timeout))
                        if waiting:  # a pull waiting without cycles is not idleness
                            last_work = time.monotonic()
                        self._expire_waiting_pulls(time.monotonic())
                    if self._stopped:
                        return
                    acks, self._acks = self._acks, []
                    truncates, self._truncates = self._truncates, []
                    # A pull its caller withdrew (future cancelled) leases nothing.
                    self._pulls = [p for p in self._pulls if not p.future.cancelled()]
                    pulls = list(self._pulls)
                    if self.subscription.enable_message_ordering and len(pulls) > 1:
                        # One pull a cycle, the longest waiting: a cycle may lease
                        # several messages of a key, and they must all go to one
                        # receiver, in order. The others are served next cycle.
                        pulls = pulls[:1]
                    for pull in pulls:
                        pull.planned = True
                    self._nudged = len(pulls) < len(self._pulls)
                started = time.monotonic()
                self._committed = False
                self._cycle(acks, truncates, pulls)
                if len(pulls) == 1:
                    self._rotate(pulls[0])
                last_work = time.monotonic()
                self._schedule_poll(last_work)
                if last_work < self._contended_until:
                    self._pace(min(PACE_MAX_S, PACE_FACTOR * (last_work - started)))
                if self._committed:  # the flush window: what queues meanwhile joins the next
                    self._pace(started + self._settings.flush_s() - time.monotonic())
        except Exception:  # a bug: fail what is queued rather than hang it
            log.exception("dispatcher for %s crashed", self.subscription.name)
            self.stop(errors.Internal("delivery dispatcher failed"))
        finally:
            self._flush_deferred()
            self._on_exit(self)

    def _schedule_poll(self, now: float) -> None:
        """When waiting pulls next look at the tables unprompted. A dry subscription
        waits for the next check or its earliest lease due, whichever is first;
        anything else looks again after ``pull_poll_interval_s``."""
        soon = now + self._settings.pull_poll_interval_s
        with self._cond:
            if not self._dry:
                self._poll_at = soon
                return
        state = self._leases.cached if self._leases is not None else None
        due = math.inf
        if state is not None:
            wait_us = state.earliest_due_us() - self._settings.clock_us()
            due = now + max(0, wait_us) / US_PER_S
        with self._cond:
            self._poll_at = max(soon, min(now + self._settings.change_check(self._peered()), due))

    def _rotate(self, pull: PullRequest) -> None:
        """A pull planned alone and still waiting goes behind the others."""
        with self._cond:
            if len(self._pulls) > 1 and pull in self._pulls:
                self._pulls.remove(pull)
                self._pulls.append(pull)

    def _contended(self) -> None:
        self._contended_until = time.monotonic() + CONTENTION_MEMORY_S
        self._look = True  # another writer committed: the retry reads what it did

    def _pace(self, seconds: float) -> None:
        """Let other processes' dispatchers commit; requests queue and batch meanwhile."""
        until = time.monotonic() + seconds
        with self._cond:
            while not self._stopped and (remaining := until - time.monotonic()) > 0:
                self._cond.wait(timeout=remaining)

    def _expire_waiting_pulls(self, now: float) -> None:
        expired = [p for p in self._pulls if p.planned and p.wait_until <= now]
        if expired:
            self._pulls = [p for p in self._pulls if p not in expired]
            for pull in expired:
                _settle(pull.future, [])

    def _cycle(
        self,
        acks: list[AckRequest],
        truncates: list[TruncateRequest | SeekRequest | FlushRequest],
        pulls: list[PullRequest],
    ) -> None:
        current = self._lookup()
        if current is None or current.uid != self.subscription.uid:
            self.stop(errors.NotFound(f"Subscription does not exist: {self.subscription.name}"))
            return
        self.subscription = current
        try:
            outcome = optimistic(
                lambda: self._attempt(acks, truncates, pulls),
                table="leases",
                attempts=self._settings.commit_attempts,
                on_conflict=self._contended,
            )
        except errors.LakePubSubError as exc:
            for request in acks:
                _fail(request.future, exc)
            for truncate in truncates:
                _fail(truncate.future, exc)
            with self._cond:
                failed = [p for p in pulls if p in self._pulls]
                self._pulls = [p for p in self._pulls if p not in failed]
            for pull in failed:
                _fail(pull.future, exc)
            return
        ack_results, events, deliveries = outcome
        for request, failures in zip(acks, ack_results, strict=True):
            _settle(request.future, failures)
        for truncate, event in zip(truncates, events, strict=True):
            _settle(cast("Future[Any]", truncate.future), event)
        self._claimer.committed()
        self._hand_out(deliveries, sum(p.max_messages for p in pulls))

    def _hand_out(self, deliveries: list[ReceivedMessage], demand: int) -> None:
        """Each waiting pull takes its share, in order. The share of a pull withdrawn
        meanwhile (its future cancelled) is released, not given to another pull: it
        was leased for that pull's deadline."""
        now = time.monotonic()
        unseen: list[ReceivedMessage] = []
        answers: list[tuple[PullRequest, list[ReceivedMessage]]] = []
        with self._cond:
            if demand:  # a nudge during the cycle has cleared _nudged's reason to trust this
                self._dry = len(deliveries) < demand and not self._nudged
            served = []
            for pull in self._pulls:
                take, deliveries = deliveries[: pull.max_messages], deliveries[pull.max_messages :]
                if not (take or (pull.planned and pull.wait_until <= now)):
                    continue
                served.append(pull)
                # Once running, the future can no longer be cancelled: a caller that
                # withdraws it later releases what it got (Engine.withdraw).
                if pull.future.set_running_or_notify_cancel():
                    answers.append((pull, take))
                else:
                    unseen += take
            self._pulls = [p for p in self._pulls if p not in served]
            unseen += deliveries  # a pull that left between planning and now
            if unseen:
                ack_ids = [AckId.parse(r.ack_id) for r in unseen]
                self._acks.append(AckRequest(ack_ids, RELEASE))
                self._cond.notify()
        for pull, take in answers:  # outside the lock: callbacks run here
            pull.future.set_result(take)
        metrics.DELIVERED.inc(sum(len(take) for _, take in answers))
        metrics.RELEASED.inc(len(unseen))

    # -- one optimistic attempt ------------------------------------------------------------

    def _load(self) -> tuple[LeaseTable, MessagesTable, LeaseState]:
        if self._leases is None:
            self._leases = LeaseTable(self._lake, self.subscription.uid)
        if self._messages is None:
            self._messages = MessagesTable(self._lake, self.subscription.topic_uid)
        now = time.monotonic()
        with self._cond:
            look = self._look or now >= self._next_look
            self._look = False
            told = self._told_version
        state = self._leases.state(look=look)
        if look:
            self._messages.refresh()
            self._next_look = now + self._settings.change_check(self._peered())
        elif told > self._messages.version:  # its commit file is in memory: no request
            self._messages.refresh(until=told)
        return self._leases, self._messages, state

    def _attempt(
        self,
        acks: list[AckRequest],
        truncates: list[TruncateRequest | SeekRequest | FlushRequest],
        pulls: list[PullRequest],
    ) -> tuple[list[dict[str, str]], list[TruncationEvent | None], list[ReceivedMessage]]:
        demand = sum(p.max_messages for p in pulls)
        table, messages, state = self._load()
        sub = self.subscription
        policy = policy_of(sub)
        deadlines = {p.ack_deadline_s for p in pulls}
        uniform = len(deadlines) == 1
        if uniform and (deadline := deadlines.pop()) is not None:
            # every pull's own lease (a stream's), with the slack for receipt modacks
            policy = replace(policy, ack_deadline_s=deadline, lease_slack_us=LEASE_SLACK_US)
        planner = Planner(state, policy, self._settings.clock_us())
        self._claimer.moved = False
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
        claims = self._claimer.claim(sub, planner, messages, demand) if demand else []
        if not uniform:
            apply_pull_deadlines(planner, [c for c, _ in claims], pulls)
        if planner.dirty or table.pending:
            if self._must_commit(table, truncates):
                table.commit(planner)
                self._committed = True
            elif planner.dirty:
                table.defer(planner)
        self._observe(planner, messages, ack_results, acks)
        deliveries = [received(claim, message) for claim, message in claims]
        return ack_results, events, deliveries

    def _must_commit(
        self, table: LeaseTable, truncates: list[TruncateRequest | SeekRequest | FlushRequest]
    ) -> bool:
        """Whether this cycle commits, or leaves its changes in memory for a later one:
        an exactly-once subscription confirms nothing before it is stored, nor do
        truncations, seeks and dead-lettering wait; the others wait up to the lease
        flush window."""
        flush_s = self._settings.lease_flush_s(self._peered())
        if (
            flush_s <= 0
            or self._stopped
            or truncates
            or self._claimer.moved
            or self.subscription.enable_exactly_once_delivery
            or table.pending >= MAX_DEFERRED_LEASE_CHANGES
        ):
            return True
        return time.monotonic() >= self._flush_at()

    def _flush_at(self) -> float:
        """When deferred lease changes are committed (time.monotonic()): once they
        are a lease flush window old, at the process's next free slot (LeaseSlots)."""
        since = self._leases.pending_since if self._leases is not None else None
        if since is None:
            self._lease_slot = None
            return math.inf
        if self._lease_slot is not None and self._lease_slot[0] == since:
            return self._lease_slot[1]
        due = since + self._settings.lease_flush_s(self._peered())
        spacing_s = self._settings.lease_commit_spacing_s(self._peered())
        if spacing_s <= 0 or time.monotonic() < due:
            return due
        self._lease_slot = (since, self._slots.reserve(spacing_s))
        return self._lease_slot[1]

    def _flush_deferred(self) -> None:
        """Commit what waits in memory before the dispatcher goes (a clean stop)."""
        if self._leases is None or not self._leases.pending:
            return
        try:
            optimistic(
                lambda: self._attempt([], [], []),
                table="leases",
                attempts=self._settings.commit_attempts,
            )
        except Exception:  # a crash would lose them too: they are redelivered
            log.warning("deferred lease changes of %s not written", self.subscription.name)

    def _observe(
        self,
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
            metrics.BACKLOG.labels(self.subscription.name.path).set(backlog)


T = TypeVar("T")


def _settle(future: Future[T], value: T) -> None:
    # A caller that withdrew (cancelled its future) misses the result; deliveries
    # go out only through ``_hand_out``, which releases what a withdrawn pull had.
    with contextlib.suppress(InvalidStateError):
        future.set_result(value)


def _fail(future: Future[Any], exc: BaseException) -> None:
    with contextlib.suppress(InvalidStateError):
        future.set_exception(exc)
