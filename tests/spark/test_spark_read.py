"""Reading Delta tables with delta-spark: ``read_table``, ``create_view``, plain Spark SQL."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, LongType, MapType, StringType, TimestampType
from sparktools import FILES, ROWS_PER_FILE, MessagesFactory, message_rows

from lakepubsub import errors
from lakepubsub.spark import create_view, read_table, spark_path
from lakepubsub.spark.tables import pinned_version

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def offsets(frame: DataFrame) -> list[int]:
    return sorted(row["offset"] for row in frame.select("offset").collect())


def as_rows(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda r: json.dumps(r, default=str, sort_keys=True))


def files_read(frame: DataFrame) -> int:
    """Data files the scan of ``frame`` opened, from Spark's own scan metrics."""
    frame.collect()
    plan = frame._jdf.queryExecution().executedPlan()
    nodes = plan.collectLeaves()
    for i in range(nodes.size()):
        metrics = nodes.apply(i).metrics()
        if metrics.contains("numFiles"):
            return int(metrics.apply("numFiles").value())
    raise AssertionError("no file scan in the plan")


def test_schema_maps_delta_types(spark: SparkSession, messages_table: MessagesFactory) -> None:
    schema = read_table(spark, messages_table(files=1)).schema
    types = {f.name: (f.dataType, f.nullable) for f in schema.fields}
    assert types == {
        "offset": (LongType(), False),
        "message_id": (StringType(), False),
        "publish_time": (TimestampType(), False),
        "data": (BinaryType(), True),
        "attributes": (MapType(StringType(), StringType(), True), True),
        "ordering_key": (StringType(), True),
        "size": (LongType(), False),
    }


def test_rows_equal_delta_rs(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table()
    expected = DeltaTable(path).to_pyarrow_table()
    got = read_table(spark, path).toArrow().cast(expected.schema)
    assert as_rows(got) == as_rows(expected)


def test_nested_and_partitioned_tables(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "nested")
    rows = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "point": pa.array(
                [
                    {"x": 1.5, "tags": ["a", "b"]},
                    None,
                    {"x": None, "tags": []},
                    {"x": 2.0, "tags": None},
                ],
                pa.struct([("x", pa.float64()), ("tags", pa.list_(pa.string()))]),
            ),
            "nested": pa.array(
                [[("a", [1, 2])], [], None, [("b", None)]],
                pa.map_(pa.string(), pa.list_(pa.int32())),
            ),
            "day": pa.array([dt.date(2024, 1, 1), None, dt.date(2024, 1, 2), dt.date(2024, 1, 2)]),
            "region": ["eu west", "us/east", None, "ünï"],
            "shard": pa.array([1, 2, 2, None], pa.int32()),
        }
    )
    write_deltalake(path, rows, partition_by=["region", "shard"])
    expected = DeltaTable(path).to_pyarrow_table()
    got = read_table(spark, path).toArrow().select(expected.schema.names).cast(expected.schema)
    assert as_rows(got) == as_rows(expected)


def test_statistics_skip_files(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table()
    frame = read_table(spark, path)
    assert files_read(frame) == FILES
    assert files_read(frame.where("offset >= 85")) == 1
    assert files_read(frame.where("publish_time < TIMESTAMP '2024-01-01 00:00:00.1'")) == 1
    assert offsets(frame.where("offset >= 85 AND ordering_key IS NOT NULL")) == [
        o for o in range(85, 100) if o % 2 == 0
    ]


def test_time_travel_by_version_and_timestamp(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=2)
    time.sleep(0.2)  # keep version 2 well after version 1
    write_deltalake(path, message_rows(2 * ROWS_PER_FILE, ROWS_PER_FILE), mode="append")
    assert len(offsets(read_table(spark, path, version=0))) == ROWS_PER_FILE
    at_v1 = dt.datetime.fromtimestamp(
        (Path(path) / "_delta_log" / f"{1:020d}.json").stat().st_mtime, dt.UTC
    )
    travelled = read_table(spark, path, timestamp=at_v1)
    assert pinned_version(travelled) == 1
    assert len(offsets(travelled)) == 2 * ROWS_PER_FILE
    assert len(offsets(read_table(spark, path))) == 3 * ROWS_PER_FILE
    located = spark_path(path)
    sql = spark.sql(f"SELECT count(*) AS n FROM delta.`{located}` VERSION AS OF 1").first()
    assert sql is not None and sql["n"] == 2 * ROWS_PER_FILE
    stamp = at_v1.strftime("%Y-%m-%d %H:%M:%S.%f")
    sql = spark.sql(
        f"SELECT count(*) AS n FROM delta.`{located}` TIMESTAMP AS OF '{stamp}'"
    ).first()
    assert sql is not None and sql["n"] == 2 * ROWS_PER_FILE


def test_missing_versions_and_tables_fail_in_one_line(
    spark: SparkSession, messages_table: MessagesFactory, tmp_path: Path
) -> None:
    path = messages_table(files=1)
    with pytest.raises(errors.NotFound, match="version 7") as missing:
        read_table(spark, path, version=7)
    assert "\n" not in str(missing.value)
    with pytest.raises(errors.NotFound, match="before the earliest version"):
        read_table(spark, path, timestamp="2000-01-01T00:00:00Z")
    with pytest.raises(errors.NotFound) as no_table:
        read_table(spark, str(tmp_path / "nothing"))
    assert "\n" not in str(no_table.value)


def test_a_pinned_version_stays(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table(files=1)
    pinned = read_table(spark, path, version=0)
    write_deltalake(path, message_rows(ROWS_PER_FILE, 5), mode="append")
    assert pinned.count() == ROWS_PER_FILE
    assert read_table(spark, path).count() == ROWS_PER_FILE + 5


def test_views_history_and_detail_in_sql(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=3)
    create_view(spark, "messages_v1", path, version=1)
    create_view(spark, "messages_now", path)
    counts = spark.sql(
        "SELECT (SELECT count(*) FROM messages_v1) AS v1,"
        " (SELECT count(*) FROM messages_now) AS now"
    ).first()
    assert counts is not None and (counts["v1"], counts["now"]) == (40, 60)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{spark_path(path)}`").collect()
    assert sorted(r["version"] for r in history) == [0, 1, 2]
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{spark_path(path)}`").first()
    assert detail is not None and (detail["format"], detail["numFiles"]) == ("delta", 3)


def test_empty_table_reads_no_rows(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "empty")
    DeltaTable.create(path, message_rows(0, 0).schema)
    assert read_table(spark, path).count() == 0
