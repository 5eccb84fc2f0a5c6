"""Moving a topic's intake rows to its messages table, and removing the intake files
whose rows all moved.

A topic's rows move, offsets unchanged, once they are ``INTAKE_MOVE_BYTES`` or the
oldest is ``Settings.move_after_s()`` old, in one commit by the topic's owner. A
file leaves the intake ``INTAKE_REMOVE_GRACE_S`` after all its rows moved.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from deltalake.exceptions import CommitFailedError

from lakepubsub import constants, errors, metrics, retry
from lakepubsub._lake import Lake
from lakepubsub.publish.intake_heads import Heads
from lakepubsub.publish.intake_view import IntakeView, Slice
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.settings import Settings

log = logging.getLogger(__name__)

# How often the committer looks for intake files to remove.
REMOVAL_PASS_S = 60.0
# How often another process's view of a topic's table is reread for a removal.
OTHERS_REREAD_S = 600.0


@dataclass
class Transactions:
    """A process's Delta application id and the versions of its transactions (one
    sequence for its commits to the intake and to the topics' tables)."""

    app_id: str
    _versions: itertools.count[int] = field(
        default_factory=lambda: itertools.count(1), init=False, repr=False
    )

    def next(self) -> int:
        return next(self._versions)


@dataclass(frozen=True)
class Hooks:
    """What the intake asks of its process about topics (see ``Intake``)."""

    owns: Callable[[str], bool]
    alive: Callable[[str], bool]
    on_moved: Callable[[str, int], None]
    peered: Callable[[], bool]
    # False: a process that only reads the intake (it moves nothing on its own,
    # but ``move`` moves when asked, as a job's ``move_all``).
    moves: bool


@dataclass(eq=False)
class Mover:
    """The intake's moves and removals, and its handles on the topics' tables, under
    a lock of its own; its ``heads`` are what the committer numbers from. ``housekeep``
    takes the intake's log lock for what touches the intake's log (looks,
    removals), before its own."""

    lake: Lake
    settings: Settings
    view: IntakeView
    hooks: Hooks
    txns: Transactions
    # Topics' tables (moves, heads) and when each was last read; when each file's
    # last rows moved; when the next removal pass and look at others' commits are due.
    _tables: dict[str, tuple[MessagesTable, float]] = field(default_factory=dict, init=False)
    _moved_at: dict[str, float] = field(default_factory=dict, init=False)
    _removal_at: float = field(default=0.0, init=False)
    _look_at: float = field(default=0.0, init=False)
    # Called when a head read lands (the committer waits for it).
    wake: Callable[[], None] = field(default=lambda: None)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False)

    def __post_init__(self) -> None:
        # Each topic's table head as last read, for numbering (read off the
        # committer's thread; a move notes the head it leaves).
        self.heads = Heads(self.read_head, self.wake)

    def table(self, topic_uid: str, *, max_age_s: float) -> MessagesTable:
        """The topic's table, reread when this handle is older than ``max_age_s``."""
        with self._lock:
            now = time.monotonic()
            held = self._tables.get(topic_uid)
            if held is None:
                table = MessagesTable(self.lake, topic_uid, overlay=False)
            else:
                table, read_at = held
                if now - read_at <= max_age_s:
                    return table
                table.refresh()
            self._keep(topic_uid, table)
            return table

    def created(self, table: MessagesTable) -> None:
        """A topic's table just made here: held as read now, so that its first
        reread for numbering is a look at its next commit, not an open."""
        with self._lock:
            self._keep(table.topic_uid, table)

    def _keep(self, topic_uid: str, table: MessagesTable) -> None:
        """Remember the topic's table as read now, and its head for numbering."""
        now = time.monotonic()
        self._tables[topic_uid] = (table, now)
        self.heads.note(topic_uid, table.head(), now)

    def read_head(self, topic_uid: str) -> int:
        """Read the topic's table head from storage (on a loader thread of ``heads``):
        a table held here is reread under the lock; one not held yet is opened
        outside it, so that the first reads of many topics run at once."""
        with self._lock:
            if topic_uid in self._tables:
                return self.table(topic_uid, max_age_s=0.0).head()
        table = MessagesTable(self.lake, topic_uid, overlay=False)
        with self._lock:
            if topic_uid not in self._tables:
                self._keep(topic_uid, table)
        return table.head()

    def housekeep(self, log_lock: threading.Lock) -> None:
        """Learn of other processes' commits when due, move the topics due (those this
        process owns), and remove moved files when a removal pass is due."""
        now = time.monotonic()
        if now >= self._look_at:  # other processes' commits (a takeover, a stray writer)
            self._look_at = now + self.settings.change_check(self.hooks.peered())
            with log_lock:
                self.view.tail()
        move_after_s = self.settings.move_after_s()
        with self._lock:
            due = [
                topic_uid
                for topic_uid, slices in self.view.slices().items()
                if self._due(topic_uid, slices, now, move_after_s)
            ]
        for topic_uid in due:
            if self._moves_itself(topic_uid):
                self.move(topic_uid)
        if self.hooks.moves and now >= self._removal_at:
            self._removal_at = now + REMOVAL_PASS_S
            with log_lock:
                self.remove_moved(now)

    def unmoved(self) -> list[str]:
        """Topics (still alive) whose table, read afresh, lacks some of the offsets the
        intake holds for them."""
        left = []
        with self._lock:
            for topic_uid, hi in self.view.highs().items():
                if not self.hooks.alive(topic_uid):
                    continue
                try:
                    table = self.table(topic_uid, max_age_s=0.0)
                except errors.NotFound:
                    continue
                if table.head() < hi:
                    left.append(topic_uid)
        return left

    def _due(self, topic_uid: str, slices: list[Slice], now: float, move_after_s: float) -> bool:
        held = self._tables.get(topic_uid)
        moved = held[0].head() if held is not None else 0
        waiting = [s for s in slices if s.hi > moved]
        if not waiting:
            return False
        size = sum(s.nbytes for s in waiting)
        return now - waiting[0].seen_at >= move_after_s or size >= constants.INTAKE_MOVE_BYTES

    def move(self, topic_uid: str) -> None:
        """Append the topic's intake rows past its table's head to the table."""
        with self._lock:
            self._move(topic_uid)

    def _move(self, topic_uid: str) -> None:
        if not self.hooks.alive(topic_uid):
            self._tables.pop(topic_uid, None)
            self.heads.forget(topic_uid)
            return
        try:
            table = self.table(topic_uid, max_age_s=0.0)
        except errors.NotFound:  # deleted meanwhile: its rows leave with their files
            return
        budget = retry.Budget(self.settings.commit_attempts, constants.COMMIT_BUDGET_S)
        while True:
            head = table.head()
            rows = self.view.read(topic_uid, head, self.view.next_offset(topic_uid))
            if rows.num_rows == 0:
                return
            if rows["offset"][0].as_py() != head:  # never expected: offsets are dense
                log.error("intake rows of topic %s do not start at its head %d", topic_uid, head)
                return
            try:
                version = table.append(rows, app_id=self.txns.app_id, txn_version=self.txns.next())
            except CommitFailedError:
                metrics.COMMIT_CONFLICTS.labels("messages").inc()
                if not budget.another():
                    return  # the next pass tries again
                table.refresh()
                continue
            self._keep(topic_uid, table)
            break
        now = time.monotonic()
        for path in self.view.release(topic_uid, table.head()):
            self._moved_at[path] = now
        self.hooks.on_moved(topic_uid, version)

    def remove_moved(self, now: float) -> None:
        """Remove intake files whose rows all moved at least the grace ago."""
        log_ = self.view.log
        doomed = []
        for path, slices in self.view.files().items():
            moved_at = self._moved_at.get(path)
            if moved_at is not None and now - moved_at < constants.INTAKE_REMOVE_GRACE_S:
                continue
            if all(self._moved(uid, s.hi) for uid, s in slices.items()):
                if moved_at is None:  # moved by another process: count the grace from now
                    self._moved_at[path] = now
                    continue
                doomed.append(path)
        if not doomed:
            return
        try:
            log_.commit_rebasing(
                [log_.remove(p) for p in doomed if p in log_.files],
                operation="DELETE",
                parameters={"predicate": "moved to the topics' tables"},
            )
        except CommitFailedError:  # another process removed some: look again next pass
            self.view.tail()
            return
        for path in doomed:
            self._moved_at.pop(path, None)
        self.view.index_files()

    def _moved(self, topic_uid: str, hi: int) -> bool:
        """Whether the topic's table holds every offset below ``hi`` (or the topic is gone).
        A topic this process moves is judged by its own view (its moves keep it
        current; a job's move is found by the next due move); another's view is
        reread at most every OTHERS_REREAD_S (a GET each on S3)."""
        if not self.hooks.alive(topic_uid):
            return True
        max_age_s = float("inf") if self._moves_itself(topic_uid) else OTHERS_REREAD_S
        try:
            table = self.table(topic_uid, max_age_s=max_age_s)
        except errors.NotFound:
            return True
        return table.head() >= hi

    def _moves_itself(self, topic_uid: str) -> bool:
        """Whether this process moves the topic's rows on its own (its owner)."""
        return self.hooks.moves and self.hooks.owns(topic_uid)
