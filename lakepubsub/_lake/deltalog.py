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
are written off the hot path by a background thread (``checkpointer.py``) from
a kept replay of the log (``checkpoints.py``; delta-rs for what it does not
model), and log cleanup is delegated to delta-rs. The add actions' files and
statistics are read and written by ``actions.py``.
"""

from __future__ import annotations

import base64
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.exceptions import CommitFailedError

from lakepubsub import constants, errors
from lakepubsub._lake import checkpointer, checkpoints, direct
from lakepubsub._lake.actions import (
    DataFile,
    Operation,
    add_action,
    commit_body,
    data_file,
    files_of,
    metadata_action,
    now_ms,
    parquet_file,
    refusal,
    remove_action,
)
from lakepubsub._lake.storage import Lake, storage_errors

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

# The commitInfo field of a commit that carries its new data file's bytes (``NewFile``).
FILE_FIELD = "lakepubsub.file"
# A data file named for the version its commit takes (``new_file(version=...)``).
_VERSIONED = re.compile(r"-v(\d+)\.snappy\.parquet$")


@dataclass(frozen=True)
class NewFile:
    """A data file built but not necessarily written yet: its name in the table, its
    bytes and its add action."""

    name: str
    data: pa.Buffer
    add: dict[str, Any]

    def record(self) -> dict[str, Any]:
        """The commitInfo field that makes the commit the file's durable record: a
        reader that finds the file missing writes it again from there."""
        encoded = base64.b64encode(memoryview(self.data).cast("B")).decode("ascii")
        return {FILE_FIELD: {"path": self.name, "parquet": encoded}}


class LogView:
    """One owner's view of one Delta table: its version, live files, and commits
    (``TableLog`` writes them).

    Not thread-safe: one thread (a publisher, a dispatcher) owns an instance.
    ``generation`` changes whenever files were removed or replaced or the view
    reloaded, so an index built on ``added`` knows when appending is not enough.
    """

    def __init__(
        self,
        lake: Lake,
        uri: str,
        *,
        tracked: Iterable[str] = (),
        payloads: bool = False,
        opened: DeltaTable | None = None,
    ) -> None:
        self.uri = uri
        # With ``payloads``, tailing keeps the bytes of files whose commits carry them
        # (``NewFile.record``), by path, until the owner takes them.
        self.payloads: dict[str, bytes] | None = {} if payloads else None
        self._lake = lake
        self._tracked = frozenset(tracked)
        self.version = -1
        self.files: dict[str, DataFile] = {}
        # The live files in the order they were added, while ``generation`` holds
        # (none removed): readers index the new ones by position, where skipping
        # to them in ``files`` costs a step per older file, every commit.
        self.added: list[DataFile] = []
        self.generation = 0
        self._checkpoint_interval = int(constants.CHECKPOINT_INTERVAL)
        self._checkpoint_version = -1
        self._checkpoint_at = 0.0
        self._refused: str | None = None
        self._append_only = False
        self._metadata: Any = None  # delta-rs's, and the schema, as of the last load
        self._schema: Any = None
        self._confirmed_at = 0.0
        self._last_modification_ms = 0
        self.load(opened)

    # -- reading -------------------------------------------------------------------------

    def load(self, opened: DeltaTable | None = None) -> None:
        """Read the latest snapshot through delta-rs (checkpoint plus commits), or
        take it from ``opened``, a handle on the table just made or opened."""
        table = opened if opened is not None else self._lake.open(self.uri)
        with storage_errors(self.uri):
            version = table.version()
            actions = pa.table(table.get_add_actions(flatten=True))
            protocol = table.protocol()
            metadata = table.metadata()
            self._schema = table.schema()
        self._metadata = metadata
        self.files = files_of(actions, self._tracked)
        self.added = list(self.files.values())
        self.version = version
        self.generation += 1
        self._confirmed_at = time.monotonic()
        interval = metadata.configuration.get("delta.checkpointInterval")
        self._checkpoint_interval = int(interval or constants.CHECKPOINT_INTERVAL)
        self._refused = refusal(protocol, metadata)
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
            if self.payloads is not None:
                self.payloads.update(_payloads(actions))
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

    def parquet(self, relative: str) -> pq.ParquetFile:
        """A data file opened for ``pyarrow.parquet`` to read: a large local file read
        whole past the page cache, as it was written (``direct``), a small one mapped
        into memory; on S3 the file read through obstore with the size its add action gives
        (``Objects.open_read``).

        Pre-buffering (pyarrow's default) only for a large S3 file read by ranges,
        where it joins a row group's column chunks into one GET. Elsewhere it hands
        every read to pyarrow's I/O threads for nothing: about 250 µs of the 690 a
        1,000-message file of 1 KiB took to open and decode, and mapping the file
        saves 45 µs more. In a drain of 1,000,000 such messages the server
        spent 0.23 µs a message less (``bench/results/ab-parquet-open.md``)."""
        entry = self.files.get(relative)
        size = entry.size if entry is not None else None
        if not self._lake.is_s3:
            path = self.path_of(relative)
            large = size is None or size >= direct.DIRECT_MIN_BYTES
            whole = direct.read(path) if large and self._lake.objects.direct else None
            if whole is not None:
                return pq.ParquetFile(pa.BufferReader(whole), pre_buffer=False)
            return pq.ParquetFile(pa.memory_map(path), pre_buffer=False)
        source = self._lake.objects.open_read(self.path_of(relative), size)
        return pq.ParquetFile(source, pre_buffer=isinstance(source, pa.PythonFile))

    def _apply(self, actions: list[dict[str, Any]]) -> None:
        changed = False
        for action in actions:
            if "add" in action:
                add = action["add"]
                path = add["path"]
                changed = changed or path in self.files  # re-added: its entry changes
                self.files[path] = entry = data_file(add, self._tracked)
                self.added.append(entry)
            elif "remove" in action:
                changed = self.files.pop(action["remove"]["path"], None) is not None or changed
        if changed:
            self.generation += 1
            self.added = list(self.files.values())

    def _commit_uri(self, version: int) -> str:
        return f"{self.uri}/_delta_log/{version:020d}.json"


class TableLog(LogView):
    """A ``LogView`` that also commits: data files, their add and remove actions,
    compare-and-swap commits, and checkpoints in the background."""

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
        new = self.new_file(rows, data_change=data_change, row_group_rows=row_group_rows, tags=tags)
        self.put_file(new)
        return new.add

    def new_file(
        self,
        rows: pa.Table,
        *,
        data_change: bool = True,
        row_group_rows: int | None = None,
        tags: Mapping[str, str] | None = None,
        version: int | None = None,
    ) -> NewFile:
        """Build ``rows`` as a new data file without writing it (``put_file``). With
        ``version``, the version its commit is to take is in its name, where a reader
        that finds it missing looks for its record (``restore_file``)."""
        self._check_writable(removes=False)
        stem = f"part-00000-{uuid.uuid4()}-c000"
        name = f"{stem}.snappy.parquet" if version is None else f"{stem}-v{version}.snappy.parquet"
        data = parquet_file(rows, row_group_rows=row_group_rows)
        add = add_action(
            name,
            rows,
            size=data.size,
            modification_ms=self._modification_time(),
            data_change=data_change,
            tags=tags,
        )
        return NewFile(name, data, add)

    def put_file(self, new: NewFile) -> None:
        """Write a file ``new_file`` built (from any thread: it changes nothing of the
        log's state)."""
        with storage_errors(self.uri):
            self._lake.objects.put(self.path_of(new.name), new.data)

    def restore_file(self, path: str) -> bool:
        """Write a missing data file again from the record its commit carries
        (``NewFile.record``); False if it has none. The bytes are the ones the writer
        wrote or meant to write, so a writer's PUT landing as well changes nothing."""
        match = _VERSIONED.search(path)
        if match is None:
            return False
        with storage_errors(self.uri):
            body = self._lake.objects.read(self._commit_uri(int(match.group(1))))
        data = None if body is None else _payloads(checkpoints.parse_commit(body)).get(path)
        if data is None:
            return False
        log.warning("%s: data file %s was missing; written again from its commit", self.uri, path)
        with storage_errors(self.uri):
            self._lake.objects.put(self.path_of(path), data)
        return True

    def _modification_time(self) -> int:
        """Now in milliseconds, but after every file this handle wrote before. Delta's
        streaming source (Spark's ``readStream``) reads a table's first snapshot in
        (modificationTime, path) order, and file names are random: two commits in
        one millisecond would be read in either order."""
        self._last_modification_ms = max(now_ms(), self._last_modification_ms + 1)
        return self._last_modification_ms

    def discard(self, actions: list[dict[str, Any]]) -> None:
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
        return remove_action(path, size=self.files[path].size, data_change=data_change)

    def commit(
        self,
        actions: list[dict[str, Any]],
        *,
        operation: str,
        parameters: Mapping[str, Any],
        blind_append: bool,
        extra: Mapping[str, Any] | None = None,
        discard: bool = True,
    ) -> int:
        """Commit ``actions`` as the version after the loaded one; return it.

        Raises ``CommitFailedError`` if another writer committed that version
        first: a strict compare-and-swap, as ``max_commit_retries=0``; the
        files the actions add are deleted then, unless ``discard`` is false (a
        caller whose file may still be on its way deletes it once it landed).
        A commit whose answer was lost but which landed counts as landed.
        ``extra``: more commitInfo fields.
        """
        try:
            return self._commit(actions, Operation(operation, parameters, blind_append), extra)
        except CommitFailedError:
            if discard:
                self.discard(actions)
            raise

    def _commit(
        self,
        actions: list[dict[str, Any]],
        operation: Operation,
        extra: Mapping[str, Any] | None = None,
    ) -> int:
        version = self.version + 1
        marker = uuid.uuid4().hex
        body = commit_body(actions, operation, marker=marker, extra=extra)
        uri = self._commit_uri(version)
        with storage_errors(self.uri):
            landed = self._lake.objects.put_if_absent(uri, body)
            if not landed:
                # A retried PUT whose first attempt landed also finds the name taken.
                existing = self._lake.objects.read(uri)
                landed = existing is not None and marker.encode() in existing
        if not landed:
            raise CommitFailedError(f"{self.uri}: version {version} was taken by another writer")
        checkpointer.committed(self.uri, version, body)
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
        rewrite = Operation(operation, parameters, blind_append=False)
        try:
            for _ in range(attempts):
                try:
                    return self._commit(actions, rewrite)
                except CommitFailedError:
                    self.tail()
                    if not removed <= self.files.keys():
                        raise
            raise CommitFailedError(f"{self.uri}: {attempts} versions taken by other writers")
        except CommitFailedError:
            self.discard(actions)
            raise

    def set_properties(self, properties: Mapping[str, str]) -> bool:
        """Set table properties with a metaData commit; False if they hold already.

        A property change reads no data, so by Delta's conflict rules commits that
        only add or remove files do not conflict with it, and it moves past them
        as ``commit_rebasing`` does. delta-rs's ``alter.set_table_properties``
        reloads the snapshot before each attempt and lost every one (30 s of
        them) to a subscription's lease table taking a commit every few
        milliseconds on a loaded machine. A commit that changes the metadata or
        protocol meanwhile reloads the view (``tail``), and the properties are
        set again on top of it.
        """
        self._check_writable(removes=False)
        wanted = dict(properties)
        for _ in range(constants.REBASE_ATTEMPTS):
            configuration = dict(self._metadata.configuration)
            if all(configuration.get(key) == value for key, value in wanted.items()):
                return False
            action = metadata_action(
                self._metadata, self._schema.to_json(), {**configuration, **wanted}
            )
            change = Operation(
                "SET TBLPROPERTIES", {"properties": orjson.dumps(wanted).decode()}, False
            )
            try:
                self._commit([action], change)
            except CommitFailedError:
                self.tail()
                continue
            self.load()  # the new properties (checkpoint interval, append-only) apply
            return True
        raise CommitFailedError(
            f"{self.uri}: {constants.REBASE_ATTEMPTS} versions taken by other writers"
        )

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
            checkpointer.request(
                self.uri, self.version, self._lake.storage_options, self._lake.objects
            )


def _payloads(actions: list[dict[str, Any]]) -> dict[str, bytes]:
    """The data file bytes a commit carries in its commitInfo, by path."""
    found = {}
    for action in actions:
        record = action.get("commitInfo", {}).get(FILE_FIELD)
        if record is not None:
            found[record["path"]] = base64.b64decode(record["parquet"])
    return found
