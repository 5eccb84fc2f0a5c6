"""Delta checkpoints of the tables the direct log commits to, written from a replay of
the log that is kept up to date commit by commit.

Why by hand: delta-rs (``deltalake`` 1.6.6) writes a correct checkpoint, but it must
first rebuild the table's snapshot from the JSON commits since the last checkpoint,
and its checkpoint of a snapshot built that way costs about as much again. Measured
here (one 1-row commit per version, local tmpfs): bringing a handle forward took
0.3 ms of CPU per commit and ``create_checkpoint`` 0.4 ms more, against 0.5 ms for
the commit itself, so checkpoints took more CPU than publishing; a server at 200
single-message publishes and deliveries a second spent a third of a core in them.
This module applies each commit's actions to a kept state (a dictionary update per
action) and writes that state in the layout delta-rs writes, which delta-rs and
delta-spark read (``tests/spark/test_delta_conformance.py`` checks every checkpoint
lakepubsub writes). Anything it does not model (a checkpoint in parts, V2
checkpoints, deletion vectors, table features, partitions) raises ``Unsupported``,
and the caller checkpoints through delta-rs instead.

Replay follows the Delta protocol: the newest ``protocol`` and ``metaData`` win;
``add`` and ``remove`` are keyed by path (a remove drops the add and leaves a
tombstone, kept until ``delta.deletedFileRetentionDuration`` passes); ``txn`` keeps
the newest version per application id; ``commitInfo`` is not state.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakepubsub._lake.objects import Objects

# A table's kept files are merged into one arrow array past this many pieces.
MAX_CHUNKS = 64
# delta.deletedFileRetentionDuration when the table does not set it (the protocol's default).
DEFAULT_TOMBSTONE_RETENTION_MS = 7 * 24 * 3600 * 1000


def _required(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


def _struct(name: str, *fields: pa.Field) -> pa.Field:
    return pa.field(name, pa.struct(fields))


_STR_MAP = pa.map_(pa.string(), pa.string())
# A map whose values may not be null either (format options, configuration).
_STRICT_STR_MAP = pa.map_(pa.string(), _required("value", pa.string()))
_DELETION_VECTOR = pa.struct(
    [
        _required("storageType", pa.string()),
        _required("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        _required("sizeInBytes", pa.int32()),
        _required("cardinality", pa.int64()),
    ]
)
_FEATURES = pa.list_(_required("element", pa.string()))
# The fields ``add`` and ``remove`` share after their own.
_FILE_DETAILS = (
    pa.field("stats", pa.string()),
    pa.field("tags", _STR_MAP),
    pa.field("deletionVector", _DELETION_VECTOR),
    pa.field("baseRowId", pa.int64()),
    pa.field("defaultRowCommitVersion", pa.int64()),
)

# The columns delta-rs 1.6.6 writes in a checkpoint, in its order and types: one
# struct per action.
SCHEMA = pa.schema(
    [
        _struct(
            "add",
            _required("path", pa.string()),
            _required("partitionValues", _STR_MAP),
            _required("size", pa.int64()),
            _required("modificationTime", pa.int64()),
            _required("dataChange", pa.bool_()),
            *_FILE_DETAILS,
            pa.field("clusteringProvider", pa.string()),
        ),
        _struct(
            "remove",
            _required("path", pa.string()),
            pa.field("deletionTimestamp", pa.int64()),
            _required("dataChange", pa.bool_()),
            pa.field("extendedFileMetadata", pa.bool_()),
            pa.field("partitionValues", _STR_MAP),
            pa.field("size", pa.int64()),
            *_FILE_DETAILS,
        ),
        _struct(
            "metaData",
            _required("id", pa.string()),
            pa.field("name", pa.string()),
            pa.field("description", pa.string()),
            pa.field(
                "format",
                pa.struct(
                    [_required("provider", pa.string()), _required("options", _STRICT_STR_MAP)]
                ),
                nullable=False,
            ),
            _required("schemaString", pa.string()),
            _required("partitionColumns", _FEATURES),
            pa.field("createdTime", pa.int64()),
            _required("configuration", _STRICT_STR_MAP),
        ),
        _struct(
            "protocol",
            _required("minReaderVersion", pa.int32()),
            _required("minWriterVersion", pa.int32()),
            pa.field("readerFeatures", _FEATURES),
            pa.field("writerFeatures", _FEATURES),
        ),
        _struct(
            "txn",
            _required("appId", pa.string()),
            _required("version", pa.int64()),
            pa.field("lastUpdated", pa.int64()),
        ),
        _struct(
            "domainMetadata",
            _required("domain", pa.string()),
            _required("configuration", pa.string()),
            _required("removed", pa.bool_()),
        ),
        _struct(
            "sidecar",
            _required("path", pa.string()),
            _required("sizeInBytes", pa.int64()),
            _required("modificationTime", pa.int64()),
            pa.field("tags", _STR_MAP),
        ),
    ]
)

_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(\w+?)s?\s*$", re.IGNORECASE)
_UNIT_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


class Unsupported(Exception):
    """The log holds something this replay does not model: use delta-rs."""


class Files:
    """``add`` or ``remove`` actions keyed by path: the ones the last checkpoint held,
    as an arrow array, and the changes since as dictionaries. A checkpoint turns
    only the new actions into arrow (about 4 µs each in Python) and filters the
    rest in C, so its cost under the GIL grows with the commits since the last
    checkpoint, not with the table (a lease table removes a file on every commit)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.type: pa.StructType = SCHEMA.field(kind).type
        self._written = pa.chunked_array([], self.type)
        self._pending: dict[str, dict[str, Any]] = {}
        self._dropped: set[str] = set()  # paths to leave out of ``_written``

    def put(self, action: dict[str, Any]) -> None:
        _check_file(self.kind, action)
        self._pending[action["path"]] = action
        self._dropped.add(action["path"])

    def drop(self, path: str) -> None:
        self._pending.pop(path, None)
        self._dropped.add(path)

    def load(self, actions: pa.Array) -> None:
        """Start from a checkpoint's actions (non-null rows of its column)."""
        if actions.type != self.type:  # another writer's layout: through dictionaries
            for value in actions.to_pylist():
                self.put(_as_json(value))
            return
        if actions.field("deletionVector").null_count != len(actions):
            raise Unsupported("deletion vectors")
        offsets = actions.field("partitionValues").offsets  # entries: last minus first
        if len(actions) and offsets[-1].as_py() - offsets[0].as_py() > 0:
            raise Unsupported("partition values")
        self._written = pa.chunked_array([*self._written.chunks, actions], self.type)

    def fold(self, at_least: int) -> None:
        """Turn the actions changed since into arrow once there are ``at_least``, so a
        checkpoint converts few at a time (each conversion holds the interpreter lock)."""
        if len(self._pending) >= at_least:
            self.array()

    def array(
        self, keep: Callable[[pa.ChunkedArray], pa.ChunkedArray] | None = None
    ) -> pa.ChunkedArray:
        """Every action, in chunks; ``keep``, a filter on them (kept from then on).
        Rows are copied only where some are left out."""
        written = self._written
        if self._dropped and len(written):
            paths = pa.chunked_array([c.field("path") for c in written.chunks], pa.string())
            gone = pc.is_in(paths, pa.array(list(self._dropped), pa.string()))
            if pc.any(gone).as_py():
                written = written.filter(pc.invert(gone))
        if self._pending:
            fresh = [
                {**a, "partitionValues": a.get("partitionValues") or {}}
                for a in self._pending.values()
            ]
            written = pa.chunked_array([*written.chunks, pa.array(fresh, self.type)], self.type)
        if keep is not None and len(written):
            kept = keep(written)
            if not pc.all(kept).as_py():
                written = written.filter(kept)
        if written.num_chunks > MAX_CHUNKS:
            written = pa.chunked_array([pa.concat_arrays(written.chunks)], self.type)
        self._written = written
        self._pending.clear()
        self._dropped.clear()
        return written


@dataclass
class LogState:
    """A table's state at ``version`` as Delta's log replay defines it."""

    version: int = -1
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    adds: Files = field(default_factory=lambda: Files("add"))
    removes: Files = field(default_factory=lambda: Files("remove"))
    txns: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, actions: list[dict[str, Any]]) -> None:
        """Apply one commit's actions (the next version)."""
        for action in actions:
            if "commitInfo" in action or "cdc" in action:
                continue
            if len(action) != 1:
                raise Unsupported(f"an action of kinds {sorted(action)}")
            ((kind, value),) = action.items()
            self.take(kind, value)
        self.version += 1

    def take(self, kind: str, value: dict[str, Any]) -> None:
        """Apply one action of ``kind``."""
        if kind == "add":
            self.adds.put(value)
            self.removes.drop(value["path"])
        elif kind == "remove":
            self.removes.put(value)
            self.adds.drop(value["path"])
        elif kind == "txn":
            self.txns[value["appId"]] = value
        elif kind == "metaData":
            if value.get("partitionColumns"):
                raise Unsupported("a partitioned table")
            self.metadata = {k: v for k, v in value.items() if v is not None}
        elif kind == "protocol":
            if value.get("readerFeatures") or value.get("writerFeatures"):
                raise Unsupported("table features")
            self.protocol = {k: v for k, v in value.items() if v is not None}
        else:
            raise Unsupported(f"an action of kind {kind}")

    def rows(self, now_ms: int) -> pa.Table:
        """The checkpoint's rows: protocol, metadata, transactions, live files and
        the tombstones still within their retention."""
        if self.protocol is None or self.metadata is None:
            raise Unsupported("no protocol or metadata")
        configuration = self.metadata.get("configuration") or {}
        keep_after = now_ms - _retention_ms(
            configuration.get("delta.deletedFileRetentionDuration"),
            DEFAULT_TOMBSTONE_RETENTION_MS,
        )
        adds = self.adds.array()
        removes = self.removes.array(
            lambda r: pc.greater(
                pa.chunked_array([c.field("deletionTimestamp") for c in r.chunks], pa.int64()),
                pa.scalar(keep_after, pa.int64()),
            ).fill_null(False)  # no deletion time: expired
        )
        small = [("protocol", self.protocol), ("metaData", _metadata_row(self.metadata))]
        small += [("txn", txn) for txn in self.txns.values()]
        columns = []
        for f in SCHEMA:
            chunks = [pa.array([v if kind == f.name else None for kind, v in small], f.type)]
            for files, array in ((self.adds, adds), (self.removes, removes)):
                chunks += array.chunks if f.name == files.kind else [_nulls(len(array), f.type)]
            columns.append(pa.chunked_array(chunks, f.type))
        return pa.table(columns, schema=SCHEMA)


def _nulls(n: int, kind: pa.DataType) -> pa.Array:
    """``n`` null rows of ``kind``. Not ``pa.nulls``: its rows have null children,
    and parquet refuses a null in a required child even under a null row. One null
    row made from Python, repeated in C."""
    return pc.take(pa.array([None], kind), pa.nulls(n, pa.int32()).fill_null(0))


_REQUIRED = {
    "add": ("path", "size", "modificationTime", "dataChange"),
    "remove": ("path", "dataChange"),
}


def _check_file(kind: str, action: dict[str, Any]) -> None:
    if action.get("deletionVector") or action.get("partitionValues"):
        raise Unsupported("deletion vectors or partition values")
    if any(action.get(name) is None for name in _REQUIRED[kind]):
        raise Unsupported(f"an {kind} action without {_REQUIRED[kind]}")


def _metadata_row(metadata: dict[str, Any]) -> dict[str, Any]:
    row = dict(metadata)
    row["format"] = {
        "provider": (metadata.get("format") or {}).get("provider", "parquet"),
        "options": (metadata.get("format") or {}).get("options") or {},
    }
    row["partitionColumns"] = metadata.get("partitionColumns") or []
    row["configuration"] = metadata.get("configuration") or {}
    return row


def _retention_ms(value: str | None, default_ms: int) -> int:
    if not value:
        return default_ms
    found = _INTERVAL.match(value)
    if found is None or found.group(2).lower() not in _UNIT_MS:
        raise Unsupported(f"a retention of {value!r}")
    return int(found.group(1)) * _UNIT_MS[found.group(2).lower()]


def _from_checkpoint(table: pa.Table, version: int) -> LogState:
    """The state a single-part checkpoint of ``version`` holds."""
    state = LogState(version=version)
    names = set(table.column_names)
    for kind in ("sidecar", "domainMetadata"):
        if kind in names and table[kind].null_count != table.num_rows:
            raise Unsupported(f"{kind} actions")
    for kind in ("protocol", "metaData", "txn"):
        if kind in names:
            for value in table[kind].to_pylist():
                if value is not None:
                    state.take(kind, _as_json(value))
    for files in (state.adds, state.removes):
        if files.kind in names:
            column = table[files.kind].combine_chunks()
            files.load(column.filter(column.is_valid()))
    return state


# The map-typed fields of actions: pyarrow reads a map as a list of (key, value)
# pairs, where an action's JSON holds an object.
_MAPS = frozenset(("partitionValues", "tags", "configuration", "options"))


def _as_json(value: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint row's action as its JSON form: maps as objects, no null fields."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None:
            continue
        if key in _MAPS:
            out[key] = dict(item)
        elif isinstance(item, dict):
            out[key] = _as_json(item)
        else:
            out[key] = item
    return out


def parse_commit(body: bytes) -> list[dict[str, Any]]:
    """The actions of a commit file (JSON lines)."""
    return [orjson.loads(line) for line in body.splitlines() if line.strip()]


class Replay:
    """A table's log state, brought forward by reading its commit files."""

    def __init__(self, objects: Objects, uri: str) -> None:
        self._objects = objects
        self._log = f"{uri}/_delta_log"
        self.state = self._start()

    def _start(self) -> LogState:
        pointer = self._objects.read(f"{self._log}/_last_checkpoint")
        if pointer is None:
            return LogState()
        info = orjson.loads(pointer)
        if info.get("parts") or info.get("v2Checkpoint"):
            raise Unsupported("a checkpoint in parts or a V2 checkpoint")
        version = int(info["version"])
        data = self._objects.read(f"{self._log}/{version:020d}.checkpoint.parquet")
        if data is None:
            raise Unsupported("the last checkpoint is missing")
        return _from_checkpoint(pq.read_table(pa.BufferReader(data)), version)

    def advance(self, version: int, known: Mapping[int, bytes] | None = None) -> None:
        """Apply the commits up to ``version``; ``known``: commit files this process
        already holds (its own commits, as it wrote them), by version, read from
        storage only where missing."""
        while self.state.version < version:
            following = self.state.version + 1
            body = known.get(following) if known else None
            if body is None:
                body = self._objects.read(f"{self._log}/{following:020d}.json")
            if body is None:
                raise Unsupported(f"commit {following} is gone")
            self.state.apply(parse_commit(body))

    def write(self, *, now_ms: int | None = None) -> None:
        """Write the checkpoint of the state's version, then point ``_last_checkpoint`` at
        it. Tombstones are kept by their retention as of ``now_ms`` (default: now)."""
        state = self.state
        rows = state.rows(time.time_ns() // 1_000_000 if now_ms is None else now_ms)
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink, compression="snappy")
        data = sink.getvalue()
        self._objects.replace(f"{self._log}/{state.version:020d}.checkpoint.parquet", data)
        current = self._objects.read(f"{self._log}/_last_checkpoint")
        if current is not None and int(orjson.loads(current).get("version", -1)) >= state.version:
            return  # another process pointed it at a newer one meanwhile
        pointer = {
            "version": state.version,
            "size": rows.num_rows,
            "sizeInBytes": data.size,
            "numOfAddFiles": rows.num_rows - rows["add"].null_count,
        }
        self._objects.replace(f"{self._log}/_last_checkpoint", orjson.dumps(pointer))
