"""The log's JSON: the live data files, read from add actions or from delta-rs's
flattened ones; the data files written, their statistics, and the actions and
commit bodies that name them."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakepubsub._lake import direct

# Delta truncates string statistics; longer values get no min/max (still correct).
MAX_STRING_STAT_CHARS = 32
# Up to this many rows, a column's min/max is taken in Python: pyarrow.compute's
# dispatch costs about 5 us a call, more than the work for a few values, and most
# files of single publishes and every lease table's cursor file hold one row. (The
# results are the same: integers compare as numbers, strings by code point, which
# is UTF-8 byte order.)
SMALL_STATS_ROWS = 64
# The Delta protocol versions this writer implements (no table features).
MAX_READER_VERSION = 1
MAX_WRITER_VERSION = 2
_MS_PER_S = 1000
_US_PER_MS = 1000
# The commitInfo's engineInfo and clientVersion of the commits written here.
ENGINE = "lakepubsub"


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


@dataclass(frozen=True, slots=True)
class Operation:
    """What a commit says it did, in its commitInfo."""

    name: str
    parameters: Mapping[str, Any]
    blind_append: bool


def refusal(protocol: Any, metadata: Any) -> str | None:
    """Why direct writes to this table would be wrong, if they would."""
    if (
        protocol.min_reader_version > MAX_READER_VERSION
        or protocol.min_writer_version > MAX_WRITER_VERSION
    ):
        return (
            f"Delta protocol ({protocol.min_reader_version}, {protocol.min_writer_version}) "
            "has features lakepubsub's writer does not implement"
        )
    if metadata.partition_columns:
        return "partitioned tables are not written directly"
    return None


def files_of(actions: pa.Table, tracked: frozenset[str]) -> dict[str, DataFile]:
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
            return [None if v is None else ceil_ms(v) for v in values]
        return values
    return [None if v is None else int(v) for v in column.to_pylist()]


def data_file(add: Mapping[str, Any], tracked: frozenset[str]) -> DataFile:
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
            out[name] = ceil_ms(us) if max_side else us
    return out


def _epoch_us(stamp: datetime) -> int:
    delta = stamp - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def ceil_ms(us: int) -> int:
    """The last microsecond of ``us``'s millisecond: an upper bound for a truncated maximum."""
    return us - us % _US_PER_MS + _US_PER_MS - 1


@functools.lru_cache(maxsize=64)
def statistics_columns(schema: pa.Schema) -> list[str]:
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


def stats(rows: pa.Table) -> dict[str, Any]:
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
    # time.gmtime, not datetime.fromtimestamp(tz=UTC): the same text in a quarter of the time.
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parquet_file(rows: pa.Table, *, row_group_rows: int | None) -> pa.Buffer:
    """``rows`` as the bytes of a new data file."""
    # Into memory, then one write: half the time of letting pyarrow open the
    # file. No dictionaries: payloads are mostly unique, and encoding them
    # costs more than it saves.
    size = rows.get_total_buffer_size()
    if size >= direct.DIRECT_MIN_BYTES:
        aligned = _into_aligned(rows, row_group_rows, size)
        if aligned is not None:
            return aligned
    sink = pa.BufferOutputStream()
    _write(rows, sink, row_group_rows)
    return sink.getvalue()


def _into_aligned(rows: pa.Table, row_group_rows: int | None, size: int) -> pa.Buffer | None:
    """A large file written straight into memory aligned for ``direct`` writes, with
    room for its rows' buffers and a fifth more (None: it did not fit). A growing
    stream moved it several times, and its bytes were then copied once more
    to be aligned."""
    room = size + size // 5 + _PARQUET_SLACK_BYTES
    window = pa.py_buffer(direct.aligned_memory(room))
    sink = pa.FixedSizeBufferWriter(window)
    try:
        _write(rows, sink, row_group_rows)
    except OSError:  # "Write out of bounds"
        return None
    return window.slice(0, sink.tell())


# Room beyond a file's rows for its page headers, statistics and footer.
_PARQUET_SLACK_BYTES = 256 * 1024


# pyarrow hands its column writers this many rows at a time unless told otherwise.
_WRITE_BATCH_ROWS = 1024


def _write(rows: pa.Table, sink: pa.NativeFile, row_group_rows: int | None) -> None:
    # The writer itself, not pq.write_table: that resolves a filesystem and checks its
    # arguments first, a fifth of the time of writing a one-message file.
    # A row group's rows go to the column writers as one batch, not 1,024 at a time
    # (pyarrow checks a page's size only between batches, so each column chunk is
    # then one page; a file is one commit's rows, at most 64 MiB). Writing 7,400
    # messages of 1 KiB took 0.30 µs a message instead of 0.37, 100-byte messages
    # 0.089 instead of 0.105, 16 KiB ones 4.4 instead of 4.75.
    batch = rows.num_rows if row_group_rows is None else min(row_group_rows, rows.num_rows)
    with pq.ParquetWriter(
        sink,
        rows.schema,
        compression=_compression(rows),
        use_dictionary=False,
        write_statistics=statistics_columns(rows.schema),
        write_batch_size=max(_WRITE_BATCH_ROWS, batch),
    ) as writer:
        writer.write_table(rows, row_group_size=row_group_rows)


# The payload column of the messages and intake tables.
PAYLOADS = "data"
# How much of the payloads is tried (from their middle), and the share of its size
# they must shrink to for snappy to be worth it.
_SAMPLE_BYTES = 16 * 1024
_WORTH = 0.9


def _compression(rows: pa.Table) -> str | dict[str, str]:
    """Snappy for every column, but for payloads that do not compress (encrypted,
    already compressed, random), which are written as they are: compressing them
    gained nothing and cost about 0.12 µs a message of 1 KiB to write and as much
    to read. With Google's Go client and such payloads, a gRPC drain of 1,000,000
    messages spent 0.27 µs a message less of the server's CPU, their batched
    publish 0.35 (medians of four pairs, ``bench/results/ab-incompressible-drain.md``
    and ``ab-incompressible-publish.md``). A 16 KiB sample (2 µs) decides, for a
    file at a time."""
    if PAYLOADS not in rows.column_names or _compresses(rows.column(PAYLOADS)):
        return "snappy"
    return {path: "none" if path == PAYLOADS else "snappy" for path in _column_paths(rows.schema)}


def _compresses(column: pa.ChunkedArray) -> bool:
    """Whether a sample of the column's bytes shrinks to ``_WORTH`` with snappy (a
    small sample is not tried: compressed as any column)."""
    chunk = max(column.chunks, key=len, default=None)
    values = None if chunk is None else chunk.buffers()[2]
    if values is None or values.size < _SAMPLE_BYTES:
        return True
    sample = values.slice((values.size - _SAMPLE_BYTES) // 2, _SAMPLE_BYTES)
    return bool(pa.compress(sample, codec="snappy").size < _WORTH * _SAMPLE_BYTES)


@functools.cache
def _column_paths(schema: pa.Schema) -> list[str]:
    """The parquet leaf columns of ``schema`` (a map's key and value are each one),
    as pyarrow names them for a per-column codec: read back from an empty file."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    written = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return [written.column(i).path for i in range(len(written))]


def add_action(
    path: str,
    rows: pa.Table,
    *,
    size: int,
    modification_ms: int,
    data_change: bool,
    tags: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The add action of a new data file holding ``rows``."""
    add = {
        "path": path,
        "partitionValues": {},
        "size": size,
        "modificationTime": modification_ms,
        "dataChange": data_change,
        "stats": orjson.dumps(stats(rows)).decode(),
    }
    if tags:
        add["tags"] = dict(tags)
    return {"add": add}


def metadata_action(
    metadata: Any, schema_json: str, configuration: Mapping[str, str]
) -> dict[str, Any]:
    """A metaData action: delta-rs's ``metadata`` (a table's id, name, partitions,
    creation time) with its schema's JSON and ``configuration`` as the properties."""
    return {
        "metaData": {
            "id": metadata.id,
            "name": metadata.name,
            "description": metadata.description,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema_json,
            "partitionColumns": list(metadata.partition_columns),
            "createdTime": metadata.created_time,
            "configuration": dict(configuration),
        }
    }


def remove_action(path: str, *, size: int, data_change: bool) -> dict[str, Any]:
    """The remove action of a live data file."""
    return {
        "remove": {
            "path": path,
            "deletionTimestamp": now_ms(),
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": {},
            "size": size,
        }
    }


def commit_body(
    actions: list[dict[str, Any]],
    operation: Operation,
    *,
    marker: str,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    """A commit file: its commitInfo (``marker`` as its txnId, plus ``extra``'s fields:
    Delta lets a writer keep any JSON there), then ``actions``."""
    info = {
        "commitInfo": {
            "timestamp": now_ms(),
            "operation": operation.name,
            "operationParameters": dict(operation.parameters),
            "isBlindAppend": operation.blind_append,
            "engineInfo": ENGINE,
            "clientVersion": ENGINE,
            "txnId": marker,
            **(extra or {}),
        }
    }
    return b"\n".join(orjson.dumps(a) for a in (info, *actions)) + b"\n"
