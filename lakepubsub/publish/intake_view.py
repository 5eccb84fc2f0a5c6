"""A process's view of the intake: the live files, the offsets of each topic each
holds, and the rows themselves for readers (``MessagesTable``'s overlay).

Rows this process committed stay in memory up to ``MEMORY_BYTES`` (oldest dropped
first), and so do rows whose commit entry carried them (on S3, ``intake_files``),
learned by tailing the log; other rows are read back from their file, which is
written again from its commit entry if it is missing.
"""

from __future__ import annotations

import bisect
import operator
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakepubsub import errors
from lakepubsub._lake import Lake, TableLog, storage_errors
from lakepubsub._lake import table_schemas as schemas
from lakepubsub.publish import intake_ranges
from lakepubsub.publish.intake_ranges import RANGES_TAG, Ranges

# Rows kept in memory for readers (beyond it, they are read back from the file).
MEMORY_BYTES = 128 * 1024 * 1024
# Files read at once when a load must find their topic ranges from their rows.
LOAD_THREADS = 8


@dataclass
class Slice:
    """One topic's rows in one intake file: offsets ``[lo, hi)``."""

    path: str
    lo: int
    hi: int
    first_us: int
    last_us: int
    seen_at: float  # time.monotonic() when this process committed or learned of it
    rows: pa.Table | None = None  # held in memory (committed here), MESSAGES schema
    # rows.nbytes, taken once: pyarrow sums every buffer on each call (~15 µs), and the
    # intake asks of every held slice of every topic on each pass.
    nbytes: int = 0


class IntakeView:
    """The intake table's log and which topic offsets its live files hold.

    Readers call ``next_offset``, ``read``, ``first_at`` from any thread; the
    changes (``open``, ``tail``, ``hold``, ``release``) come from one thread at a
    time (the intake's work lock).
    """

    def __init__(self, lake: Lake, uri: str) -> None:
        self.uri = uri
        self._lake = lake
        self._log: TableLog | None = None
        self._lock = threading.Lock()
        self._indexed = 0
        self._generation = -1
        # Guarded by _lock: what readers see.
        self._slices: dict[str, list[Slice]] = {}
        self._next: dict[str, int] = {}
        self._paths: dict[str, dict[str, Slice]] = {}  # file -> topic -> slice
        self._memory = 0

    @property
    def log(self) -> TableLog:
        """The intake table's log (once ``open``)."""
        assert self._log is not None
        return self._log

    def open(self) -> None:
        """Open (or create) the intake table and learn the ranges of its live files."""
        self._lake.create(
            self.uri,
            schemas.INTAKE,
            configuration=schemas.INTAKE_PROPERTIES,
            description="lakepubsub intake",
        )
        self._log = TableLog(self._lake, self.uri, payloads=self._lake.is_s3)
        self.index_files(intake_ranges.replayed_tags(self._lake, self.uri, self._log.version))

    def tail(self) -> None:
        """Learn of the intake commits made since the last look."""
        self.log.tail()
        self.index_files()

    # -- reading (any thread) -------------------------------------------------------------------

    def next_offset(self, topic_uid: str) -> int:
        """One past the highest offset the intake holds or held for the topic (0: none).
        Without the lock: one lookup in a dict is atomic, and every dispatcher asks
        each cycle while a commit of many topics may hold the lock."""
        return self._next.get(topic_uid, 0)

    def read(self, topic_uid: str, lo: int, hi: int) -> pa.Table:
        """The topic's intake rows with ``lo <= offset < hi``, sorted by offset."""
        with self._lock:
            found = [
                (s.path, s.lo, s.hi, s.rows) for s in _overlapping(self._slices, topic_uid, lo, hi)
            ]
        parts = []
        for path, s_lo, s_hi, held in found:
            rows = held if held is not None else self._read_file(path, topic_uid)
            parts.append(_within(rows, s_lo, s_hi, lo, hi))
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return schemas.empty_messages()
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def first_at(self, topic_uid: str, time_us: int, lo: int) -> int | None:
        """The first offset at or above ``lo`` published at or after ``time_us``, if the
        intake holds one."""
        with self._lock:
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

    def held(self) -> tuple[int, int]:
        """How many topics and rows the intake's live files hold (moved or not)."""
        with self._lock:
            rows = sum(s.hi - s.lo for slices in self._slices.values() for s in slices)
            return sum(1 for slices in self._slices.values() if slices), rows

    def highs(self) -> dict[str, int]:
        """One past each held topic's highest offset in the live files."""
        with self._lock:
            return {uid: max(s.hi for s in held) for uid, held in self._slices.items() if held}

    def slices(self) -> dict[str, list[Slice]]:
        """Each held topic's slices, in offset order (a copy)."""
        with self._lock:
            return {uid: list(held) for uid, held in self._slices.items()}

    def files(self) -> dict[str, dict[str, Slice]]:
        """Each live file's slices by topic (a copy)."""
        with self._lock:
            return {path: dict(slices) for path, slices in self._paths.items()}

    def ranges_of(self, path: str) -> Ranges:
        """A file's topic ranges, from its rows (files found by a load carry no tags)."""
        return intake_ranges.from_rows(self._parquet(path, ["topic_uid", "offset", "publish_time"]))

    def _read_file(self, path: str, topic_uid: str) -> pa.Table:
        return _topic_rows(self._parquet(path), topic_uid)

    def _parquet(self, path: str, columns: list[str] | None = None) -> pa.Table:
        """A live file's rows; a file missing is written again from its commit entry
        (its writer died, or failed to write it, after the entry landed)."""
        try:
            with storage_errors(self.uri):
                return self.log.parquet(path).read(columns, use_threads=False)
        except errors.Unavailable:
            with storage_errors(self.uri):
                missing = not self._lake.objects.exists(self.log.path_of(path))
            if not (missing and self.log.restore_file(path)):
                raise
        with storage_errors(self.uri):
            return self.log.parquet(path).read(columns, use_threads=False)

    # -- changes (one thread at a time) --------------------------------------------------------

    def hold(self, path: str, rows_by_topic: dict[str, pa.Table]) -> None:
        """Keep a file this process committed: its rows in memory for readers."""
        now = time.monotonic()
        made = {}  # made before the lock: readers wait on it
        for topic_uid, rows in rows_by_topic.items():
            offsets, stamps = rows["offset"], rows["publish_time"]
            made[topic_uid] = Slice(
                path,
                offsets[0].as_py(),
                offsets[-1].as_py() + 1,
                stamps[0].value,
                stamps[-1].value,
                now,
            )
        with self._lock:
            slices = self._paths.setdefault(path, {})
            for topic_uid, rows in rows_by_topic.items():
                held = slices.get(topic_uid)
                if held is None:
                    held = slices[topic_uid] = made[topic_uid]
                    _insert(self._slices.setdefault(topic_uid, []), held)
                if held.rows is None:
                    held.rows, held.nbytes = rows, rows.nbytes
                    self._memory += held.nbytes
                self._next[topic_uid] = max(self._next.get(topic_uid, 0), held.hi)
            self._shed()
        self.index_files()

    def release(self, topic_uid: str, moved_to: int) -> list[str]:
        """Drop the in-memory rows of the topic's slices below ``moved_to`` (now in its
        table); the files they are in."""
        released = []
        with self._lock:
            for s in self._slices.get(topic_uid, ()):
                if s.hi <= moved_to and s.rows is not None:
                    self._memory -= s.nbytes
                    s.rows, s.nbytes = None, 0
                    released.append(s.path)
        return released

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
            self._memory -= s.nbytes
            s.rows, s.nbytes = None, 0

    def index_files(self, loaded_tags: dict[str, str] | None = None) -> None:
        """Bring the slices up to the intake log's live files (``loaded_tags``: the
        range tags a load found by replaying the log)."""
        log_ = self.log
        if self._generation != log_.generation:
            self._generation = log_.generation
            live = set(log_.files)
            with self._lock:
                for path in [p for p in self._paths if p not in live]:
                    self._forget(path)
            fresh = list(log_.files.values())
        else:
            fresh = log_.added[self._indexed :]
        self._indexed = len(log_.added)
        now = time.monotonic()
        with self._lock:
            fresh = [f for f in fresh if f.path not in self._paths]
        tags = loaded_tags or {}
        found = {
            f.path: intake_ranges.decode(f.tags.get(RANGES_TAG) or tags.get(f.path)) for f in fresh
        }
        untagged = [path for path, ranges in found.items() if ranges is None]
        if len(untagged) > 1:  # a load (tags are not in delta-rs's snapshot): read in parallel
            with ThreadPoolExecutor(LOAD_THREADS) as pool:
                found.update(zip(untagged, pool.map(self.ranges_of, untagged), strict=True))
        elif untagged:
            found[untagged[0]] = self.ranges_of(untagged[0])
        payloads = log_.payloads or {}
        for f in fresh:
            ranges = found[f.path]
            assert ranges is not None
            carried = payloads.get(f.path)
            rows = None if carried is None else pq.read_table(pa.BufferReader(carried))
            with self._lock:
                slices = self._paths.setdefault(f.path, {})
                for topic_uid, (lo, hi, first_us, last_us) in ranges.items():
                    held = Slice(f.path, lo, hi, first_us, last_us, now)
                    if rows is not None:  # the commit entry carried them: no read
                        held.rows = _topic_rows(rows, topic_uid)
                        held.nbytes = held.rows.nbytes
                        self._memory += held.nbytes
                    slices[topic_uid] = held
                    _insert(self._slices.setdefault(topic_uid, []), held)
                    self._next[topic_uid] = max(self._next.get(topic_uid, 0), hi)
                self._shed()
        payloads.clear()

    def _forget(self, path: str) -> None:
        for topic_uid, held in self._paths.pop(path, {}).items():
            slices = self._slices.get(topic_uid, [])
            if held in slices:
                slices.remove(held)
            if held.rows is not None:
                self._memory -= held.nbytes
            if not slices:
                self._slices.pop(topic_uid, None)


def _topic_rows(rows: pa.Table, topic_uid: str) -> pa.Table:
    """One topic's rows of an intake file, as its messages table holds them."""
    rows = rows.filter(pc.equal(rows["topic_uid"], topic_uid))
    return rows.select(schemas.MESSAGES.names).cast(schemas.MESSAGES)


def _within(rows: pa.Table, s_lo: int, s_hi: int, lo: int, hi: int) -> pa.Table:
    """The rows of a slice holding offsets ``[s_lo, s_hi)`` with ``lo <= offset < hi``.
    A slice holds its topic's offsets of one commit, numbered in row order, so
    nearly always every one of them: a slice by position, with no pass over the
    rows (pyarrow's compute functions cost tens of µs a call, and a dispatcher
    reads a few new messages each cycle)."""
    if lo <= s_lo and s_hi <= hi:
        return rows
    if rows.num_rows == s_hi - s_lo:
        start = max(lo, s_lo) - s_lo
        return rows.slice(start, min(hi, s_hi) - s_lo - start)
    offsets = rows["offset"]
    return rows.filter(pc.and_(pc.greater_equal(offsets, lo), pc.less(offsets, hi)))


def _overlapping(by_topic: dict[str, list[Slice]], topic_uid: str, lo: int, hi: int) -> list[Slice]:
    """The topic's slices that hold offsets in ``[lo, hi)``, by binary search.

    A topic's slices are kept in offset order and never overlap (each holds one
    commit's offsets of the topic), so their ``hi`` ascend with their ``lo``. A topic
    keeps a slice per intake commit until its rows move (600 s on S3: thousands of
    slices), and every dispatcher cycle reads: a scan of them all was the busiest
    line of a server carrying 100 topics."""
    slices = by_topic.get(topic_uid)
    if not slices:
        return []
    start = bisect.bisect_right(slices, lo, key=_HI)
    return slices[start : bisect.bisect_left(slices, hi, lo=start, key=_LO)]


_HI, _LO = operator.attrgetter("hi"), operator.attrgetter("lo")


def _insert(slices: list[Slice], held: Slice) -> None:
    """Keep a topic's slices in offset order (nearly always an append)."""
    at = len(slices)
    while at > 0 and slices[at - 1].lo > held.lo:
        at -= 1
    slices.insert(at, held)
