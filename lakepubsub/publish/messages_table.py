"""A topic's messages table: appending numbered batches and reading offset ranges.

Appends are direct commits (``TableLog``): one parquet file and one log entry,
about 1 ms. Reads prune files by their offset statistics, kept in an index
that grows with each commit seen, and read only the matching parquet files:
at 1,000 small files that is ~11 ms for a 1,000-row range against ~64 ms for
delta-rs's own filtered read on this machine (docs/architecture.md).
"""

from __future__ import annotations

import bisect
import functools
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakepubsub import metrics
from lakepubsub._lake import DataFile, Lake, TableLog, storage_errors, table_schemas
from lakepubsub.publish.decoded import DECODED, READ_AHEAD

if TYPE_CHECKING:
    from deltalake import DeltaTable

_TRACKED = ("offset", "publish_time")
_Mask = Callable[[pa.Table], pa.Array]
# How many files after a range a reader of ranges on S3 has decoded ahead, at
# most (within READ_AHEAD's bytes), and how big each may be: a file decoded ahead
# is decoded whole, and kept only if its rows take at most a quarter of the
# decoded files' memory (16 MiB; payloads that compress 4 to 1 fit). Not the
# compacted files of up to 128 MiB, which a range reads a row group of.
READ_AHEAD_FILES = 16
READ_AHEAD_FILE_BYTES = DECODED.max_bytes // 16
# Compacted files are written in row groups of about this many bytes, so a read
# of a few thousand offsets decodes one row group, not a 128 MiB file.
ROW_GROUP_BYTES = 8 * 1024 * 1024


class Overlay(Protocol):
    """Rows of topics not yet in their tables (``lakepubsub/publish/intake.py``)."""

    def next_offset(self, topic_uid: str) -> int: ...

    def read(self, topic_uid: str, lo: int, hi: int) -> pa.Table: ...

    def first_at(self, topic_uid: str, time_us: int, lo: int) -> int | None: ...

    def refresh(self) -> None: ...


_overlays: weakref.WeakKeyDictionary[Lake, Overlay] = weakref.WeakKeyDictionary()


def attach_overlay(lake: Lake, overlay: Overlay | None) -> None:
    """Make every ``MessagesTable`` on ``lake`` in this process read ``overlay`` too
    (None: stop)."""
    if overlay is None:
        _overlays.pop(lake, None)
    else:
        _overlays[lake] = overlay


class MessagesTable:
    """One process's handle on one topic's messages table, and the topic's rows in
    the intake when this process runs one (``overlay``). Not thread-safe."""

    def __init__(
        self,
        lake: Lake,
        topic_uid: str,
        *,
        overlay: bool = True,
        opened: DeltaTable | None = None,
    ) -> None:
        self.uri = lake.messages_uri(topic_uid)
        self.topic_uid = topic_uid
        self._overlay = _overlays.get(lake) if overlay else None
        self._lake = lake
        self._log = TableLog(lake, self.uri, tracked=_TRACKED, opened=opened)
        # Files sorted by lowest offset, with a running maximum of their highest
        # offset: the files overlapping a range are found by bisection.
        self._index: list[tuple[int, int, int, str]] = []  # lo, hi, latest_us, path
        self._los: list[int] = []
        self._reach: list[int] = []
        self._indexed = 0
        self._generation = -1
        self._head = 0

    @property
    def version(self) -> int:
        return self._log.version

    def refresh(self, until: int | None = None) -> bool:
        """Catch up with commits by others (``until``: only up to that version, known
        to exist); True if the table moved. Without ``until`` (a look), the intake too."""
        if until is None and self._overlay is not None:
            self._overlay.refresh()
        return self._log.tail(until)

    def head(self) -> int:
        """One past the highest offset in the loaded version and the intake (0 for an
        empty topic)."""
        self._sync()
        if self._overlay is not None:
            return max(self._head, self._overlay.next_offset(self.topic_uid))
        return self._head

    def _sync(self) -> None:
        """Bring the file index up to the log's files."""
        log = self._log
        if self._generation != log.generation:  # files were removed: rebuild
            self._generation = log.generation
            self._index, self._los, self._reach, self._indexed = [], [], [], 0
        if self._indexed == len(log.added):
            return
        fresh = sorted(
            _entry(f)
            for f in log.added[self._indexed :]
            if f.rows and "offset" in f.mins and "offset" in f.maxs
        )
        self._indexed = len(log.added)
        if self._index and fresh and fresh[0][0] < self._los[-1]:  # not in offset order
            fresh = sorted(self._index + fresh)
            self._index, self._los, self._reach = [], [], []
        for entry in fresh:
            self._index.append(entry)
            self._los.append(entry[0])
            self._reach.append(max(entry[1], self._reach[-1]) if self._reach else entry[1])
        self._head = self._reach[-1] + 1 if self._reach else 0

    def _paths(self, lo: int, hi: int) -> list[str]:
        """Files that may hold offsets in ``[lo, hi)``, in offset order."""
        self._sync()
        i = bisect.bisect_left(self._los, hi)
        found = []
        while i > 0 and self._reach[i - 1] >= lo:
            i -= 1
            if self._index[i][1] >= lo:
                found.append(self._index[i][3])
        found.reverse()
        return found

    def read_range(self, lo: int, hi: int) -> pa.Table:
        """Rows with ``lo <= offset < hi``, sorted by offset. On S3 the files after
        them are decoded ahead: a reader of a range reads the next one next."""
        if hi <= lo:
            return table_schemas.empty_messages()
        rows = self._read(lo, hi)
        if self._lake.is_s3:
            after = bisect.bisect_left(self._los, hi)
            _read_ahead(self._log, self.uri, self._index[after : after + READ_AHEAD_FILES])
        return rows

    def read_offsets(self, offsets: Sequence[int]) -> pa.Table:
        """Rows with the given offsets (those that still exist), sorted by offset."""
        if not offsets:
            return table_schemas.empty_messages()
        wanted = pa.array(sorted(offsets), pa.int64())
        return self._read(
            wanted[0].as_py(),
            wanted[-1].as_py() + 1,
            lambda rows: pc.is_in(rows["offset"], value_set=wanted),
        )

    def _read(self, lo: int, hi: int, mask: _Mask | None = None) -> pa.Table:
        paths = self._paths(lo, hi)
        parts = [self._read_files(paths, lo, hi, mask)] if paths else []
        if self._overlay is not None and hi > self._head:  # the rest is in the intake
            fresh = self._overlay.read(self.topic_uid, max(lo, self._head), hi)
            if mask is not None and fresh.num_rows:
                fresh = fresh.filter(mask(fresh))
            parts.append(fresh)
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return table_schemas.empty_messages()
        return _by_offset(pa.concat_tables(parts) if len(parts) > 1 else parts[0])

    def _read_files(
        self,
        paths: list[str],
        lo: int | None = None,
        hi: int | None = None,
        mask: _Mask | None = None,
    ) -> pa.Table:
        """The rows of ``paths`` (in that order) with ``lo <= offset < hi`` for which
        ``mask`` is true. Row groups outside the range are not read, and rows of
        a file wholly inside it are not filtered.

        File by file on this thread: a pyarrow dataset scan of the same files
        took twice the CPU time (its read-ahead threads) for the same wall time,
        and filtering with an Expression (through Acero) twice as long as a mask.
        """
        parts = []
        with storage_errors(self.uri):
            for path in paths:
                rows = READ_AHEAD.read(self.uri, path)  # decoded ahead, or being
                if rows is None:
                    rows = DECODED.get(self.uri, path)
                else:
                    metrics.DECODED_HITS.inc()
                if rows is None:
                    rows = _decode(self._log, self.uri, path, lo, hi)
                if lo is not None and hi is not None and not self._within(path, lo, hi):
                    rows = _in_range(rows, lo, hi)
                if mask is not None:
                    rows = rows.filter(mask(rows))
                parts.append(rows)
        if not parts:
            return table_schemas.empty_messages()
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _within(self, path: str, lo: int, hi: int) -> bool:
        f = self._log.files.get(path)
        return f is not None and lo <= f.mins.get("offset", -1) and f.maxs.get("offset", hi) < hi

    def first_offset_at(self, time_us: int) -> int:
        """The first offset published at or after ``time_us`` (the head if none),
        but never below the oldest offset the table still holds."""
        self._sync()
        when = pa.scalar(time_us, pa.int64()).cast(table_schemas.UTC_US)

        def published_since(rows: pa.Table) -> pa.Array:
            return pc.greater_equal(rows["publish_time"], when)

        # Files whose newest message is older than the time cannot hold the answer.
        for lo, hi, latest_us, _ in self._index:
            if latest_us < time_us:
                continue
            rows = self._read(lo, hi + 1, published_since)
            if rows.num_rows:
                return max(self._los[0], int(pc.min(rows["offset"]).as_py()))
        if self._overlay is not None:
            found = self._overlay.first_at(self.topic_uid, time_us, self._head)
            if found is not None:
                return found
        return self.head()

    def publish_time_us(self, offset: int) -> int | None:
        """When the message at ``offset`` was published, if the table still holds it."""
        rows = self.read_offsets([offset])
        if rows.num_rows == 0:
            return None
        return int(rows["publish_time"].cast(pa.int64())[0].as_py())

    def append(self, batch: pa.Table, *, app_id: str, txn_version: int) -> int:
        """Commit ``batch`` iff the table is still at the loaded version.

        Raises ``CommitFailedError`` if another writer committed first. The
        (app_id, txn_version) pair lets a caller learn, after an ambiguous
        storage error, whether the commit landed (``committed``).
        """
        started = time.perf_counter()
        log = self._log
        add = log.write_file(batch)
        txn = {"txn": {"appId": app_id, "version": txn_version}}
        version = log.commit(
            [add, txn], operation="WRITE", parameters={"mode": "Append"}, blind_append=True
        )
        metrics.COMMITS.labels("messages").inc()
        metrics.COMMIT_SECONDS.labels("messages").observe(time.perf_counter() - started)
        metrics.ROWS_PER_COMMIT.labels("messages").observe(batch.num_rows)
        if batch.schema == table_schemas.MESSAGES:  # the dispatchers read it next
            DECODED.put(self.uri, add["add"]["path"], batch)
        self._sync()
        return version

    def committed(self, app_id: str, txn_version: int) -> bool:
        """Whether the commit tagged (app_id, txn_version) is in the table."""
        self._log.tail()
        return self._log.committed(app_id, txn_version)

    # -- maintenance (the compaction and truncation jobs) ----------------------------

    def compact(self, *, target_bytes: int, min_small_files: int) -> tuple[int, int, list[int]]:
        """Rewrite runs of adjacent small files into files of about ``target_bytes``.

        Each run becomes one file in offset order, so files keep disjoint, ordered
        offset ranges; its commit carries ``dataChange=false``. Returns the files
        removed and added and the versions committed. ``CommitFailedError`` if
        another writer removed a file being compacted (redo from a fresh read).
        """
        self.refresh()
        self._sync()
        files = self._log.files
        if sum(1 for e in self._index if files[e[3]].size < target_bytes) < min_small_files:
            return 0, 0, []
        runs: list[list[str]] = [[]]
        size = 0
        for _, _, _, path in self._index:
            f = files[path]
            if f.size >= target_bytes or (runs[-1] and size + f.size > target_bytes):
                runs.append([])
                size = 0
            if f.size < target_bytes:
                runs[-1].append(path)
                size += f.size
        removed = added = 0
        versions = []
        for run in (r for r in runs if len(r) > 1):
            rows = _by_offset(self._read_files(run))
            group = max(1, rows.num_rows * ROW_GROUP_BYTES // max(1, rows.nbytes))
            versions.append(
                self._rewrite(
                    run,
                    [rows],
                    operation="OPTIMIZE",
                    parameters={"targetSize": str(target_bytes)},
                    data_change=False,
                    row_group_rows=group,
                )
            )
            removed, added = removed + len(run), added + 1
        return removed, added, versions

    def delete_below(self, bound: int) -> tuple[int, int | None]:
        """Delete every message with an offset below ``bound`` (keep the head's row:
        callers pass ``bound <= head - 1``). Returns the rows deleted and the version."""
        self.refresh()
        self._sync()
        doomed, kept, deleted = [], [], 0
        for lo, hi, _, path in self._index:
            if lo >= bound:
                break
            doomed.append(path)
            if hi < bound:
                deleted += self._log.files[path].rows
            else:  # straddles the bound: keep its rows from the bound on
                keep = _by_offset(self._read_files([path], bound, hi + 1))
                kept.append(keep)
                deleted += self._log.files[path].rows - keep.num_rows
        if not doomed:
            return 0, None
        version = self._rewrite(
            doomed, kept, operation="DELETE", parameters={"predicate": f"offset < {bound}"}
        )
        return deleted, version

    def _rewrite(
        self,
        removed: list[str],
        written: list[pa.Table],
        *,
        operation: str,
        parameters: dict[str, str],
        data_change: bool = True,
        row_group_rows: int | None = None,
    ) -> int:
        log = self._log
        adds = [
            log.write_file(rows, data_change=data_change, row_group_rows=row_group_rows)
            for rows in written
            if rows.num_rows
        ]
        actions = [*adds, *(log.remove(p, data_change=data_change) for p in removed)]
        try:
            return log.commit_rebasing(actions, operation=operation, parameters=parameters)
        finally:
            self._sync()


def create_table(lake: Lake, topic_uid: str) -> MessagesTable:
    """Make the topic's messages table; a handle on it as made (no intake rows),
    read with no request."""
    made = lake.create(
        lake.messages_uri(topic_uid),
        table_schemas.MESSAGES,
        configuration=table_schemas.MESSAGES_PROPERTIES,
        description="lakepubsub messages",
    )
    return MessagesTable(lake, topic_uid, overlay=False, opened=made)


def numbered(columns: pa.Table, head: int) -> pa.Table:
    """Checked publish columns as messages rows, offsets from ``head``, published now."""
    n = columns.num_rows
    # From numpy, without a conversion of each int (0.115 µs a message with them).
    offsets = pa.array(np.arange(head, head + n, dtype=np.int64))
    # A few ids are quicker made as text here than by a cast's dispatch (3 against 6 µs).
    ids = (
        pa.array([str(o) for o in range(head, head + n)], pa.string())
        if n <= _IDS_AS_TEXT
        else offsets.cast(pa.string())
    )
    now_us = time.time_ns() // 1000
    return pa.Table.from_arrays(
        [
            offsets,
            ids,
            table_schemas.utc_us_column(now_us, n),
            columns["data"],
            columns["attributes"],
            columns["ordering_key"],
            columns["size"],
        ],
        schema=table_schemas.MESSAGES,
    )


_IDS_AS_TEXT = 16


def _read_ahead(log: TableLog, uri: str, later: list[tuple[int, int, int, str]]) -> None:
    """Start decoding the ``later`` files (index entries, in offset order) on the
    read-ahead threads (``READ_AHEAD``), while its budget lasts."""
    for entry in later:
        path = entry[3]
        stats = log.files.get(path)
        if stats is None or stats.size > READ_AHEAD_FILE_BYTES:
            return
        decode = functools.partial(_decode, log, uri, path, None, None)
        if not READ_AHEAD.start(uri, path, stats.size, decode):
            return


def _decode(log: TableLog, uri: str, path: str, lo: int | None, hi: int | None) -> pa.Table:
    """The rows of ``path``'s row groups that may hold ``[lo, hi)``; a file read whole
    is kept decoded (``DECODED``)."""
    parquet = log.parquet(path)
    groups = _row_groups(parquet.metadata, lo, hi)
    rows = (
        parquet.read(use_threads=False)
        if groups is None
        else parquet.read_row_groups(groups, use_threads=False)
    )
    if rows.schema != table_schemas.MESSAGES:  # files by other writers
        rows = rows.select(table_schemas.MESSAGES.names).cast(table_schemas.MESSAGES)
    if groups is None:
        DECODED.put(uri, path, rows)
    return rows


def _row_groups(metadata: pq.FileMetaData, lo: int | None, hi: int | None) -> list[int] | None:
    """Row groups that may hold offsets in ``[lo, hi)``; None for all of them."""
    if lo is None or hi is None or metadata.num_row_groups <= 1:
        return None
    column = metadata.schema.names.index("offset")
    groups = []
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or (stats.max >= lo and stats.min < hi):
            groups.append(i)
    return groups


def _entry(f: DataFile) -> tuple[int, int, int, str]:
    return (f.mins["offset"], f.maxs["offset"], f.maxs.get("publish_time", 2**62), f.path)


def _ascending(table: pa.Table) -> np.ndarray | None:
    """The offsets of ``table`` as a numpy array when they are strictly ascending (as
    a file's rows are written); None otherwise. numpy, not Arrow compute: each
    compute call costs tens of µs here, more than a drain's read of a run. (Offsets
    are never null; in several chunks they are joined, 8 bytes a row.)"""
    offsets = table["offset"].combine_chunks().to_numpy()
    return offsets if bool(np.all(offsets[1:] > offsets[:-1])) else None


def _in_range(rows: pa.Table, lo: int, hi: int) -> pa.Table:
    """The rows of one file with ``lo <= offset < hi``: a slice (no copy) when its
    offsets ascend, else a filter."""
    offsets = _ascending(rows)
    if offsets is not None:
        start, end = np.searchsorted(offsets, (lo, hi))
        return rows.slice(int(start), int(end - start))
    column = rows["offset"]
    return rows.filter(pc.and_(pc.greater_equal(column, lo), pc.less(column, hi)))


def _by_offset(table: pa.Table) -> pa.Table:
    """``table`` sorted by offset. Files are read in offset order, so it nearly
    always is already: checking costs 8 bytes a row, sorting copies every row's data."""
    if table.num_rows > 1 and _ascending(table) is None:
        return table.sort_by("offset")
    return table


def offset_range(table: DeltaTable) -> tuple[int, int]:
    """A messages table's oldest offset and head (one past the newest), from file statistics."""
    with storage_errors(table.table_uri):
        actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0, 0
    low = pc.min(actions.column("min.offset")).as_py()
    high = pc.max(actions.column("max.offset")).as_py()
    return int(low), int(high) + 1
