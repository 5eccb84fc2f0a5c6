"""``read_table``: one call that reads a pinned Delta version the fastest way available.

Two ways in:

``"parquet"``
    delta-rs pins the version and lists its data files; Spark's own parquet
    reader reads exactly those files. Spark then prunes columns and pushes
    filters into row groups, which the Python data source API cannot do
    (PySpark 4.2 has no column pruning there). Needs the JVM to reach the
    files: local paths, or ``s3://`` on a cluster with hadoop-aws (s3a).
``"python"``
    the ``lakedelta`` Python data source: per-file partitions pruned by Delta
    statistics, pyarrow on the executors, storage reached through delta-rs, so
    ``s3://`` works without any Hadoop jars.

``"auto"`` picks ``"parquet"`` when it is exact (the JVM can open the paths and
partition values can be read back from Hive-style directories) and
``"python"`` otherwise. ``bench/spark_scan.py`` measures both.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from deltalake import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.types import StructType

from lakepubsub import errors
from lakepubsub.spark import _commit, _filters, _scan, _table
from lakepubsub.spark._options import SourceOptions
from lakepubsub.spark.datasource import SOURCE_NAME

ReadMode = Literal["auto", "parquet", "python"]

# Hadoop glob characters: a path holding one would be expanded, not read as is.
_GLOB = re.compile(r"[*?\[\]{}\\]")
_PERCENT_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
# Local files the driver stats itself when building a file index (see _listing_in_driver).
_MAX_DRIVER_LISTED_FILES = 10_000


def read_table(
    spark: SparkSession,
    path: str,
    *,
    version: int | None = None,
    timestamp: datetime | str | None = None,
    storage_options: Mapping[str, str] | None = None,
    filters: Sequence[tuple[str, str, Any]] = (),
    columns: Sequence[str] | None = None,
    mode: ReadMode = "auto",
) -> DataFrame:
    """One Delta table version as a DataFrame: ``version``, the one at ``timestamp``, or the latest.

    The version is pinned now, so every action on the DataFrame sees the same
    rows whatever is committed later. ``filters`` are ``(column, op, value)``
    triples (ops ``= != < <= > >= in, not in, is null, is not null``) that the
    DataFrame holds only the matching rows of; they also skip whole files by
    their Delta statistics. ``columns`` selects columns; on the Python path
    only those are read (Spark's parquet reader prunes columns by itself).
    ``mode`` chooses the read path (module docstring);
    ``"parquet"`` raises ``FailedPrecondition`` where it would not be exact or
    the JVM cannot reach the files.
    """
    from lakepubsub.spark.session import register_source

    if mode not in ("auto", "parquet", "python"):
        raise errors.InvalidArgument(f"read mode {mode!r}: use auto, parquet or python")
    options = SourceOptions.parse(
        {
            "path": path,
            "versionAsOf": "" if version is None else str(version),
            "timestampAsOf": _timestamp_text(timestamp),
            **dict(storage_options or {}),
        }
    )
    table = _table.open_table(
        options.path,
        options.delta_storage_options,
        version=options.version,
        timestamp=options.timestamp,
    )
    try:
        pushed = _filters.from_triples(list(filters), _table.arrow_schema(table))
    except _filters.UnsupportedFilter as exc:
        raise errors.InvalidArgument(f"filters: {exc}") from exc
    unknown = [c for c in columns or () if c not in _table.arrow_schema(table).names]
    if unknown:
        raise errors.InvalidArgument(f"columns {unknown} are not in the table")
    if mode != "python":
        reason = _parquet_blocker(spark, options, table)
        if reason is None:
            frame = _parquet_frame(spark, options, table, pushed)
            return frame if columns is None else frame.select(*[f"`{c}`" for c in columns])
        if mode == "parquet":
            raise errors.FailedPrecondition(f"{options.path}: cannot read as parquet: {reason}")
    register_source(spark)
    reader = (
        spark.read.format(SOURCE_NAME)
        .option("path", options.path)
        .option("versionAsOf", str(table.version()))
        .option("minPartitions", str(spark.sparkContext.defaultParallelism))
        .options(**options.storage_options)
    )
    if filters:
        triples = [[c, op, _filters.triple_value_json(v)] for c, op, v in filters]
        reader = reader.option("filters", json.dumps(triples))
    if columns is None:
        return reader.load()
    # A user-given schema is the only projection the Python data source API
    # takes: the reader then decodes and ships just these columns.
    needed = set(columns) | {_filters.column_of(f) for f in pushed}
    schema = _table.spark_schema(table)
    projection = StructType([f for f in schema.fields if f.name in needed])
    return reader.schema(projection).load().select(*[f"`{c}`" for c in columns])


def _parquet_blocker(spark: SparkSession, options: SourceOptions, table: DeltaTable) -> str | None:
    """Why Spark's parquet reader would not read this version exactly; ``None`` if it would."""
    if not options.is_local and not (options.path.startswith("s3://") and _jvm_has_s3a(spark)):
        return "the JVM cannot open these paths (no hadoop-aws)"
    if _GLOB.search(options.path):
        return "the table path holds glob characters"
    columns = _table.partition_columns(table)
    if columns:
        _, files = _scan.data_files(table, columns)
        if not all(_hive_layout(f, columns) for f in files):
            return "partition values are not all in Hive-style directories"
    return None


def _hive_layout(file: _scan.DataFile, columns: Sequence[str]) -> bool:
    """Spark's partition discovery would read this file's partition values back exactly."""
    parts = file.path.split("/")
    if len(parts) != len(columns) + 1 or _GLOB.search(file.path):
        return False
    for part, (name, value) in zip(parts, file.partition_values, strict=False):
        key, _, text = part.partition("=")
        expected = _commit.NULL_PARTITION if value is None else _commit.partition_string(value)
        if _unescape(key) != name or (_unescape(text) if value is not None else text) != expected:
            return False
    return True


def _unescape(text: str) -> str:
    # Spark decodes each %XX to one character (not UTF-8); matching it exactly is the point.
    return _PERCENT_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def _parquet_frame(
    spark: SparkSession, options: SourceOptions, table: DeltaTable, filters: Sequence[Filter]
) -> DataFrame:
    schema = _table.spark_schema(table)
    columns = _table.partition_columns(table)
    actions, files = _scan.data_files(table, columns)
    files = _scan.prune(actions, files, filters, _table.arrow_schema(table), columns)
    if not files:
        return spark.createDataFrame([], schema)
    root = options.path
    reader = spark.read
    if options.is_local:
        root = "file://" + root
    else:
        root = "s3a://" + root.removeprefix("s3://")
        reader = reader.options(**_s3a_options(options.storage_options))
    locations = [_scan.file_location(root, f.path) for f in files]
    data_fields = [f for f in schema.fields if f.name not in columns]
    partition_fields = [f for f in schema.fields if f.name in columns]
    reader = reader.schema(StructType([*data_fields, *partition_fields]))
    if columns:
        reader = reader.option("basePath", root)
    with _listing_in_driver(spark, len(locations) if options.is_local else 0):
        frame = reader.parquet(*locations)
    frame = frame.select(*[f"`{f.name}`" for f in schema.fields])
    for flt in filters:
        frame = frame.where(_spark_condition(flt))
    return frame


def _spark_condition(flt: Filter) -> Column:
    """A taken filter as the Spark column expression with the same SQL semantics."""
    if isinstance(flt, Not):
        return ~_spark_condition(flt.child)
    column = sf.col(f"`{_filters.column_of(flt)}`")
    if isinstance(flt, IsNull):
        return column.isNull()
    if isinstance(flt, IsNotNull):
        return column.isNotNull()
    if isinstance(flt, In):
        return column.isin(list(flt.value))
    value = sf.lit(getattr(flt, "value", None))
    if isinstance(flt, EqualTo):
        return column == value
    if isinstance(flt, LessThan):
        return column < value
    if isinstance(flt, LessThanOrEqual):
        return column <= value
    if isinstance(flt, GreaterThan):
        return column > value
    if isinstance(flt, GreaterThanOrEqual):
        return column >= value
    raise errors.InvalidArgument(f"filter {flt} has no Spark form here")


@contextlib.contextmanager
def _listing_in_driver(spark: SparkSession, files: int) -> Iterator[None]:
    """Let the driver stat ``files`` local paths itself rather than run a Spark job for it.

    Above Spark's threshold (32 paths) the file index lists through a job, which
    costs ~1 s on 2 cores for 100 local files; stat-ing them in the driver takes
    milliseconds. The setting is restored afterwards.
    """
    if not 0 < files <= _MAX_DRIVER_LISTED_FILES:
        yield
        return
    previous = spark.conf.get(_LISTING_THRESHOLD, None)
    spark.conf.set(_LISTING_THRESHOLD, str(max(files, int(previous or 0))))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(_LISTING_THRESHOLD)
        else:
            spark.conf.set(_LISTING_THRESHOLD, previous)


def _jvm_has_s3a(spark: SparkSession) -> bool:
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(_S3A_CLASS)  # type: ignore[union-attr]
    except Exception:
        return False
    return True


def _s3a_options(storage: Mapping[str, str]) -> dict[str, str]:
    """delta-rs storage options as Hadoop s3a settings (per read, via DataFrameReader options)."""
    mapping = {
        "AWS_ACCESS_KEY_ID": "fs.s3a.access.key",
        "AWS_SECRET_ACCESS_KEY": "fs.s3a.secret.key",
        "AWS_SESSION_TOKEN": "fs.s3a.session.token",
        "AWS_REGION": "fs.s3a.endpoint.region",
        "AWS_ENDPOINT_URL": "fs.s3a.endpoint",
    }
    out = {mapping[k]: v for k, v in storage.items() if k in mapping}
    if "AWS_ENDPOINT_URL" in storage:
        out["fs.s3a.path.style.access"] = "true"
    if storage.get("AWS_ALLOW_HTTP", "").lower() == "true":
        out["fs.s3a.connection.ssl.enabled"] = "false"
    return out


def _timestamp_text(timestamp: datetime | str | None) -> str:
    if isinstance(timestamp, datetime):
        return timestamp.isoformat()
    return timestamp or ""
