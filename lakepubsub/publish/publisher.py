"""Group commit: every publish request in flight for a topic joins the next Delta commit.

One committer thread per topic per process. Callers build their part of the
Arrow batch in their own thread; the committer concatenates what has queued,
numbers it from the topic head, and appends it with a strict compare-and-swap.
A lost race refreshes the head and renumbers; nothing is reordered within a
request and no request is split across commits.

With the intake (on S3), a request to a topic this process commits goes from
the caller straight to the intake's committer (``submit``); the topic's thread
runs only for groups handed to another process that owns the topic, and for
requests that arrive while it holds some.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
from deltalake.exceptions import CommitFailedError

from lakepubsub import constants, errors, metrics, retry
from lakepubsub._lake import Lake
from lakepubsub.peering.transport import Unreachable
from lakepubsub.publish.batches import Batch, combined
from lakepubsub.publish.committer import Committer
from lakepubsub.publish.intake import Intake
from lakepubsub.publish.messages_table import MessagesTable, numbered
from lakepubsub.settings import Settings

log = logging.getLogger(__name__)

# Upper bounds on one group commit; a single request (<= 10 MB) always fits.
MAX_ROWS_PER_COMMIT = 50_000
MAX_BYTES_PER_COMMIT = 64 * 1024 * 1024

# Called after a commit with its rows and the table version it made (-1: unknown,
# a commit that landed though its answer was lost; 0 and no rows: an intake commit,
# the topic's table did not move).
OnCommit = Callable[[pa.Table | None, int], None]
# Hands a group to the topic's owner (``lakepubsub/peering/``): a future of the first
# offset it got (``Unreachable`` if the owner could not be asked), or None when this
# process is the owner.
Forward = Callable[[pa.Table], "Future[int] | None"]
# Groups handed to the owner and not answered yet. Measured with 2 processes on
# one topic (bench/scaleout_bench.py, 8 clients): 1 in flight 0.95x one process
# (its clients 33 % of the messages), 2 in flight 0.82x (39 %), 4 in flight 0.72x
# (41 %): each call costs about a millisecond of CPU in grpcio, so fewer, fatter
# calls carry more.
MAX_HANDED_OVER = 1
# ... unless the owner's answers are slow (commits on S3 take tens of ms): then
# the wait, not the CPU, is the limit, and more groups in flight shorten it
# (moto S3, 2 processes: 0.76x one process with 33 % / 67 % of the messages ->
# 0.95x with 49 % / 51 %; local: 0.89x 33/67 -> 0.92x 41/59).
SLOW_ANSWER_S = 0.010
MAX_HANDED_OVER_SLOW = 4


@dataclass
class _Request:
    batch: Batch
    future: Future[list[str]]
    forwarded: bool = False  # sent by another process: commit here, never pass on
    here: bool = False  # the owner could not be reached: commit here


class TopicPublisher(Committer[_Request]):
    """Appends publish requests for one topic, many per commit."""

    def __init__(
        self,
        lake: Lake,
        topic_uid: str,
        settings: Settings,
        on_commit: OnCommit | None = None,
        forward: Forward | None = None,
        intake: Intake | None = None,
        here: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__()
        self.topic_uid = topic_uid
        self._intake = intake
        self._forward = forward
        self._here = here  # whether this process commits the topic (owns it)
        self._lake = lake
        self._settings = settings
        self._on_commit = on_commit
        self._app_id = f"lakepubsub-publisher-{uuid.uuid4()}"
        self._txn = 0
        self._handed_over = 0
        self._answer_s = 0.0  # moving average of the owner's answer time
        self._table: MessagesTable | None = None
        self._committing_here = self._forward is None  # the last group was committed here
        self._busy = False  # the thread is committing or handing over a group

    def submit(self, batch: Batch, *, forwarded: bool = False) -> Future[list[str]]:
        """Queue a checked batch; the future resolves to its message ids once committed.
        A ``forwarded`` batch (another process's group) is committed by this process."""
        request = _Request(batch, Future(), forwarded)
        if self._intake is not None and self._straight(forwarded):
            # Straight to the intake, which commits every topic's batches together
            # (``intake_body``): no hand-off to this topic's thread, no columns built
            # per request.
            pending = self._intake.append(self.topic_uid, batch)
            pending.add_done_callback(lambda done: self._intake_answered([request], done))
            return request.future
        with self._cond:
            self._enqueue(request)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"publish-{self.topic_uid[:8]}", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return request.future

    def _straight(self, forwarded: bool) -> bool:
        """Whether a request may go to the intake without this topic's thread: it is
        committed here, and nothing the thread holds could land after it."""
        with self._cond:
            if self._queue or self._handed_over or self._busy or self._closed:
                return False
        return forwarded or self._forward is None or self._here()

    def _run(self) -> None:
        idle_since = time.monotonic()
        # With the intake, its committer keeps the flush window for every topic.
        flush_s = 0.0 if self._intake is not None else self._settings.flush_s()
        while True:
            with self._cond:
                while not self._queue or self._handed_over >= self._in_flight_limit():
                    idle = not self._queue and not self._handed_over
                    if idle and (
                        self._closed
                        or time.monotonic() - idle_since > self._settings.worker_idle_exit_s
                    ):
                        self._thread = None
                        return
                    self._cond.wait(timeout=1.0)
                # Only where the commit is made (groups handed to the owner wait there).
                self._flush_window(flush_s, while_=lambda: self._committing_here)
                group = self._take()
                self._busy = True
            try:
                self._commit(group)
            finally:
                with self._cond:
                    self._busy = False
            idle_since = time.monotonic()

    def _take(self) -> list[_Request]:
        group: list[_Request] = []
        rows = size = 0
        while self._queue:
            nxt = self._queue[0]
            if group and (
                rows + nxt.batch.count > MAX_ROWS_PER_COMMIT
                or size + nxt.batch.size > MAX_BYTES_PER_COMMIT
            ):
                break
            group.append(self._queue.pop(0))
            rows += nxt.batch.count
            size += nxt.batch.size
        return group

    def _commit(self, group: list[_Request]) -> None:
        try:
            columns = combined([r.batch for r in group])
            if self._forward is not None and not any(r.forwarded or r.here for r in group):
                pending = self._forward(columns)
                if pending is not None:
                    with self._cond:
                        self._handed_over += 1
                    sent = time.monotonic()
                    pending.add_done_callback(
                        lambda done: self._owner_answered(group, done, time.monotonic() - sent)
                    )
                    self._committing_here = False
                    return
            self._committing_here = True
            self._committed_at = time.monotonic()
            if self._intake is not None:
                # Handed on at once, not waited for: the next group joins the same
                # intake commit if its window is still open.
                size = sum(r.batch.size for r in group)
                pending = self._intake.append(self.topic_uid, Batch(columns, size))
                pending.add_done_callback(lambda done: self._intake_answered(group, done))
                return
            first = self._append(columns)
        except Exception as exc:  # every caller learns the outcome
            _fail(group, exc)
            return
        self._answer(group, first)

    def _intake_answered(self, group: list[_Request], done: Future[int]) -> None:
        exc = done.exception()
        if exc is not None:
            _fail(group, exc)
            return
        self._after_commit(None, 0)  # the topic's table did not move: read nothing
        self._answer(group, done.result())

    def _in_flight_limit(self) -> int:
        return MAX_HANDED_OVER_SLOW if self._answer_s > SLOW_ANSWER_S else MAX_HANDED_OVER

    def _owner_answered(self, group: list[_Request], done: Future[int], took_s: float) -> None:
        exc = done.exception()
        with self._cond:
            self._handed_over -= 1
            self._answer_s += (took_s - self._answer_s) / 8
            if isinstance(exc, Unreachable):  # commit them here, before anything newer
                for request in group:
                    request.here = True
                self._queue[0:0] = group
            self._cond.notify()
        if isinstance(exc, Unreachable):
            log.info("the owner of topic %s is unreachable; committing here", self.topic_uid)
        elif exc is not None:
            _fail(group, exc)
        else:
            self._answer(group, done.result())

    def _answer(self, group: list[_Request], first: int) -> None:
        offset = first
        ours = 0  # a forwarded group is counted by the process its clients sent it to
        for request in group:
            n = request.batch.count
            errors.settle(request.future, [str(o) for o in range(offset, offset + n)])
            offset += n
            ours += 0 if request.forwarded else n
        metrics.PUBLISHED.inc(ours)

    def _append(self, columns: pa.Table) -> int:
        """Number and commit ``columns``; return the first offset."""
        if self._table is None:
            self._table = MessagesTable(self._lake, self.topic_uid)
        table = self._table
        budget = retry.Budget(self._settings.commit_attempts, constants.COMMIT_BUDGET_S)
        while True:
            started = time.monotonic()
            head = table.head()
            batch = numbered(columns, head)
            self._txn += 1
            try:
                version = table.append(batch, app_id=self._app_id, txn_version=self._txn)
            except CommitFailedError:
                metrics.COMMIT_CONFLICTS.labels("messages").inc()
                if not budget.another():
                    break
                table.refresh()
                time.sleep(retry.contender_backoff_s(time.monotonic() - started))
                continue
            except errors.Unavailable:
                # The commit may have landed before the error: ask the table.
                if table.committed(self._app_id, self._txn):
                    self._after_commit(batch, -1)
                    return head
                raise
            self._after_commit(batch, version)
            return head
        raise errors.Aborted(f"publish gave up after {budget.tries} conflicting commits; retry")

    def _after_commit(self, batch: pa.Table | None, version: int) -> None:
        if self._on_commit is not None:
            self._on_commit(batch, version)


def _fail(group: list[_Request], exc: BaseException) -> None:
    errors.fail_all((r.future for r in group), exc, "publish commit")
