"""Direct reads and writes of a Delta table's log, for the hot paths.

delta-rs spends 7-15 ms of CPU on each commit (planning, then a post-commit
snapshot refresh that on a local filesystem lists the whole ``_delta_log``),
and a lease MERGE costs more. A commit whose actions are already known costs
about 1 ms when its JSON is written here with the atomic primitive delta-rs
itself uses (``Objects.put_if_absent``). Likewise a reader learns of new
commits by reading the next commit file, instead of reloading the snapshot.
docs/architecture.md ("The direct log") has the measurements.

The log stays standard Delta (reader version 1, writer version 2, no
partitions): delta-rs, Spark and the jobs read and write the same tables, and
their commits are seen here by tailing. A table that uses a feature this
writer does not implement is refused rather than written wrongly. Checkpoints
are written off the hot path by a background thread from a kept replay of the
log (``checkpoints.py``; delta-rs for what it does not model), and log cleanup
is delegated to delta-rs.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from lakepubsub import constants, errors
from lakepubsub._lake import checkpoints
from lakepubsub._lake.objects import Objects
from lakepubsub._lake.storage import Lake, log_race, storage_errors

log = logging.getLogger(__name__)

ENGINE = "lakepubsub"
# Delta truncates string statistics; longer values get no min/max (still correct).
MAX_STRING_STAT_CHARS = 32
# Up to this many rows, a column's min/max is taken in Python: pyarrow.compute's
# dispatch costs about 5 us a call, more than the work for a few values, and most
# files of single publishes and every lease table's cursor file hold one row. (The
# results are the same: integers compare as numbers, strings by code point, which
# is UTF-8 byte order.)
SMALL_STATS_ROWS = 64
_MS_PER_S = 1000
_US_PER_MS = 1000


@dataclass(frozen=True, slots=True)
class DataFile:
    """A live data file: its path relative to the table root and its statistics.

    ``mins``/``maxs`` hold the tracked integer and timestamp columns (timestamps
    in microseconds; a maximum written with millisecond precision is rounded up).
    """

    path: str
    size: int
    rows: int
    mins: Mapping[str, int]
    maxs: Mapping[str, int]
    # The add action's tags (as written in the commit; delta-rs's snapshot of a
    # loaded table does not return them, so files found by ``load`` have none).
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)


class TableLog:
    """One owner's view of one Delta table: its version, live files, and commits.

    Not thread-safe: one thread (a publisher, a dispatcher) owns an instance.
    ``generation`` changes whenever files were removed or replaced or the view
    reloaded, so an index built on ``added`` knows when appending is not enough.
    """

    def __init__(self, lake: Lake, uri: str, *, tracked: Iterable[str] = ()) -> None:
        self.uri = uri
        self._lake = lake
        self._tracked = frozenset(tracked)
        self.version = -1
        self.files: dict[str, DataFile] = {}
        # The live files in the order they were added, while ``generation`` holds
        # (none removed): readers index the new ones by position, where skipping
        # to them in ``files`` costs a step per older file, every commit.
        self.added: list[DataFile] = []
        self.generation = 0
        self._filesystem: Any = None
        self._checkpoint_interval = int(constants.CHECKPOINT_INTERVAL)
        self._checkpoint_version = -1
        self._checkpoint_at = 0.0
        self._refused: str | None = None
        self._append_only = False
        self._confirmed_at = 0.0
        self._last_modification_ms = 0
        self.load()

    # -- reading -------------------------------------------------------------------------

    def load(self) -> None:
        """Read the latest snapshot through delta-rs (checkpoint plus commits)."""
        table = self._lake.open(self.uri)
        with storage_errors(self.uri):
            version = table.version()
            actions = pa.table(table.get_add_actions(flatten=True))
            protocol = table.protocol()
            metadata = table.metadata()
        self.files = _files_of(actions, self._tracked)
        self.added = list(self.files.values())
        self.version = version
        self.generation += 1
        self._confirmed_at = time.monotonic()
        interval = metadata.configuration.get("delta.checkpointInterval")
        self._checkpoint_interval = int(interval or constants.CHECKPOINT_INTERVAL)
        self._refused = _refusal(protocol, metadata)
        self._append_only = metadata.configuration.get("delta.appendOnly") == "true"

    def tail(self, until: int | None = None) -> bool:
        """Apply commits made since the loaded version; True if there were any.
        With ``until``, a version known to exist, read up to it and look no further
        (no request for the next commit file, which may not exist)."""
        moved = False
        while until is None or self.version < until:
            with storage_errors(self.uri):
                body = self._lake.objects.read(self._commit_uri(self.version + 1))
            if body is None:
                break
            actions = checkpoints.parse_commit(body)
            if any("metaData" in a or "protocol" in a for a in actions):
                self.load()  # a schema or property change: start over from delta-rs
                return True
            self._apply(actions)
            self.version += 1
            self._confirmed_at = time.monotonic()
            moved = True
        if until is not None:
            return moved
        if not moved and self._own_version_gone():
            # Our version's log file was cleaned up after a checkpoint: the table
            # moved on and the commits in between are gone; reload.
            version = self.version
            self.load()
            return self.version != version
        return moved

    def _own_version_gone(self) -> bool:
        recheck_s = (
            constants.S3_LOG_RECHECK_S if self._lake.is_s3 else constants.LOCAL_LOG_RECHECK_S
        )
        if self.version < 0 or time.monotonic() - self._confirmed_at < recheck_s:
            return False
        with storage_errors(self.uri):
            present = self._lake.objects.exists(self._commit_uri(self.version))
        if present:
            self._confirmed_at = time.monotonic()
        return not present

    def path_of(self, relative: str) -> str:
        """A data file's full path or URI."""
        return f"{self.uri}/{relative}"

    def open_file(self, relative: str) -> Any:
        """A data file as ``pyarrow.parquet`` takes it: a local path, or an S3 input file."""
        if self._lake.is_s3:
            kept = self._lake.objects.written.get(self.path_of(relative))
            if kept is not None:  # written by this process: no HEAD and GETs
                return pa.BufferReader(kept)
            return self._table_filesystem().open_input_file(relative)
        return self.path_of(relative)

    def _table_filesystem(self) -> Any:
        """A pyarrow filesystem rooted at the table (S3 only; local paths are absolute)."""
        if self._filesystem is None:
            from deltalake.fs import DeltaStorageHandler
            from pyarrow.fs import PyFileSystem

            options = dict(self._lake.storage_options or {})
            self._filesystem = PyFileSystem(DeltaStorageHandler(self.uri, options))
        return self._filesystem

    # -- writing -------------------------------------------------------------------------

    def write_file(
        self,
        rows: pa.Table,
        *,
        data_change: bool = True,
        row_group_rows: int | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Write ``rows`` as a new data file; its add action, to pass to ``commit``.

        A file whose commit fails is deleted by ``commit``; one whose commit
        outcome is unknown stays invisible until vacuum removes it.
        ``data_change=False`` marks a rewrite of rows already in the table (compaction).
        """
        self._check_writable(removes=False)
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        target = self.path_of(name)
        # Into memory, then one write: half the time of letting pyarrow open the
        # file. No dictionaries: payloads are mostly unique, and encoding them
        # costs more than it saves.
        sink = pa.BufferOutputStream()
        pq.write_table(
            rows,
            sink,
            compression="snappy",
            use_dictionary=False,
            row_group_size=row_group_rows,
            write_statistics=_statistics_columns(rows.schema),
        )
        data = sink.getvalue()
        with storage_errors(self.uri):
            self._lake.objects.put(target, data)
        add = {
            "path": name,
            "partitionValues": {},
            "size": data.size,
            "modificationTime": self._modification_time(),
            "dataChange": data_change,
            "stats": orjson.dumps(_stats(rows)).decode(),
        }
        if tags:
            add["tags"] = dict(tags)
        return {"add": add}

    def _modification_time(self) -> int:
        """Now in milliseconds, but after every file this handle wrote before. Delta's
        streaming source (Spark's ``readStream``) reads a table's first snapshot in
        (modificationTime, path) order, and file names are random: two commits in
        one millisecond would be read in either order."""
        self._last_modification_ms = max(_now_ms(), self._last_modification_ms + 1)
        return self._last_modification_ms

    def _discard(self, actions: list[dict[str, Any]]) -> None:
        """Delete the files of the add actions of a commit that failed (best effort:
        vacuum removes what is left)."""
        for action in actions:
            if "add" not in action:
                continue
            try:
                self._lake.objects.delete(self.path_of(action["add"]["path"]))
            except Exception as exc:
                log.debug("could not delete an uncommitted file: %s", exc)

    def remove(self, path: str, *, data_change: bool = True) -> dict[str, Any]:
        """The remove action of a live file, to pass to ``commit``."""
        self._check_writable(removes=True)
        return {
            "remove": {
                "path": path,
                "deletionTimestamp": _now_ms(),
                "dataChange": data_change,
                "extendedFileMetadata": True,
                "partitionValues": {},
                "size": self.files[path].size,
            }
        }

    def commit(
        self,
        actions: list[dict[str, Any]],
        *,
        operation: str,
        parameters: Mapping[str, Any],
        blind_append: bool,
    ) -> int:
        """Commit ``actions`` as the version after the loaded one; return it.

        Raises ``CommitFailedError`` if another writer committed that version
        first: a strict compare-and-swap, as ``max_commit_retries=0``; the
        files the actions add are deleted then. A commit whose answer was lost
        but which landed counts as landed.
        """
        try:
            return self._commit(
                actions, operation=operation, parameters=parameters, blind_append=blind_append
            )
        except CommitFailedError:
            self._discard(actions)
            raise

    def _commit(
        self,
        actions: list[dict[str, Any]],
        *,
        operation: str,
        parameters: Mapping[str, Any],
        blind_append: bool,
    ) -> int:
        version = self.version + 1
        marker = uuid.uuid4().hex
        info = {
            "commitInfo": {
                "timestamp": _now_ms(),
                "operation": operation,
                "operationParameters": dict(parameters),
                "isBlindAppend": blind_append,
                "engineInfo": ENGINE,
                "clientVersion": ENGINE,
                "txnId": marker,
            }
        }
        body = b"\n".join(orjson.dumps(a) for a in (info, *actions)) + b"\n"
        uri = self._commit_uri(version)
        with storage_errors(self.uri):
            landed = self._lake.objects.put_if_absent(uri, body)
            if not landed:
                # A retried PUT whose first attempt landed also finds the name taken.
                existing = self._lake.objects.read(uri)
                landed = existing is not None and marker.encode() in existing
        if not landed:
            raise CommitFailedError(f"{self.uri}: version {version} was taken by another writer")
        self._apply(actions)
        self.version = version
        self._confirmed_at = time.monotonic()
        self._maybe_checkpoint()
        return version

    def commit_rebasing(
        self,
        actions: list[dict[str, Any]],
        *,
        operation: str,
        parameters: Mapping[str, Any],
        attempts: int = constants.REBASE_ATTEMPTS,
    ) -> int:
        """Commit actions that add files and remove files of the loaded version,
        moving past versions other writers take meanwhile.

        Such a commit conflicts only with a writer that removed one of the same
        files (Delta's rule for rewrites: appends do not matter to it), and
        then raises ``CommitFailedError`` (its files deleted). A commit costs about a millisecond,
        so this wins against publishers committing hundreds of times a second,
        where delta-rs's own retry loop (a snapshot reload per attempt) loses.
        """
        removed = {a["remove"]["path"] for a in actions if "remove" in a}
        try:
            for _ in range(attempts):
                try:
                    return self._commit(
                        actions, operation=operation, parameters=parameters, blind_append=False
                    )
                except CommitFailedError:
                    self.tail()
                    if not removed <= self.files.keys():
                        raise
            raise CommitFailedError(f"{self.uri}: {attempts} versions taken by other writers")
        except CommitFailedError:
            self._discard(actions)
            raise

    def committed(self, app_id: str, txn_version: int) -> bool:
        """Whether the commit tagged with app transaction (app_id, txn_version) is in
        the table (after an ambiguous storage error)."""
        table = self._lake.open(self.uri)
        with storage_errors(self.uri):
            landed = table.transaction_version(app_id)
        return landed is not None and landed >= txn_version

    def _check_writable(self, *, removes: bool) -> None:
        if self._refused is not None:
            raise errors.FailedPrecondition(f"{self.uri}: {self._refused}")
        if removes and self._append_only:
            raise errors.FailedPrecondition(f"{self.uri}: the table is append-only")

    def _apply(self, actions: list[dict[str, Any]]) -> None:
        changed = False
        for action in actions:
            if "add" in action:
                add = action["add"]
                path = add["path"]
                changed = changed or path in self.files  # re-added: its entry changes
                self.files[path] = entry = _data_file(add, self._tracked)
                self.added.append(entry)
            elif "remove" in action:
                changed = self.files.pop(action["remove"]["path"], None) is not None or changed
        if changed:
            self.generation += 1
            self.added = list(self.files.values())

    def _maybe_checkpoint(self) -> None:
        now = time.monotonic()
        spacing_s = (
            constants.S3_CHECKPOINT_SPACING_S
            if self._lake.is_s3
            else constants.LOCAL_CHECKPOINT_SPACING_S
        )
        if (
            self.version - self._checkpoint_version >= self._checkpoint_interval
            and now - self._checkpoint_at >= spacing_s
        ):
            self._checkpoint_version, self._checkpoint_at = self.version, now
            _CHECKPOINTS.request(
                self.uri, self.version, self._lake.storage_options, self._lake.objects
            )

    def _commit_uri(self, version: int) -> str:
        return f"{self.uri}/_delta_log/{version:020d}.json"


# -- checkpoints ----------------------------------------------------------------------------


class _Checkpointer:
    """One background thread per process writing checkpoints of the tables committed
    here, and removing expired log files after them.

    It keeps each table's log state (``checkpoints.Replay``) and brings it to the
    requested version by reading the commits since the last checkpoint (on S3 every
    commit file read is a GET), then writes the checkpoint from it. A table whose
    log holds what the replay does not model is checkpointed through a delta-rs
    handle kept the same way instead.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, tuple[int, Mapping[str, str] | None, Objects]] = {}
        self._tables: OrderedDict[str, checkpoints.Replay | DeltaTable] = OrderedDict()
        self._cleaned_at: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._current: str | None = None
        self._stopping = False

    def request(
        self,
        uri: str,
        version: int,
        storage_options: Mapping[str, str] | None,
        objects: Objects,
    ) -> None:
        """Checkpoint ``uri`` at ``version`` (or a later version requested meanwhile)."""
        with self._cond:
            if self._stopping:
                return
            earlier = self._pending.get(uri, (-1, None, objects))[0]
            self._pending[uri] = (max(version, earlier), storage_options, objects)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="checkpoints", daemon=True)
                self._thread.start()
                atexit.register(self.stop)
            self._cond.notify()

    def settle(self, prefix: str = "", *, forget: bool = False) -> None:
        """Wait until no checkpoint of a table under ``prefix`` is pending or being
        written; with ``forget``, drop the pending ones instead of waiting for them
        (the tables are about to be deleted)."""
        deadline = time.monotonic() + constants.CHECKPOINT_EXIT_WAIT_S
        with self._cond:
            if forget:
                for uri in [u for u in self._pending if u.startswith(prefix)]:
                    del self._pending[uri]
                for uri in [u for u in self._tables if u.startswith(prefix)]:
                    del self._tables[uri]
            while (remaining := deadline - time.monotonic()) > 0 and (
                any(u.startswith(prefix) for u in self._pending)
                or (self._current is not None and self._current.startswith(prefix))
            ):
                self._cond.wait(timeout=remaining)

    def stop(self) -> None:
        """Let a checkpoint in progress finish (a thread killed inside delta-rs at
        interpreter exit can crash the process); pending ones are dropped."""
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=constants.CHECKPOINT_EXIT_WAIT_S)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                uri = next(iter(self._pending))
                version, options, objects = self._pending.pop(uri)
                self._current = uri
            try:
                self._checkpoint(uri, version, options, objects)
            except Exception as exc:  # the next request tries again; reads stay correct
                self._tables.pop(uri, None)
                log.info("checkpoint of %s skipped: %s", uri, exc)
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()

    def _checkpoint(
        self, uri: str, version: int, options: Mapping[str, str] | None, objects: Objects
    ) -> None:
        with self._cond:
            kept = self._tables.pop(uri, None)
        if not isinstance(kept, DeltaTable):
            kept = self._replay(kept, uri, version, objects)
        if not isinstance(kept, checkpoints.Replay):
            kept = self._delta_rs_checkpoint(kept, uri, version, options)
        with self._cond:
            self._tables[uri] = kept
            while len(self._tables) > constants.CHECKPOINT_HANDLES:
                self._tables.popitem(last=False)
        now = time.monotonic()
        spacing_s = (
            constants.S3_LOG_CLEANUP_SPACING_S if objects.is_s3 else constants.LOG_CLEANUP_SPACING_S
        )
        if uri not in self._cleaned_at or now - self._cleaned_at[uri] >= spacing_s:
            self._cleaned_at[uri] = now
            if isinstance(kept, checkpoints.Replay):
                # Opens from the checkpoint just written, with no commits to replay.
                kept = DeltaTable(
                    uri, version=version, storage_options=dict(options) if options else None
                )
            kept.cleanup_metadata()

    @staticmethod
    def _replay(
        replay: checkpoints.Replay | None, uri: str, version: int, objects: Objects
    ) -> checkpoints.Replay | None:
        """Bring the kept replay to ``version`` and write its checkpoint; None if the
        log holds what the replay does not model. A kept replay that cannot go on
        (its next commit was cleaned up by another process) starts again from the
        newest checkpoint once."""
        attempts = (replay, None) if replay is not None else (None,)
        for attempt in attempts:
            try:
                current = attempt or checkpoints.Replay(objects, uri)
                current.advance(version)
                current.write()
                return current
            except checkpoints.Unsupported as exc:
                if attempt is None:
                    log.info("checkpoints of %s go through delta-rs: %s", uri, exc)
        return None

    @staticmethod
    def _delta_rs_checkpoint(
        table: DeltaTable | None, uri: str, version: int, options: Mapping[str, str] | None
    ) -> DeltaTable:
        # A pinned version: delta-rs refuses a local log listed while it grows
        # (storage.log_race) only past the version it is asked to load.
        if table is None:
            table = DeltaTable(
                uri, version=version, storage_options=dict(options) if options else None
            )
        elif table.version() < version:
            try:  # reads only the commits since the handle's version
                table.update_incremental()
            except DeltaError as exc:
                if not log_race(exc):
                    raise
                table.load_as_version(version)
        table.create_checkpoint()
        return table


_CHECKPOINTS = _Checkpointer()


def settle_checkpoints(prefix: str = "", *, forget: bool = False) -> None:
    """Wait for this process's background checkpoints of tables under ``prefix``
    (all by default); ``forget`` drops pending ones first (tables being deleted)."""
    _CHECKPOINTS.settle(prefix, forget=forget)


# -- the log's JSON --------------------------------------------------------------------------


def _refusal(protocol: Any, metadata: Any) -> str | None:
    """Why direct writes to this table would be wrong, if they would."""
    if protocol.min_reader_version > 1 or protocol.min_writer_version > 2:
        return (
            f"Delta protocol ({protocol.min_reader_version}, {protocol.min_writer_version}) "
            "has features lakepubsub's writer does not implement"
        )
    if metadata.partition_columns:
        return "partitioned tables are not written directly"
    return None


def _files_of(actions: pa.Table, tracked: frozenset[str]) -> dict[str, DataFile]:
    """Live files from delta-rs's flattened add actions."""
    if actions.num_rows == 0:
        return {}
    columns: dict[str, list[Any]] = {}
    for name in tracked:
        for side in ("min", "max"):
            key = f"{side}.{name}"
            if key in actions.column_names:
                columns[key] = _as_int(actions[key], max_side=side == "max")
    paths = actions["path"].to_pylist()
    sizes = actions["size_bytes"].to_pylist()
    counts = actions["num_records"].to_pylist()
    files = {}
    for i, path in enumerate(paths):
        mins = {n: v[i] for n in tracked if (v := columns.get(f"min.{n}")) and v[i] is not None}
        maxs = {n: v[i] for n in tracked if (v := columns.get(f"max.{n}")) and v[i] is not None}
        files[path] = DataFile(path, int(sizes[i]), int(counts[i] or 0), mins, maxs)
    return files


def _as_int(column: pa.ChunkedArray, *, max_side: bool) -> list[int | None]:
    if pa.types.is_timestamp(column.type):
        values: list[int | None] = (
            column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
        )
        if max_side:  # statistics keep milliseconds: the true maximum may be later
            return [None if v is None else _ceil_ms(v) for v in values]
        return values
    return [None if v is None else int(v) for v in column.to_pylist()]


def _data_file(add: Mapping[str, Any], tracked: frozenset[str]) -> DataFile:
    stats = add.get("stats")
    parsed = orjson.loads(stats) if stats else {}
    mins = _stat_values(parsed.get("minValues") or {}, tracked, max_side=False)
    maxs = _stat_values(parsed.get("maxValues") or {}, tracked, max_side=True)
    return DataFile(
        add["path"],
        int(add.get("size") or 0),
        int(parsed.get("numRecords") or 0),
        mins,
        maxs,
        add.get("tags") or {},
    )


def _stat_values(
    values: Mapping[str, Any], tracked: frozenset[str], *, max_side: bool
) -> dict[str, int]:
    out = {}
    for name in tracked:
        value = values.get(name)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            out[name] = value
        elif isinstance(value, str):
            try:
                stamp = datetime.fromisoformat(value)
            except ValueError:
                continue
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=UTC)
            us = _epoch_us(stamp)
            out[name] = _ceil_ms(us) if max_side else us
    return out


def _epoch_us(stamp: datetime) -> int:
    delta = stamp - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _ceil_ms(us: int) -> int:
    """The last microsecond of ``us``'s millisecond: an upper bound for a truncated maximum."""
    return us - us % _US_PER_MS + _US_PER_MS - 1


@functools.lru_cache(maxsize=64)
def _statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns whose parquet files carry min/max statistics: not binary payloads
    or nested columns, which no reader filters on. A 1 KiB payload's minimum and
    maximum, kept in the page header and the footer, made a one-message file of
    6,262 bytes; without them it has 2,132."""
    return [
        field.name
        for field in schema
        if not (
            pa.types.is_binary(field.type)
            or pa.types.is_large_binary(field.type)
            or pa.types.is_nested(field.type)
        )
    ]


def _stats(rows: pa.Table) -> dict[str, Any]:
    """Delta file statistics: row count, null counts, min/max of simple columns."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field, column in zip(rows.schema, rows.columns, strict=True):
        kind = field.type
        if pa.types.is_nested(kind):
            continue
        nulls[field.name] = column.null_count
        if column.null_count == len(column):
            continue
        if pa.types.is_timestamp(kind):
            if kind.unit == "us":  # the same numbers, without a cast's dispatch
                us = pa.chunked_array([c.view(pa.int64()) for c in column.chunks], pa.int64())
            else:
                us = column.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
            low, high = _min_max(us)
            mins[field.name] = _format_ms(low // _US_PER_MS)
            maxs[field.name] = _format_ms(-(-high // _US_PER_MS))
        elif pa.types.is_integer(kind):
            mins[field.name], maxs[field.name] = _min_max(column)
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            low, high = _min_max(column)
            if len(low) <= MAX_STRING_STAT_CHARS and len(high) <= MAX_STRING_STAT_CHARS:
                mins[field.name], maxs[field.name] = low, high
    return {"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def _min_max(column: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    """The smallest and largest non-null value (the column has one)."""
    if len(column) <= SMALL_STATS_ROWS:
        values = [v for v in column.to_pylist() if v is not None]
        return min(values), max(values)
    result = pc.min_max(column)
    return result["min"].as_py(), result["max"].as_py()


def _format_ms(ms: int) -> str:
    seconds, millis = divmod(ms, _MS_PER_S)
    return f"{datetime.fromtimestamp(seconds, tz=UTC):%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
