"""The delivery dispatcher: one thread per active subscription per process.

Pulls, acks, deadline changes and truncations queue here as small requests;
each cycle the dispatcher takes everything queued, applies it to the lease
state with a ``Planner`` and commits the result as ONE MERGE on the
subscription's lease table, with a strict compare-and-swap on the table
version (one attempt: ``lakepubsub/delivery/cycle.py``). A lost race
(another process, a job) rereads the state and replans. Nothing is answered
before its commit has landed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

from lakepubsub import errors, metrics
from lakepubsub.constants import CONTENTION_MEMORY_S, PACE_FACTOR, PACE_MAX_S
from lakepubsub.delivery.ackids import AckId
from lakepubsub.delivery.context import DeliveryContext
from lakepubsub.delivery.cycle import CycleTables
from lakepubsub.delivery.lease_slots import PROCESS_LEASE_SLOTS, LeaseSlots
from lakepubsub.delivery.leases import RELEASE
from lakepubsub.delivery.requests import (
    AckRequest,
    FlushRequest,
    PullRequest,
    Request,
    SeekRequest,
    TruncateRequest,
)
from lakepubsub.messages import Received, ReceivedMessage
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.retry import optimistic

log = logging.getLogger(__name__)
SubscriptionLookup = Callable[[], Subscription | None]


class Dispatcher:
    """Serves one subscription in this process. Thread-safe entry points."""

    def __init__(
        self,
        context: DeliveryContext,
        subscription: Subscription,
        lookup: SubscriptionLookup,
        on_exit: Callable[[Dispatcher], None],
        lease_slots: LeaseSlots = PROCESS_LEASE_SLOTS,
    ) -> None:
        self.subscription = subscription
        self._context = context
        self._settings = context.settings
        self._lookup = lookup
        self._on_exit = on_exit
        self._tables = CycleTables(context, lambda: self._stopped, lease_slots)
        self._contended_until = 0.0
        self._cond = threading.Condition()
        self._pulls: list[PullRequest] = []
        self._acks: list[AckRequest] = []
        self._truncates: list[TruncateRequest | SeekRequest | FlushRequest] = []
        # The cycle under way applies deadline changes (``_answered``).
        self._changing = False
        self._nudged = True
        # The last cycle found less than its pulls asked for, and nothing was said
        # to have changed since: a new pull waits for a nudge, the next check
        # (Settings.change_check_s) or the earliest lease due, without a cycle
        # that would read both tables for nothing (two GETs on S3).
        self._dry = False
        self._poll_at = 0.0  # time.monotonic() of the next unprompted cycle for waiting pulls
        self._stopped = False
        self._thread = threading.Thread(
            target=self._run, name=f"deliver-{subscription.uid[:8]}", daemon=True
        )
        self._thread.start()

    # -- entry points --------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        if isinstance(request, AckRequest) and self._answered(request):
            return
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

    def _answered(self, request: AckRequest) -> bool:
        """Answer a deadline change at once, without a cycle, if it would leave every
        lease it names as it is (``CycleTables.leaves_leases``) and no deadline
        change is queued or being applied before it, nor did another writer win a
        race lately. Whether it was answered."""
        if request.deadline_s is None:
            return False
        with self._cond:
            if (
                self._stopped
                or self._changing
                or time.monotonic() < self._contended_until
                or any(r.deadline_s is not None for r in self._acks)
                or not self._tables.leaves_leases(
                    self.subscription, request.ack_ids, request.deadline_s
                )
            ):
                return False
        metrics.DEADLINE_CHANGES_UNCHANGED.inc(len(request.ack_ids))
        request.future.set_result({})
        return True

    def nudge(self, version: int = -1) -> None:
        """A local publish committed the messages table's ``version`` (-1: some version
        not known, so the next cycle looks)."""
        with self._cond:
            self._nudged = True
            self._dry = False
            self._tables.told(version)
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
                errors.fail(request.future, reason)
            elif isinstance(request, PullRequest):
                errors.settle(request.future, [])
            else:
                stopping = errors.Unavailable("the service is shutting down; retry")
                errors.fail(request.future, stopping)

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
                        flush_at = self._tables.flush_at()
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
                    self._changing = any(a.deadline_s is not None for a in acks)
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
                self._tables.committed = False
                self._cycle(acks, truncates, pulls)
                with self._cond:
                    self._changing = False
                if len(pulls) == 1:
                    self._rotate(pulls[0])
                last_work = time.monotonic()
                self._schedule_poll(last_work)
                if last_work < self._contended_until:
                    self._pace(min(PACE_MAX_S, PACE_FACTOR * (last_work - started)))
                if self._tables.committed:  # the flush window: what queues meanwhile joins the next
                    self._pace(started + self._settings.flush_s() - time.monotonic())
        except Exception:  # a bug: fail what is queued rather than hang it
            log.exception("dispatcher for %s crashed", self.subscription.name)
            self.stop(errors.Internal("delivery dispatcher failed"))
        finally:
            self._tables.flush(self.subscription)
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
        due = self._tables.earliest_due(now)
        with self._cond:
            self._poll_at = max(
                soon, min(now + self._settings.change_check(self._context.peered()), due)
            )

    def _rotate(self, pull: PullRequest) -> None:
        """A pull planned alone and still waiting goes behind the others."""
        with self._cond:
            if len(self._pulls) > 1 and pull in self._pulls:
                self._pulls.remove(pull)
                self._pulls.append(pull)

    def _contended(self) -> None:
        self._contended_until = time.monotonic() + CONTENTION_MEMORY_S
        self._tables.look_again()  # another writer committed: the retry reads what it did

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
                errors.settle(pull.future, [])

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
                lambda: self._tables.attempt(self.subscription, acks, truncates, pulls),
                table="leases",
                attempts=self._settings.commit_attempts,
                on_conflict=self._contended,
            )
        except errors.LakePubSubError as exc:
            for request in acks:
                errors.fail(request.future, exc)
            for truncate in truncates:
                errors.fail(truncate.future, exc)
            with self._cond:
                failed = [p for p in pulls if p in self._pulls]
                self._pulls = [p for p in self._pulls if p not in failed]
            for pull in failed:
                errors.fail(pull.future, exc)
            return
        ack_results, events, deliveries = outcome
        for request, failures in zip(acks, ack_results, strict=True):
            errors.settle(request.future, failures)
        for truncate, event in zip(truncates, events, strict=True):
            errors.settle(cast("Future[Any]", truncate.future), event)
        self._tables.claimer.committed()
        self._hand_out(deliveries, sum(p.max_messages for p in pulls))

    def _hand_out(self, deliveries: Received, demand: int) -> None:
        """Each waiting pull takes its share, in order. The share of a pull withdrawn
        meanwhile (its future cancelled) is released, not given to another pull: it
        was leased for that pull's deadline."""
        now = time.monotonic()
        unseen: list[ReceivedMessage] = []
        answers: list[tuple[PullRequest, Received]] = []
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
            metrics.PULL_ANSWER_MESSAGES.observe(len(take))
        metrics.DELIVERED.inc(sum(len(take) for _, take in answers))
        metrics.RELEASED.inc(len(unseen))
