"""Writing DataFrames into Delta tables through ``lakedelta``: one delta-rs commit per write."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from sparktools import ROWS_PER_FILE, MessagesFactory, message_rows

from lakepubsub import errors
from lakepubsub.spark import SOURCE_NAME
from lakepubsub.spark._commit import DeltaCommitMessage
from lakepubsub.spark._options import SourceOptions
from lakepubsub.spark.writer import DeltaWriter


def frame_of(spark: SparkSession, table: pa.Table, partitions: int = 2) -> DataFrame:
    return spark.createDataFrame(table).repartition(partitions)


def parquet_files(path: str) -> set[str]:
    found = set()
    for folder, _, names in os.walk(path):
        if "_delta_log" not in folder:
            found |= {os.path.relpath(os.path.join(folder, n), path) for n in names}
    return {f for f in found if f.endswith(".parquet")}


def live_files(path: str) -> set[str]:
    return {os.path.relpath(f, path) for f in DeltaTable(path).file_uris()}


def sorted_offsets(path: str) -> list[int]:
    return sorted(DeltaTable(path).to_pyarrow_table().column("offset").to_pylist())


def test_append_and_overwrite_round_trip(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=1)
    before = DeltaTable(path).version()
    new = message_rows(ROWS_PER_FILE, 30)
    frame_of(spark, new).write.format(SOURCE_NAME).mode("append").save(path)
    table = DeltaTable(path)
    assert table.version() == before + 1  # one commit for the whole write
    assert sorted_offsets(path) == list(range(ROWS_PER_FILE + 30))
    got = table.to_pyarrow_table().sort_by("offset").slice(ROWS_PER_FILE)
    assert got.to_pylist() == new.to_pylist()

    frame_of(spark, message_rows(500, 3)).write.format(SOURCE_NAME).mode("overwrite").save(path)
    assert DeltaTable(path).version() == before + 2
    assert sorted_offsets(path) == [500, 501, 502]


def test_written_stats_are_usable(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "stats")
    frame_of(spark, message_rows(0, 50), partitions=1).write.format(SOURCE_NAME).mode(
        "append"
    ).save(path)
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    [add] = actions
    assert add["num_records"] == 50
    assert (add["min.offset"], add["max.offset"]) == (0, 49)
    # publish times end in 7 us: the bounds are widened to whole milliseconds.
    rows = message_rows(0, 50).column("publish_time").to_pylist()
    assert add["min.publish_time"] <= rows[0] and add["max.publish_time"] >= rows[-1]
    assert add["null_count.ordering_key"] == 25
    assert add["null_count.data"] == 8


def test_creates_partitioned_table(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "created")
    rows = pa.table({"n": list(range(8)), "p": ["a b", "c/d", "", None] * 2, "q": [1, 2] * 4})
    frame_of(spark, rows).write.format(SOURCE_NAME).option("partitionBy", "p,q").mode(
        "append"
    ).save(path)
    table = DeltaTable(path)
    assert table.metadata().partition_columns == ["p", "q"]
    got = table.to_pyarrow_table().sort_by("n").to_pylist()
    # Delta stores an empty partition value as null.
    assert got == [{**row, "p": None if row["p"] == "" else row["p"]} for row in rows.to_pylist()]
    assert {f.split("/")[0] for f in parquet_files(path)} == {
        "p=a%20b",
        "p=c%2Fd",
        "p=__HIVE_DEFAULT_PARTITION__",
    }


def test_refuses_other_partitioning(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "parts")
    write_deltalake(path, pa.table({"n": [1], "p": ["x"]}), partition_by=["p"])
    frame = frame_of(spark, pa.table({"n": [2], "p": ["y"]}))
    with pytest.raises(Exception, match=r"partitioned by \['p'\], not \['n'\]"):
        frame.write.format(SOURCE_NAME).option("partitionBy", "n").mode("append").save(path)
    assert DeltaTable(path).version() == 0


def test_refuses_schema_mismatch(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table(files=1)
    wrong = spark.createDataFrame([(1, "x")], "offset int, extra string")
    with pytest.raises(Exception, match="offset is int, the table has bigint"):
        wrong.write.format(SOURCE_NAME).mode("append").save(path)
    assert DeltaTable(path).version() == 0


def test_failed_task_aborts_and_cleans_up(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=1)
    rows = message_rows(100, 10)
    size = pa.array([None] + [1] * 9, pa.int64())  # non-nullable in the table
    bad = rows.set_column(rows.schema.get_field_index("size"), "size", size)
    bad = bad.cast(bad.schema.set(6, pa.field("size", pa.int64())))
    with pytest.raises(Exception, match="null value in non-nullable column size"):
        frame_of(spark, bad, partitions=4).write.format(SOURCE_NAME).mode("append").save(path)
    assert DeltaTable(path).version() == 0
    # Spark may let a task that was already running finish after the job's abort;
    # the file it wrote is one no commit references, and a full vacuum removes it.
    deadline = time.monotonic() + 30
    while spark.sparkContext.statusTracker().getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    if parquet_files(path) != live_files(path):
        DeltaTable(path).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
        )
    assert parquet_files(path) == live_files(path)


def _task_output(
    path: str, spark_schema: object, rows: pa.Table
) -> tuple[DeltaWriter, DeltaCommitMessage]:
    """Run the writer's driver and task halves in this process, as Spark would."""
    options = SourceOptions.parse({"path": path})
    writer = DeltaWriter.prepare(options, spark_schema, overwrite=False)  # type: ignore[arg-type]
    return writer, writer.write(iter(rows.to_batches()))


def test_commit_checks_partition_values(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "checked")
    write_deltalake(path, pa.table({"n": [1], "p": ["x"]}), partition_by=["p"])
    schema = spark.read.format("delta").load(path).schema
    writer, message = _task_output(path, schema, pa.table({"n": [2, 3], "p": ["y", "z"]}))
    wrong_key = DeltaCommitMessage(
        tuple(dataclasses.replace(f, partition_values={"q": "y"}) for f in message.files)
    )
    with pytest.raises(errors.FailedPrecondition, match="partitioned by"):
        writer.commit([wrong_key])
    assert DeltaTable(path).version() == 0
    assert parquet_files(path) == live_files(path)  # the refused files are gone

    writer, message = _task_output(path, schema, pa.table({"n": [4], "p": ["w"]}))
    os.remove(os.path.join(path, message.files[0].path))
    with pytest.raises(errors.FailedPrecondition, match="missing"):
        writer.commit([message])
    assert DeltaTable(path).version() == 0


def test_commit_checks_partition_value_types(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "typed")
    write_deltalake(path, pa.table({"n": [1], "q": pa.array([1], pa.int32())}), partition_by=["q"])
    schema = spark.read.format("delta").load(path).schema
    writer, message = _task_output(
        path, schema, pa.table({"n": [2], "q": pa.array([2], pa.int32())})
    )
    not_int = DeltaCommitMessage(
        tuple(dataclasses.replace(f, partition_values={"q": "two"}) for f in message.files)
    )
    with pytest.raises(errors.FailedPrecondition, match="is not a int32"):
        writer.commit([not_int])
    assert parquet_files(path) == live_files(path)
    writer, message = _task_output(
        path, schema, pa.table({"n": [2], "q": pa.array([2], pa.int32())})
    )
    writer.commit([message])
    assert sorted(DeltaTable(path).to_pyarrow_table().column("n").to_pylist()) == [1, 2]


def test_idempotent_writes(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table(files=1)
    batch = frame_of(spark, message_rows(ROWS_PER_FILE, 5))

    def write(version: int) -> None:
        (
            batch.write.format(SOURCE_NAME)
            .mode("append")
            .option("txnAppId", "consumer-1")
            .option("txnVersion", str(version))
            .save(path)
        )

    write(1)
    write(1)  # a retried batch: nothing is committed twice
    write(0)  # an older batch: also skipped
    table = DeltaTable(path)
    assert table.version() == 1
    assert table.transaction_version("consumer-1") == 1
    assert len(sorted_offsets(path)) == ROWS_PER_FILE + 5
    assert parquet_files(path) == live_files(path)  # skipped writes left no files
    write(2)
    assert DeltaTable(path).transaction_version("consumer-1") == 2
    assert len(sorted_offsets(path)) == ROWS_PER_FILE + 10


def test_user_metadata_lands_in_commit_info(
    spark: SparkSession, messages_table: MessagesFactory
) -> None:
    path = messages_table(files=1)
    frame = frame_of(spark, message_rows(ROWS_PER_FILE, 1), partitions=1)
    frame.write.format(SOURCE_NAME).option("userMetadata", "job=compact").mode("append").save(path)
    assert DeltaTable(path).history(1)[0]["userMetadata"] == "job=compact"


def test_empty_overwrite_truncates(spark: SparkSession, messages_table: MessagesFactory) -> None:
    path = messages_table(files=2)
    empty = spark.createDataFrame([], spark.read.format("delta").load(path).schema)
    empty.write.format(SOURCE_NAME).mode("overwrite").save(path)
    assert DeltaTable(path).to_pyarrow_table().num_rows == 0
    assert json.loads(json.dumps(DeltaTable(path).history(1)[0]["operation"])) == "WRITE"
