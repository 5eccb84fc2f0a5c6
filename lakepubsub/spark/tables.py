"""Delta tables of the lake as Spark DataFrames, read by delta-spark.

The lake names tables ``s3://bucket/prefix/...`` or by local path; Spark reads
them as ``s3a://bucket/prefix/...`` (hadoop-aws) or ``file:///...``. S3
endpoint and credentials are set per bucket from the lake's storage options
(the same AWS variables ``lakepubsub/settings/`` reads), with path-style
access whenever an endpoint is given (moto, MinIO).

Only reads go through delta-spark: the lake's tables are committed by
lakepubsub itself (conditional creates; docs/architecture.md), never by Spark.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TypedDict, Unpack
from urllib.parse import urlparse

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from lakepubsub import errors

DELTA = "delta"
# delta-rs / object_store option -> Hadoop s3a setting.
_S3A_KEYS = {
    "AWS_ACCESS_KEY_ID": "access.key",
    "AWS_SECRET_ACCESS_KEY": "secret.key",
    "AWS_SESSION_TOKEN": "session.token",
    "AWS_REGION": "endpoint.region",
    "AWS_ENDPOINT_URL": "endpoint",
}
_TEMPORARY_CREDENTIALS = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
_SIMPLE_CREDENTIALS = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
# Where a Spark error's message ends: its SQLSTATE, then the position in the query
# and the analyzed plan, which can run to hundreds of lines.
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+(?:; line (\d+) pos (\d+))?.*", re.DOTALL)


def spark_path(uri: str) -> str:
    """A lake table URI as Spark's file systems name it: ``s3a://`` or ``file://``."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        return "s3a://" + uri.split("://", 1)[1].rstrip("/")
    if parsed.scheme == "file":
        return "file://" + os.path.abspath(parsed.path)
    if parsed.scheme == "":
        return "file://" + os.path.abspath(uri)
    return uri.rstrip("/")


def s3a_conf(storage_options: Mapping[str, str] | None, bucket: str = "") -> dict[str, str]:
    """Hadoop s3a settings for delta-rs storage options; per bucket when ``bucket`` is given."""
    options = dict(storage_options or {})
    prefix = f"fs.s3a.bucket.{bucket}." if bucket else "fs.s3a."
    out = {prefix + _S3A_KEYS[k]: v for k, v in options.items() if k in _S3A_KEYS and v}
    if options.get("AWS_ENDPOINT_URL"):
        out[prefix + "path.style.access"] = "true"
        if options["AWS_ENDPOINT_URL"].startswith("http://"):
            out[prefix + "connection.ssl.enabled"] = "false"
    if options.get("AWS_ACCESS_KEY_ID"):
        provider = (
            _TEMPORARY_CREDENTIALS if options.get("AWS_SESSION_TOKEN") else _SIMPLE_CREDENTIALS
        )
        out[prefix + "aws.credentials.provider"] = provider
    return out


def configure_storage(
    spark: SparkSession, uri: str, storage_options: Mapping[str, str] | None
) -> None:
    """Let ``spark`` reach ``uri``'s bucket with ``storage_options`` (nothing for local paths)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not storage_options:
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(storage_options, parsed.netloc).items():
        hadoop.set(key, value)


def read_table(
    spark: SparkSession,
    uri: str,
    *,
    version: int | None = None,
    timestamp: datetime | str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A Delta table as delta-spark reads it: the latest, ``version``, or as of ``timestamp``.

    The snapshot is pinned when this returns. ``NotFound`` (one line) when there
    is no table, or the version or time is not in the table's retained log.
    """
    configure_storage(spark, uri, storage_options)
    reader = spark.read.format(DELTA)
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    elif timestamp is not None:
        reader = reader.option("timestampAsOf", timestamp_text(timestamp))
    try:
        return reader.load(spark_path(uri))
    except AnalysisException as exc:
        raise errors.NotFound(f"{uri}: {first_line(exc)}") from exc
    except Py4JJavaError as exc:  # a log delta-spark cannot assemble (files missing)
        raise errors.FailedPrecondition(f"{uri}: {java_error(exc)}") from exc


class ReadOptions(TypedDict, total=False):
    """``read_table``'s keyword arguments."""

    version: int | None
    timestamp: datetime | str | None
    storage_options: Mapping[str, str] | None


def create_view(
    spark: SparkSession, name: str, uri: str, **options: Unpack[ReadOptions]
) -> DataFrame:
    """A temporary view ``name`` of one pinned table version, read as ``read_table`` reads it."""
    frame = read_table(spark, uri, **options)
    frame.createOrReplaceTempView(name)
    return frame


def timestamp_text(value: datetime | str) -> str:
    """A time as Spark's ``timestampAsOf`` takes it, in UTC; a zone-less value is UTC."""
    if isinstance(value, str):
        value = parse_timestamp(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is taken as UTC, like the session zone."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise errors.InvalidArgument(f"bad time {text!r}: use ISO 8601") from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def first_line(exc: BaseException) -> str:
    """A Spark error's message on one line, without its JVM stack trace, SQLSTATE or
    plan; the position in the query, if any, as ``(line L, position P)``."""
    text = str(exc).split("\n\n", 1)[0]  # PySpark appends the JVM stack trace after a blank line
    found = _SQLSTATE.search(text)
    if found is not None:
        where = f" (line {found.group(1)}, position {found.group(2)})" if found.group(1) else ""
        text = text[: found.start()] + where
    return " ".join(text.split()) or type(exc).__name__


def java_error(exc: Py4JJavaError) -> str:
    """The JVM exception's class and message, on one line."""
    try:
        return " ".join(str(exc.java_exception.toString()).split())
    except Exception:  # the gateway is gone
        return first_line(exc)


def pinned_version(frame: DataFrame) -> int | None:
    """The table version a delta-spark DataFrame reads (``None`` if it reads no Delta table).

    Read from the plan's Delta file index: delta-spark resolves ``timestampAsOf``
    itself and has no public call that says which version it chose.
    """
    plan = frame._jdf.queryExecution().analyzed()
    leaves = plan.collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        try:
            return int(leaf.relation().location().version())
        except Exception:  # not a Delta relation: try the next leaf
            continue
    return None
