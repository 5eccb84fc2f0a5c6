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
checkpoints, deletion vectors, table features, partitions) makes it return None,
and the caller checkpoints through delta-rs instead.

Replay follows the Delta protocol: the newest ``protocol`` and ``metaData`` win;
``add`` and ``remove`` are keyed by path (a remove drops the add and leaves a
tombstone, kept until ``delta.deletedFileRetentionDuration`` passes); ``txn`` keeps
the newest version per application id; ``commitInfo`` is not state.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from lakepubsub._lake.objects import Objects

# delta.deletedFileRetentionDuration when the table does not set it (the protocol's default).
DEFAULT_TOMBSTONE_RETENTION_MS = 7 * 24 * 3600 * 1000

_STR_MAP = pa.map_(pa.string(), pa.string())
_REQUIRED_STR_MAP = pa.map_(pa.field("key", pa.string(), nullable=False), pa.string())
_DELETION_VECTOR = pa.struct(
    [
        pa.field("storageType", pa.string(), nullable=False),
        pa.field("pathOrInlineDv", pa.string(), nullable=False),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32(), nullable=False),
        pa.field("cardinality", pa.int64(), nullable=False),
    ]
)
_FEATURES = pa.list_(pa.field("element", pa.string(), nullable=False))
# The fields ``add`` and ``remove`` share after their own.
_FILE_DETAILS = (
    pa.field("stats", pa.string()),
    pa.field("tags", _REQUIRED_STR_MAP),
    pa.field("deletionVector", _DELETION_VECTOR),
    pa.field("baseRowId", pa.int64()),
    pa.field("defaultRowCommitVersion", pa.int64()),
)

# The columns delta-rs 1.6.6 writes in a checkpoint, in its order and types.
SCHEMA = pa.schema(
    [
        pa.field(
            "add",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("partitionValues", _REQUIRED_STR_MAP, nullable=False),
                    pa.field("size", pa.int64(), nullable=False),
                    pa.field("modificationTime", pa.int64(), nullable=False),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    *_FILE_DETAILS,
                    pa.field("clusteringProvider", pa.string()),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("deletionTimestamp", pa.int64()),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    pa.field("extendedFileMetadata", pa.bool_()),
                    pa.field("partitionValues", _REQUIRED_STR_MAP),
                    pa.field("size", pa.int64()),
                    *_FILE_DETAILS,
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    pa.field("id", pa.string(), nullable=False),
                    pa.field("name", pa.string()),
                    pa.field("description", pa.string()),
                    pa.field(
                        "format",
                        pa.struct(
                            [
                                pa.field("provider", pa.string(), nullable=False),
                                pa.field(
                                    "options",
                                    pa.map_(
                                        pa.field("key", pa.string(), nullable=False),
                                        pa.field("value", pa.string(), nullable=False),
                                    ),
                                    nullable=False,
                                ),
                            ]
                        ),
                        nullable=False,
                    ),
                    pa.field("schemaString", pa.string(), nullable=False),
                    pa.field("partitionColumns", _FEATURES, nullable=False),
                    pa.field("createdTime", pa.int64()),
                    pa.field(
                        "configuration",
                        pa.map_(
                            pa.field("key", pa.string(), nullable=False),
                            pa.field("value", pa.string(), nullable=False),
                        ),
                        nullable=False,
                    ),
                ]
            ),
        ),
        pa.field(
            "protocol",
            pa.struct(
                [
                    pa.field("minReaderVersion", pa.int32(), nullable=False),
                    pa.field("minWriterVersion", pa.int32(), nullable=False),
                    pa.field("readerFeatures", _FEATURES),
                    pa.field("writerFeatures", _FEATURES),
                ]
            ),
        ),
        pa.field(
            "txn",
            pa.struct(
                [
                    pa.field("appId", pa.string(), nullable=False),
                    pa.field("version", pa.int64(), nullable=False),
                    pa.field("lastUpdated", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "domainMetadata",
            pa.struct(
                [
                    pa.field("domain", pa.string(), nullable=False),
                    pa.field("configuration", pa.string(), nullable=False),
                    pa.field("removed", pa.bool_(), nullable=False),
                ]
            ),
        ),
        pa.field(
            "sidecar",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("sizeInBytes", pa.int64(), nullable=False),
                    pa.field("modificationTime", pa.int64(), nullable=False),
                    pa.field("tags", _REQUIRED_STR_MAP),
                ]
            ),
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


@dataclass
class LogState:
    """A table's state at ``version`` as Delta's log replay defines it."""

    version: int = -1
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    adds: dict[str, dict[str, Any]] = field(default_factory=dict)
    removes: dict[str, dict[str, Any]] = field(default_factory=dict)
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
            _check_file(kind, value)
            self.adds[value["path"]] = value
            self.removes.pop(value["path"], None)
        elif kind == "remove":
            _check_file(kind, value)
            self.adds.pop(value["path"], None)
            self.removes[value["path"]] = value
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
        removes = [
            r for r in self.removes.values() if (r.get("deletionTimestamp") or 0) > keep_after
        ]
        columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}

        def row(kind: str, value: dict[str, Any]) -> None:
            for name, values in columns.items():
                values.append(value if name == kind else None)

        row("protocol", self.protocol)
        row("metaData", _metadata_row(self.metadata))
        for txn in self.txns.values():
            row("txn", txn)
        for add in self.adds.values():
            row("add", _file_row(add))
        for remove in removes:
            row("remove", _file_row(remove))
        return pa.table([pa.array(columns[f.name], f.type) for f in SCHEMA], schema=SCHEMA)


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


def _file_row(action: dict[str, Any]) -> dict[str, Any]:
    return {**action, "partitionValues": action.get("partitionValues") or {}}


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
    for kind in ("protocol", "metaData", "txn", "add", "remove"):
        if kind not in names:
            continue
        for value in table[kind].to_pylist():
            if value is not None:
                state.take(kind, _as_json(value))
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

    def advance(self, version: int) -> None:
        """Apply the commits up to ``version``."""
        while self.state.version < version:
            body = self._objects.read(f"{self._log}/{self.state.version + 1:020d}.json")
            if body is None:
                raise Unsupported(f"commit {self.state.version + 1} is gone")
            self.state.apply([orjson.loads(line) for line in body.splitlines() if line.strip()])

    def write(self) -> None:
        """Write the checkpoint of the state's version, then point ``_last_checkpoint`` at it."""
        state = self.state
        rows = state.rows(time.time_ns() // 1_000_000)
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
            "numOfAddFiles": len(state.adds),
        }
        self._objects.replace(f"{self._log}/_last_checkpoint", orjson.dumps(pointer))
