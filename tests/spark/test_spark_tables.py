"""``read_table`` and ``create_view``: the parquet and Python paths agree, SQL sees them."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FILES, ROWS_PER_FILE, MessagesFactory, message_rows
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from lakepubsub import errors
from lakepubsub.spark import create_view, read_table


def plan_of(frame: DataFrame) -> str:
    return str(frame._jdf.queryExecution().executedPlan().toString())


def rows_of(frame: DataFrame) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in frame.collect())


def test_auto_reads_local_tables_as_parquet(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table()
    threshold = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(threshold, None)
    auto = read_table(spark, path)
    assert spark.conf.get(threshold, None) == before  # raised only while listing
    python = read_table(spark, path, mode="python")
    assert "FileScan parquet" in plan_of(auto)
    assert "BatchScan lakedelta" in plan_of(python)
    assert auto.columns == python.columns
    assert rows_of(auto) == rows_of(python)
    assert auto.count() == FILES * ROWS_PER_FILE


def test_parquet_path_reads_only_the_pinned_files(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=2)
    # Overwrite leaves the old files on disk (not vacuumed): a directory scan would see them.
    write_deltalake(path, message_rows(1000, 3), mode="overwrite")
    assert sorted(r[0] for r in read_table(spark, path).select("offset").collect()) == [
        1000,
        1001,
        1002,
    ]
    old = read_table(spark, path, version=1, mode="parquet")
    assert old.count() == 2 * ROWS_PER_FILE


def test_partitioned_tables_agree_across_paths(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "parts")
    rows = pa.table(
        {
            "n": list(range(10)),
            "region": ["eu west", "us/east", None, "a%b", "x=y"] * 2,
            "shard": pa.array([1, 2, 3, None, 5] * 2, pa.int32()),
        }
    )
    write_deltalake(path, rows, partition_by=["region", "shard"])
    auto = read_table(spark, path)
    assert "FileScan parquet" in plan_of(auto)
    assert rows_of(auto) == rows_of(read_table(spark, path, mode="python"))
    assert auto.columns == ["n", "region", "shard"]


def test_unreadable_partition_dirs_fall_back_to_python(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "utf8")
    # delta-rs writes UTF-8 bytes percent-encoded, which Spark's discovery decodes per byte.
    write_deltalake(path, pa.table({"n": [1, 2], "p": ["ünï", "plain"]}), partition_by=["p"])
    auto = read_table(spark, path)
    assert "BatchScan lakedelta" in plan_of(auto)
    assert rows_of(auto) == [(1, "ünï"), (2, "plain")]
    with pytest.raises(errors.FailedPrecondition, match="Hive-style"):
        read_table(spark, path, mode="parquet")


def test_filters_prune_and_agree(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table()
    triples = [("offset", ">=", 83), ("ordering_key", "is null", None), ("offset", "!=", 85)]
    expected = [o for o in range(83, 100) if o % 2 and o != 85]
    for mode in ("parquet", "python"):
        frame = read_table(spark, path, filters=triples, mode=mode)
        assert sorted(r[0] for r in frame.select("offset").collect()) == expected
    assert "InMemoryFileIndex(1 paths)" in plan_of(read_table(spark, path, filters=triples))
    timed = [("publish_time", "<", dt.datetime(2024, 1, 1, 0, 0, 0, 50_000, tzinfo=dt.UTC))]
    assert read_table(spark, path, filters=timed).count() == 5
    with pytest.raises(errors.InvalidArgument, match="unknown operator"):
        read_table(spark, path, filters=[("offset", "~", 1)])


def test_time_travel_through_read_table(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=1)
    time.sleep(0.2)
    write_deltalake(path, message_rows(ROWS_PER_FILE, 5), mode="append")
    created = DeltaTable(path).history()[-1]["timestamp"]
    # Exact milliseconds: a float division can land a microsecond before the commit.
    at = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=created)
    for mode in ("parquet", "python"):
        assert read_table(spark, path, timestamp=at, mode=mode).count() == ROWS_PER_FILE
        assert read_table(spark, path, version=1, mode=mode).count() == ROWS_PER_FILE + 5
    with pytest.raises(errors.NotFound):
        read_table(spark, path, version=9)


def test_views_answer_sql(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table()
    create_view(spark, "messages_auto", path)
    create_view(spark, "messages_python", path, mode="python")
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW messages_sql USING lakedelta OPTIONS (path '{path}')"
    )
    query = (
        "SELECT attributes['k'] AS k, count(*) AS n, sum(size) AS bytes"
        " FROM {} GROUP BY 1 ORDER BY 1"
    )
    answers = [
        spark.sql(query.format(v)).collect()
        for v in ("messages_auto", "messages_python", "messages_sql")
    ]
    assert answers[0] == answers[1] == answers[2]
    assert sum(r["n"] for r in answers[0]) == FILES * ROWS_PER_FILE
    # Views keep the version they were made on.
    write_deltalake(path, message_rows(FILES * ROWS_PER_FILE, 1), mode="append")
    for view in ("messages_auto", "messages_python", "messages_sql"):
        assert spark.table(view).count() == FILES * ROWS_PER_FILE


def test_missing_table(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(errors.NotFound):
        read_table(spark, str(tmp_path / "nothing"))


def test_columns_project_both_paths(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table(files=2)
    wanted = ["size", "offset"]
    triples = [("ordering_key", "=", "key2")]
    frames = [
        read_table(spark, path, columns=wanted, filters=triples, mode=mode)
        for mode in ("parquet", "python")
    ]
    assert [f.columns for f in frames] == [wanted, wanted]
    assert rows_of(frames[0]) == rows_of(frames[1])
    assert sorted(r["offset"] for r in frames[1].collect()) == list(range(2, 40, 4))
    with pytest.raises(errors.InvalidArgument, match="not in the table"):
        read_table(spark, path, columns=["nope"])


def test_default_source_needs_no_pushdown_setting(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=1)
    setting = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(setting, "false")
    try:
        frame = spark.read.format("lakedelta").load(path)
        assert frame.where("offset < 3").count() == 3
        with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED"):
            spark.read.format("lakedelta").option("pushFilters", "true").load(path).count()
    finally:
        spark.conf.set(setting, "true")
