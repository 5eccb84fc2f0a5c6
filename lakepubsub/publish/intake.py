"""The intake: one commit per flush window for every topic a process publishes to.

A Delta commit on S3 is two PUTs or more, so committing each topic on its own
makes the request bill grow with the number of topics (20 topics at 10
messages a second each: one commit per two messages, $5.30 per million in
``bench/results/s3-load.md``). With the intake, a process's publishers hand their
numbered rows to one committer, which writes all of them, topic by topic, into
one parquet file of the lake-wide ``intake`` table and commits it as the next
version (a strict compare-and-swap, as a topic's own commit). A publish is
answered once that commit landed, as before.

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
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.exceptions import CommitFailedError

from lakepubsub import constants, errors, metrics, retry
from lakepubsub._lake import Lake, TableLog, checkpoints, storage_errors
from lakepubsub._lake import table_schemas as schemas
from lakepubsub.publish.messages_table import MessagesTable, attach_overlay, numbered
from lakepubsub.settings import Settings

log = logging.getLogger(__name__)

# The add action tag holding {topic_uid: [lo, hi, first_us, last_us]} of a file.
RANGES_TAG = "lakepubsub.topics"
MAX_ROWS_PER_COMMIT = 50_000
MAX_BYTES_PER_COMMIT = 64 * 1024 * 1024
# Rows kept in memory for readers (beyond it, they are read back from the file).
MEMORY_BYTES = 128 * 1024 * 1024
# How often the committer looks for moves due and files to remove when idle.
HOUSEKEEPING_S = 1.0
REMOVAL_PASS_S = 60.0
OTHERS_REREAD_S = 600.0
# Files read at once when a load must find their topic ranges from their rows.
LOAD_THREADS = 8


@dataclass
class _Slice:
    """One topic's rows in one intake file: offsets ``[lo, hi)``."""

    path: str
    lo: int
    hi: int
    first_us: int
    last_us: int
    seen_at: float  # time.monotonic() when this process committed or learned of it
    rows: pa.Table | None = None  # held in memory (committed here), MESSAGES schema


@dataclass
class _Pending:
    topic_uid: str
    columns: pa.Table
    future: Future[int] = field(default_factory=Future)


class Intake:
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
        self.uri = lake.intake_uri()
        self._mover = mover
        self._peered = peered
        self._lake = lake
        self._settings = settings
        self._owns = owns
        self._alive = alive
        self._on_moved = on_moved
        self._app_id = f"lakepubsub-intake-{uuid.uuid4()}"
        self._txn = 0
        self._cond = threading.Condition()
        # Held by whoever works the log and the topics' tables: the committer
        # (commits, housekeeping), a reader's look (``refresh``), a job's ``move_all``.
        self._work = threading.Lock()
        self._queue: list[_Pending] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self._log: TableLog | None = None
        self._loaded_tags: dict[str, str] = {}
        self._indexed = 0
        self._generation = -1
        # Guarded by _cond: what readers see.
        self._slices: dict[str, list[_Slice]] = {}
        self._next: dict[str, int] = {}
        self._paths: dict[str, dict[str, _Slice]] = {}  # file -> topic -> slice
        self._memory = 0
        # The committer thread's own: topics' tables (moves, heads) and when each
        # was last read; when each file's last rows moved.
        self._tables: dict[str, tuple[MessagesTable, float]] = {}
        self._moved_at: dict[str, float] = {}
        self._committed_at = 0.0
        self._housekeep_at = 0.0
        self._removal_at = 0.0
        self._look_at = 0.0

    # -- the publishers' side -------------------------------------------------------------

    def start(self) -> None:
        """Open (or create) the intake table and start the committer."""
        self._open()
        with self._cond:
            self._thread = threading.Thread(target=self._run, name="intake", daemon=True)
            self._thread.start()
        attach_overlay(self._lake, self)

    def append(self, topic_uid: str, columns: pa.Table) -> Future[int]:
        """Queue a topic's checked rows for the next commit; the future resolves to
        the first offset they got once that commit landed."""
        pending = _Pending(topic_uid, columns)
        with self._cond:
            if self._closed:
                raise errors.Unavailable("the publisher is shutting down")
            self._queue.append(pending)
            self._cond.notify_all()
        return pending.future

    def close(self) -> None:
        """Commit what is queued, then stop (rows not moved stay in the intake)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        attach_overlay(self._lake, None)

    # -- the readers' side (any thread) ------------------------------------------------------

    def next_offset(self, topic_uid: str) -> int:
        """One past the highest offset the intake holds or held for the topic (0: none)."""
        with self._cond:
            return self._next.get(topic_uid, 0)

    def read(self, topic_uid: str, lo: int, hi: int) -> pa.Table:
        """The topic's intake rows with ``lo <= offset < hi``, sorted by offset."""
        with self._cond:
            found = [
                (s.path, s.rows) for s in self._slices.get(topic_uid, ()) if s.hi > lo and s.lo < hi
            ]
        parts = [
            rows if rows is not None else self._read_file(path, topic_uid) for path, rows in found
        ]
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return schemas.MESSAGES.empty_table()
        rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        offsets = rows["offset"]
        return rows.filter(pc.and_(pc.greater_equal(offsets, lo), pc.less(offsets, hi)))

    def first_at(self, topic_uid: str, time_us: int, lo: int) -> int | None:
        """The first offset at or above ``lo`` published at or after ``time_us``, if the
        intake holds one."""
        with self._cond:
            candidates = [
                (s.lo, s.hi)
                for s in self._slices.get(topic_uid, ())
                if s.hi > lo and s.last_us >= time_us
            ]
        when = pa.scalar(time_us, pa.int64()).cast(schemas.UTC_US)
        for s_lo, s_hi in sorted(candidates):
            rows = self.read(topic_uid, max(lo, s_lo), s_hi)
            rows = rows.filter(pc.greater_equal(rows["publish_time"], when))
            if rows.num_rows:
                return int(pc.min(rows["offset"]).as_py())
        return None

    def refresh(self) -> None:
        """Learn of other processes' intake commits now (a reader's look)."""
        with self._work:
            self._tail()

    def move_all(self) -> None:
        """Move every topic's rows to its table now, whoever owns it (a job, before it
        reads the topics' tables; the owner's later move finds nothing left to do)."""
        with self._work:
            self._tail()
            with self._cond:
                topics = list(self._slices)
            for topic_uid in topics:
                self._move(topic_uid)

    def held(self) -> tuple[int, int]:
        """How many topics and rows the intake's live files hold (moved or not)."""
        with self._cond:
            rows = sum(s.hi - s.lo for slices in self._slices.values() for s in slices)
            return sum(1 for slices in self._slices.values() if slices), rows

    def unmoved(self) -> list[str]:
        """Topics (still alive) whose table, read afresh, lacks some of the offsets the
        intake holds for them."""
        with self._work:
            with self._cond:
                highs = {uid: max(s.hi for s in held) for uid, held in self._slices.items() if held}
            left = []
            for topic_uid, hi in highs.items():
                if not self._alive(topic_uid):
                    continue
                try:
                    table = self._table(topic_uid, max_age_s=0.0)
                except errors.NotFound:
                    continue
                if table.head() < hi:
                    left.append(topic_uid)
            return left

    def _read_file(self, path: str, topic_uid: str) -> pa.Table:
        log_ = self._log
        assert log_ is not None
        with storage_errors(self.uri):
            rows = pq.read_table(log_.open_file(path), use_threads=False)
        rows = rows.filter(pc.equal(rows["topic_uid"], topic_uid))
        return rows.select(schemas.MESSAGES.names).cast(schemas.MESSAGES)

    # -- the committer ------------------------------------------------------------------------

    def _open(self) -> None:
        self._lake.create(
            self.uri,
            schemas.INTAKE,
            configuration=schemas.INTAKE_PROPERTIES,
            description="lakepubsub intake",
        )
        self._log = TableLog(self._lake, self.uri)
        self._loaded_tags = self._tags_of_live_files()
        self._index_files()
        self._loaded_tags = {}

    def _tags_of_live_files(self) -> dict[str, str]:
        """The range tags of the live files, from the last checkpoint and the commits
        after it (delta-rs's snapshot does not return tags); {} where the log holds
        what the replay does not model (then each file's rows are read)."""
        log_ = self._log
        assert log_ is not None
        try:
            with storage_errors(self.uri):
                replay = checkpoints.Replay(self._lake.objects, self.uri)
                replay.advance(log_.version)
        except checkpoints.Unsupported as exc:
            log.info("intake: reading its files for their ranges (%s)", exc)
            return {}
        found: dict[str, str] = {}
        for chunk in replay.state.adds.array().chunks:
            paths = chunk.field("path").to_pylist()
            for path, tags in zip(paths, chunk.field("tags").to_pylist(), strict=True):
                tag = dict(tags or ()).get(RANGES_TAG)
                if tag is not None:
                    found[path] = tag
        return found

    def _run(self) -> None:
        flush_s = self._settings.flush_s(self.uri)
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait(timeout=HOUSEKEEPING_S)
                    if not self._queue:
                        break
                opens = self._committed_at + flush_s
                while self._queue and not self._closed:
                    remaining = opens - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(timeout=remaining)
                group = self._take()
                stop = self._closed and not self._queue
            with self._work:
                if group:
                    self._commit(group)
                if stop:
                    return
                if time.monotonic() < self._housekeep_at:  # not after every commit
                    continue
                self._housekeep_at = time.monotonic() + HOUSEKEEPING_S
                try:
                    self._housekeep()
                except Exception:  # retried on the next pass; publishes go on meanwhile
                    log.warning("intake housekeeping failed", exc_info=True)

    def _take(self) -> list[_Pending]:
        group: list[_Pending] = []
        rows = size = 0
        while self._queue:
            nxt = self._queue[0]
            n, b = nxt.columns.num_rows, nxt.columns.nbytes
            if group and (rows + n > MAX_ROWS_PER_COMMIT or size + b > MAX_BYTES_PER_COMMIT):
                break
            group.append(self._queue.pop(0))
            rows, size = rows + n, size + b
        return group

    def _commit(self, group: list[_Pending]) -> None:
        self._committed_at = time.monotonic()
        try:
            firsts, numbered_rows, path = self._append(group)
        except Exception as exc:  # every caller learns the outcome
            errors.fail_all((p.future for p in group), exc, "intake commit")
            return
        self._hold(path, numbered_rows)
        for pending in group:
            first = firsts[id(pending)]
            pending.future.set_result(first)

    def _append(self, group: list[_Pending]) -> tuple[dict[int, int], dict[str, pa.Table], str]:
        """Number and commit the group's rows; the first offset of each pending
        request, each topic's numbered rows, and the file they are in."""
        log_ = self._log
        assert log_ is not None
        topics: dict[str, list[_Pending]] = {}
        for pending in group:
            topics.setdefault(pending.topic_uid, []).append(pending)
        budget = retry.Budget(self._settings.commit_attempts, constants.COMMIT_BUDGET_S)
        while True:
            started = time.monotonic()
            firsts: dict[int, int] = {}
            by_topic: dict[str, pa.Table] = {}
            ranges: dict[str, list[int]] = {}
            parts = []
            for topic_uid, pendings in topics.items():
                head = self._head(topic_uid)
                columns = pa.concat_tables([p.columns for p in pendings])
                rows = numbered(columns, head)
                offset = head
                for p in pendings:
                    firsts[id(p)] = offset
                    offset += p.columns.num_rows
                by_topic[topic_uid] = rows
                stamp = int(rows["publish_time"].cast(pa.int64())[0].as_py())
                ranges[topic_uid] = [head, offset, stamp, stamp]
                parts.append(_with_topic(rows, topic_uid))
            body = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
            self._txn += 1
            add = log_.write_file(body, tags={RANGES_TAG: orjson.dumps(ranges).decode()})
            txn = {"txn": {"appId": self._app_id, "version": self._txn}}
            try:
                log_.commit(
                    [add, txn], operation="WRITE", parameters={"mode": "Append"}, blind_append=True
                )
            except CommitFailedError:
                metrics.COMMIT_CONFLICTS.labels("intake").inc()
                if not budget.another():
                    raise errors.Aborted(
                        f"publish gave up after {budget.tries} conflicting commits; retry"
                    ) from None
                self._tail()
                time.sleep(retry.contender_backoff_s(time.monotonic() - started))
                continue
            except errors.Unavailable:
                if not log_.committed(self._app_id, self._txn):
                    raise
                self._tail()  # our commit is there: learn its version and file
            metrics.COMMITS.labels("intake").inc()
            metrics.COMMIT_SECONDS.labels("intake").observe(time.monotonic() - started)
            metrics.ROWS_PER_COMMIT.labels("intake").observe(body.num_rows)
            return firsts, by_topic, add["add"]["path"]

    def _head(self, topic_uid: str) -> int:
        """Where the topic's next rows start: past its table's head (reread when the
        view is older than INTAKE_HEAD_MAX_AGE_S) and past every intake row."""
        table = self._table(topic_uid, max_age_s=constants.INTAKE_HEAD_MAX_AGE_S)
        with self._cond:
            return max(table.head(), self._next.get(topic_uid, 0))

    def _table(self, topic_uid: str, *, max_age_s: float) -> MessagesTable:
        now = time.monotonic()
        held = self._tables.get(topic_uid)
        if held is None:
            table = MessagesTable(self._lake, topic_uid, overlay=False)
        else:
            table, read_at = held
            if now - read_at <= max_age_s:
                return table
            table.refresh()
        self._tables[topic_uid] = (table, now)
        return table

    def _hold(self, path: str, rows_by_topic: dict[str, pa.Table]) -> None:
        """Keep a file this process committed: its rows in memory for readers."""
        now = time.monotonic()
        with self._cond:
            slices = self._paths.setdefault(path, {})
            for topic_uid, rows in rows_by_topic.items():
                offsets = rows["offset"]
                stamps = rows["publish_time"].cast(pa.int64())
                held = slices.get(topic_uid)
                if held is None:
                    held = _Slice(
                        path,
                        offsets[0].as_py(),
                        offsets[-1].as_py() + 1,
                        stamps[0].as_py(),
                        stamps[-1].as_py(),
                        now,
                    )
                    slices[topic_uid] = held
                    _insert(self._slices.setdefault(topic_uid, []), held)
                if held.rows is None:
                    held.rows = rows
                    self._memory += rows.nbytes
                self._next[topic_uid] = max(self._next.get(topic_uid, 0), held.hi)
            self._shed()
        self._index_files()

    def _shed(self) -> None:
        """Drop in-memory copies, oldest first, past MEMORY_BYTES (read back from the file)."""
        if self._memory <= MEMORY_BYTES:
            return
        everything = sorted(
            (s for slices in self._slices.values() for s in slices if s.rows is not None),
            key=lambda s: s.seen_at,
        )
        for s in everything:
            if self._memory <= MEMORY_BYTES:
                break
            assert s.rows is not None
            self._memory -= s.rows.nbytes
            s.rows = None

    def _tail(self) -> None:
        log_ = self._log
        assert log_ is not None
        log_.tail()
        self._index_files()

    def _index_files(self) -> None:
        """Bring the slices up to the intake log's live files."""
        log_ = self._log
        assert log_ is not None
        if self._generation != log_.generation:
            self._generation = log_.generation
            live = set(log_.files)
            with self._cond:
                for path in [p for p in self._paths if p not in live]:
                    self._forget(path)
            fresh = list(log_.files.values())
        else:
            fresh = log_.added[self._indexed :]
        self._indexed = len(log_.added)
        now = time.monotonic()
        with self._cond:
            fresh = [f for f in fresh if f.path not in self._paths]
        found = {
            f.path: _ranges(f.tags.get(RANGES_TAG) or self._loaded_tags.get(f.path)) for f in fresh
        }
        untagged = [path for path, ranges in found.items() if ranges is None]
        if len(untagged) > 1:  # a load (tags are not in delta-rs's snapshot): read in parallel
            with ThreadPoolExecutor(LOAD_THREADS) as pool:
                found.update(zip(untagged, pool.map(self._ranges_of, untagged), strict=True))
        elif untagged:
            found[untagged[0]] = self._ranges_of(untagged[0])
        for f in fresh:
            ranges = found[f.path]
            assert ranges is not None
            with self._cond:
                slices = self._paths.setdefault(f.path, {})
                for topic_uid, (lo, hi, first_us, last_us) in ranges.items():
                    held = _Slice(f.path, lo, hi, first_us, last_us, now)
                    slices[topic_uid] = held
                    _insert(self._slices.setdefault(topic_uid, []), held)
                    self._next[topic_uid] = max(self._next.get(topic_uid, 0), hi)

    def _forget(self, path: str) -> None:
        for topic_uid, held in self._paths.pop(path, {}).items():
            slices = self._slices.get(topic_uid, [])
            if held in slices:
                slices.remove(held)
            if held.rows is not None:
                self._memory -= held.rows.nbytes
            if not slices:
                self._slices.pop(topic_uid, None)

    def _ranges_of(self, path: str) -> dict[str, tuple[int, int, int, int]]:
        """A file's topic ranges, from its rows (files found by a load carry no tags)."""
        log_ = self._log
        assert log_ is not None
        with storage_errors(self.uri):
            rows = pq.read_table(
                log_.open_file(path), columns=["topic_uid", "offset", "publish_time"]
            )
        found: dict[str, tuple[int, int, int, int]] = {}
        stamps = rows["publish_time"].cast(pa.int64())
        for uid, offset, stamp in zip(
            rows["topic_uid"].to_pylist(),
            rows["offset"].to_pylist(),
            stamps.to_pylist(),
            strict=True,
        ):
            lo, hi, first, last = found.get(uid, (offset, offset + 1, stamp, stamp))
            found[uid] = (min(lo, offset), max(hi, offset + 1), min(first, stamp), max(last, stamp))
        return found

    # -- moving rows to the topics' tables, removing moved files ---------------------------------

    def _housekeep(self) -> None:
        now = time.monotonic()
        if now >= self._look_at:  # other processes' commits (a takeover, a stray writer)
            self._look_at = now + self._settings.change_check(self._peered())
            self._tail()
        move_after_s = self._settings.move_after_s()
        with self._cond:
            due = [
                topic_uid
                for topic_uid, slices in self._slices.items()
                if self._due(topic_uid, slices, now, move_after_s)
            ]
        for topic_uid in due:
            if self._mover and self._owns(topic_uid):
                self._move(topic_uid)
        if self._mover and now >= self._removal_at:
            self._removal_at = now + REMOVAL_PASS_S
            self._remove_moved(now)

    def _due(self, topic_uid: str, slices: list[_Slice], now: float, move_after_s: float) -> bool:
        held = self._tables.get(topic_uid)
        moved = held[0].head() if held is not None else 0
        waiting = [s for s in slices if s.hi > moved]
        if not waiting:
            return False
        size = sum(s.rows.nbytes for s in waiting if s.rows is not None)
        return now - waiting[0].seen_at >= move_after_s or size >= constants.INTAKE_MOVE_BYTES

    def _move(self, topic_uid: str) -> None:
        """Append the topic's intake rows past its table's head to the table."""
        if not self._alive(topic_uid):
            self._tables.pop(topic_uid, None)
            return
        try:
            table = self._table(topic_uid, max_age_s=0.0)
        except errors.NotFound:  # deleted meanwhile: its rows leave with their files
            return
        budget = retry.Budget(self._settings.commit_attempts, constants.COMMIT_BUDGET_S)
        while True:
            head = table.head()
            rows = self.read(topic_uid, head, self.next_offset(topic_uid))
            if rows.num_rows == 0:
                return
            if rows["offset"][0].as_py() != head:  # never expected: offsets are dense
                log.error("intake rows of topic %s do not start at its head %d", topic_uid, head)
                return
            self._txn += 1
            try:
                version = table.append(rows, app_id=self._app_id, txn_version=self._txn)
            except CommitFailedError:
                metrics.COMMIT_CONFLICTS.labels("messages").inc()
                if not budget.another():
                    return  # the next pass tries again
                table.refresh()
                continue
            self._tables[topic_uid] = (table, time.monotonic())
            break
        moved_to = table.head()
        now = time.monotonic()
        with self._cond:
            for s in self._slices.get(topic_uid, ()):
                if s.hi <= moved_to and s.rows is not None:
                    self._memory -= s.rows.nbytes
                    s.rows = None
                    self._moved_at[s.path] = now
        self._on_moved(topic_uid, version)

    def _remove_moved(self, now: float) -> None:
        """Remove intake files whose rows all moved at least the grace ago."""
        log_ = self._log
        assert log_ is not None
        with self._cond:
            files = {path: dict(slices) for path, slices in self._paths.items()}
        doomed = []
        for path, slices in files.items():
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
            self._tail()
            return
        for path in doomed:
            self._moved_at.pop(path, None)
        self._index_files()

    def _moved(self, topic_uid: str, hi: int) -> bool:
        """Whether the topic's table holds every offset below ``hi`` (or the topic is gone).
        A topic this process moves is judged by its own view (its moves keep it
        current; a job's move is found by the next due move); another's view is
        reread at most every OTHERS_REREAD_S (a GET each on S3)."""
        if not self._alive(topic_uid):
            return True
        max_age_s = float("inf") if self._mover and self._owns(topic_uid) else OTHERS_REREAD_S
        try:
            table = self._table(topic_uid, max_age_s=max_age_s)
        except errors.NotFound:
            return True
        return table.head() >= hi


def _insert(slices: list[_Slice], held: _Slice) -> None:
    """Keep a topic's slices in offset order (nearly always an append)."""
    at = len(slices)
    while at > 0 and slices[at - 1].lo > held.lo:
        at -= 1
    slices.insert(at, held)


def _ranges(tag: str | None) -> dict[str, tuple[int, int, int, int]] | None:
    """A file's topic ranges from its add action's tag (None: no tag)."""
    if not tag:
        return None
    parsed = orjson.loads(tag)
    return {uid: (int(r[0]), int(r[1]), int(r[2]), int(r[3])) for uid, r in parsed.items()}


def _with_topic(rows: pa.Table, topic_uid: str) -> pa.Table:
    column = pa.array([topic_uid] * rows.num_rows, pa.string())
    return pa.Table.from_arrays([column, *rows.columns], schema=schemas.INTAKE)
