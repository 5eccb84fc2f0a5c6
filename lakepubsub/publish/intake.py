"""The intake: one commit per flush window for every topic a process publishes to.

A Delta commit on S3 is two PUTs or more, so committing each topic on its own
makes the request bill grow with the number of topics (20 topics at 10
messages a second each: one commit per two messages, $5.30 per million in
``bench/results/s3-load.md``). With the intake, a process's publishers hand their
checked batches to one committer, which numbers them and writes all of them,
topic by topic (``intake_body``), into one parquet file of the lake-wide
``intake`` table and commits it as the next version (a strict compare-and-swap,
as a topic's own commit). A publish is answered once that commit landed, as
before; on S3 the commit's log entry
carries the file's bytes and the file is written beside it (``intake_files``),
so the answer waits for one PUT, not two in a row.

A topic's rows stay in the intake until they are ``INTAKE_MOVE_BYTES`` or the oldest
is ``Settings.move_after_s()`` old; then the topic's owner appends them, offsets
unchanged, to the topic's messages table in one commit. Readers of a topic
(``MessagesTable``) read the table below its head and the intake from there. An
intake file leaves the intake ``INTAKE_REMOVE_GRACE_S`` after all its rows moved.

Who may number a topic's messages is decided as before by the commit order, now
the intake's: a committer that loses a version reads the winners' commits (each
add action carries the offset range of every topic in its file as a tag) and
renumbers a topic another process appended to meanwhile. docs/architecture.md
("The intake") has the arithmetic and the alternatives.

This module is the committer; ``intake_view`` keeps what the live files hold (and
reads it), ``intake_ranges`` the offset-range tags, ``intake_moves`` the moves to
the topics' tables and the removal of moved files.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake.exceptions import CommitFailedError

from lakepubsub import constants, errors, metrics, retry
from lakepubsub._lake import Lake
from lakepubsub.publish import intake_ranges
from lakepubsub.publish.batches import Batch
from lakepubsub.publish.committer import Committer
from lakepubsub.publish.intake_body import Body, unfit
from lakepubsub.publish.intake_files import FilePuts
from lakepubsub.publish.intake_moves import Hooks, Mover, Transactions
from lakepubsub.publish.intake_view import IntakeView
from lakepubsub.publish.messages_table import MessagesTable, attach_overlay
from lakepubsub.settings import Settings

log = logging.getLogger(__name__)

MAX_ROWS_PER_COMMIT = 50_000
MAX_BYTES_PER_COMMIT = 64 * 1024 * 1024
# How often the housekeeper looks for moves due and files to remove.
HOUSEKEEPING_S = 1.0
# Longest the committer sleeps while every queued topic's head is being read
# (a landed read wakes it at once).
HEADS_WAIT_S = 1.0


@dataclass
class _Pending:
    topic_uid: str
    batch: Batch
    future: Future[int] = field(default_factory=Future)


class Intake(Committer[_Pending]):
    """A process's committer to the lake's intake table, and its view of it.

    ``owns(topic_uid)``: whether this process moves the topic's rows (its owner);
    ``alive(topic_uid)``: whether the topic still exists; ``on_moved(topic_uid,
    version)``: its messages table got moved rows at ``version``. A process that
    does not publish through the intake (``mover=False``: the CLI, Spark) only
    reads it.
    """

    def __init__(
        self,
        lake: Lake,
        settings: Settings,
        *,
        owns: Callable[[str], bool],
        alive: Callable[[str], bool],
        on_moved: Callable[[str, int], None],
        peered: Callable[[], bool] = lambda: False,
        mover: bool = True,
    ) -> None:
        super().__init__()
        self.uri = lake.intake_uri()
        self._lake = lake
        self._settings = settings
        self._txns = Transactions(f"lakepubsub-intake-{uuid.uuid4()}")
        self.view = IntakeView(lake, self.uri)
        hooks = Hooks(owns, alive, on_moved, peered, moves=mover)
        self.mover = Mover(lake, settings, self.view, hooks, self._txns, wake=self._wake)
        # Held by whoever works the intake's log: the committer (commits), the
        # housekeeper (looks, removals), a reader's look (``refresh``). The topics'
        # tables have the mover's own lock, taken after this one when both are.
        self._work = threading.Lock()
        # Moves and removals run on a thread of their own: a move of 8 MiB is an
        # encode and two PUTs, and on the committer's thread it held up every
        # publish behind it (bench s3, 1,000 msgs/s: the p99 of a publish's wait
        # in the server 115-121 ms with moves, 68-71 without, at Express latency).
        self._housekeeper: threading.Thread | None = None
        self._housekept = threading.Event()
        self._looked_at = -math.inf  # when the last completed look started (``refresh``)
        # On S3, files are written beside their commits (intake_files).
        self._puts = FilePuts() if lake.is_s3 else None

    # -- the publishers' side -------------------------------------------------------------

    def start(self) -> None:
        """Open (or create) the intake table and start the committer."""
        self.view.open()
        with self._cond:
            self._thread = threading.Thread(target=self._run, name="intake", daemon=True)
            self._thread.start()
        self._housekeeper = threading.Thread(
            target=self._housekeep, name="intake-housekeeper", daemon=True
        )
        self._housekeeper.start()
        attach_overlay(self._lake, self)

    def append(self, topic_uid: str, batch: Batch) -> Future[int]:
        """Queue a topic's checked batch for the next commit; the future resolves to
        the first offset its messages got once that commit landed."""
        pending = _Pending(topic_uid, batch)
        with self._cond:
            self._enqueue(pending)
            self._cond.notify_all()
        return pending.future

    def close(self) -> None:
        """Commit what is queued, then stop (rows not moved stay in the intake)."""
        super().close()
        self.mover.heads.close()
        self._housekept.set()
        if self._housekeeper is not None:
            self._housekeeper.join()
        if self._puts is not None:
            self._puts.close()
        attach_overlay(self._lake, None)

    # -- the readers' side (any thread) ------------------------------------------------------

    def next_offset(self, topic_uid: str) -> int:
        """One past the highest offset the intake holds or held for the topic (0: none)."""
        return self.view.next_offset(topic_uid)

    def read(self, topic_uid: str, lo: int, hi: int) -> pa.Table:
        """The topic's intake rows with ``lo <= offset < hi``, sorted by offset."""
        return self.view.read(topic_uid, lo, hi)

    def first_at(self, topic_uid: str, time_us: int, lo: int) -> int | None:
        """The first offset at or above ``lo`` published at or after ``time_us``, if the
        intake holds one."""
        return self.view.first_at(topic_uid, time_us, lo)

    def created(self, table: MessagesTable) -> None:
        """The topic's table was just made here, empty: its first rows number from 0
        with no read of it, and its rereads tail that handle."""
        self.mover.created(table)

    def refresh(self) -> None:
        """Learn of other processes' intake commits now (a reader's look). A look that
        started after this call and ended while it waited is this call's look:
        every dispatcher looks when it starts, and 100 of them on S3 Standard took
        12 s in line, one GET each, holding up the committer between them."""
        asked = time.monotonic()
        with self._work:
            if self._looked_at >= asked:
                return
            started = time.monotonic()
            self.view.tail()
            self._looked_at = started

    def move_all(self) -> None:
        """Move every topic's rows to its table now, whoever owns it (a job, before it
        reads the topics' tables; the owner's later move finds nothing left to do)."""
        with self._work:
            self.view.tail()
        for topic_uid in self.view.slices():
            self.mover.move(topic_uid)

    def held(self) -> tuple[int, int]:
        """How many topics and rows the intake's live files hold (moved or not)."""
        return self.view.held()

    def unmoved(self) -> list[str]:
        """Topics (still alive) whose table, read afresh, lacks some of the offsets the
        intake holds for them."""
        return self.mover.unmoved()

    # -- the committer ------------------------------------------------------------------------

    def _run(self) -> None:
        flush_s = self._settings.flush_s(self.uri)
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                self._flush_window(flush_s, while_=lambda: bool(self._queue))
                group, failed = self._take()
                if not group and not failed and self._queue:
                    # Only topics whose head is being read: ``_wake`` when one lands.
                    self._cond.wait(timeout=HEADS_WAIT_S)
                    continue
                stop = self._closed and not self._queue
            for pending, exc in failed:
                errors.fail(pending.future, exc)
            if group:
                with self._work:
                    self._commit(group)
            if stop:
                return

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _housekeep(self) -> None:
        while not self._housekept.wait(HOUSEKEEPING_S):
            try:
                self.mover.housekeep(self._work)
            except Exception:  # retried on the next pass; publishes go on meanwhile
                log.warning("intake housekeeping failed", exc_info=True)

    def _take(self) -> tuple[list[_Pending], list[tuple[_Pending, Exception]]]:
        """The next commit's requests (holding ``_cond``): those of topics whose head
        is known, in queue order, up to a commit's bounds; and the requests of
        topics whose head could not be read, with the reason. The others stay
        queued, in order: a topic's requests are never taken past one that stays."""
        group: list[_Pending] = []
        failed: list[tuple[_Pending, Exception]] = []
        kept: list[_Pending] = []
        ready: dict[str, bool | Exception] = {}
        rows = size = 0
        for pending in self._queue:
            uid = pending.topic_uid
            state = ready.get(uid)
            if state is None:
                state = ready[uid] = self._head_known(uid)
            if isinstance(state, Exception):
                failed.append((pending, state))
                continue
            n, b = pending.batch.count, pending.batch.size
            over = rows + n > MAX_ROWS_PER_COMMIT or size + b > MAX_BYTES_PER_COMMIT
            if not state or (group and over):
                kept.append(pending)
                ready[uid] = False
                continue
            group.append(pending)
            rows, size = rows + n, size + b
        self._queue = kept
        return group, failed

    def _head_known(self, topic_uid: str) -> bool | Exception:
        try:
            return self.mover.heads.known(topic_uid) is not None
        except Exception as exc:  # the topic's requests fail with it
            return exc

    def _commit(self, group: list[_Pending]) -> None:
        self._committed_at = time.monotonic()
        try:
            group, body = _built(group)
            if body is None:
                return
            firsts, numbered_rows, path = self._append(group, body)
        except Exception as exc:  # every caller learns the outcome
            errors.fail_all((p.future for p in group), exc, "intake commit")
            return
        self.view.hold(path, numbered_rows)
        for pending in group:
            errors.settle(pending.future, firsts[id(pending)])

    def _append(
        self, group: list[_Pending], body: Body
    ) -> tuple[dict[int, int], dict[str, pa.Table], str]:
        """Number and commit the group's rows; the first offset of each pending
        request, each topic's numbered rows, and the file they are in."""
        log_ = self.view.log
        budget = retry.Budget(self._settings.commit_attempts, constants.COMMIT_BUDGET_S)
        while True:
            started = time.monotonic()
            heads = {uid: self._head(uid) for uid in body.spans}
            firsts: dict[int, int] = {}
            next_ = dict(heads)
            for pending in group:
                firsts[id(pending)] = next_[pending.topic_uid]
                next_[pending.topic_uid] += pending.batch.count
            now_us = time.time_ns() // 1000
            rows = body.numbered(heads, now_us)
            by_topic = body.by_topic(rows)
            ranges = {uid: [heads[uid], next_[uid], now_us, now_us] for uid in body.spans}
            txn_version = self._txns.next()
            txn = {"txn": {"appId": self._txns.app_id, "version": txn_version}}
            new = log_.new_file(rows, tags=intake_ranges.encode(ranges), version=log_.version + 1)
            landing = None if self._puts is None else self._puts.start(log_, new)
            if landing is None:
                log_.put_file(new)
            try:
                log_.commit(
                    [new.add, txn],
                    operation="WRITE",
                    parameters={"mode": "Append"},
                    blind_append=True,
                    extra=None if landing is None else new.record(),
                    discard=landing is None,
                )
            except CommitFailedError:
                if self._puts is not None and landing is not None:
                    self._puts.discard(log_, new, landing)
                metrics.COMMIT_CONFLICTS.labels("intake").inc()
                if not budget.another():
                    raise errors.Aborted(
                        f"publish gave up after {budget.tries} conflicting commits; retry"
                    ) from None
                self.view.tail()
                time.sleep(retry.contender_backoff_s(time.monotonic() - started))
                continue
            except errors.Unavailable:
                if not log_.committed(self._txns.app_id, txn_version):
                    raise
                self.view.tail()  # our commit is there: learn its version and file
            metrics.COMMITS.labels("intake").inc()
            metrics.COMMIT_SECONDS.labels("intake").observe(time.monotonic() - started)
            metrics.ROWS_PER_COMMIT.labels("intake").observe(rows.num_rows)
            return firsts, by_topic, new.name

    def _head(self, topic_uid: str) -> int:
        """Where the topic's next rows start: past its table's head (``intake_heads``:
        ``_take`` took only topics it knows; read here if it went stale meanwhile)
        and past every intake row."""
        head = self.mover.heads.known(topic_uid)
        if head is None:
            head = self.mover.read_head(topic_uid)
        return max(head, self.view.next_offset(topic_uid))


def _built(group: list[_Pending]) -> tuple[list[_Pending], Body | None]:
    """The group's rows (``intake_body``), and the requests in them: a request whose
    values do not make Arrow columns fails alone, the others are committed (None:
    none is left)."""
    try:
        return group, Body([(p.topic_uid, p.batch) for p in group])
    except errors.InvalidArgument:
        bad = unfit([p.batch for p in group])
        for at, exc in bad.items():
            errors.fail(group[at].future, exc)
        group = [p for at, p in enumerate(group) if at not in bad]
        return group, Body([(p.topic_uid, p.batch) for p in group]) if group else None
