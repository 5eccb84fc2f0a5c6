"""delta-spark reading, and ``lakedelta`` writing, Delta tables on a real local S3 (moto).

The lake's ``s3://`` URIs become ``s3a://`` (hadoop-aws), with the endpoint and
credentials of the storage options set for the bucket.
"""

from __future__ import annotations

import uuid
from typing import Protocol

import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from sparktools import ROWS_PER_FILE, message_rows

from lakepubsub.spark import SOURCE_NAME, create_view, read_table, spark_path

pytestmark = pytest.mark.s3


class S3Server(Protocol):
    """The root conftest's ``moto_server``."""

    bucket: str

    @property
    def storage_options(self) -> dict[str, str]: ...


def test_s3_round_trip(spark: SparkSession, moto_server: S3Server) -> None:
    storage = moto_server.storage_options
    path = f"s3://{moto_server.bucket}/spark/{uuid.uuid4().hex}/messages"
    for i in range(3):
        rows = message_rows(i * ROWS_PER_FILE, ROWS_PER_FILE)
        write_deltalake(path, rows, mode="append", storage_options=storage)

    frame = read_table(spark, path, storage_options=storage)
    assert "s3a://" in frame.inputFiles()[0]
    expected = DeltaTable(path, storage_options=storage).to_pyarrow_table()
    got = frame.toArrow().cast(expected.schema)
    assert sorted(got.to_pylist(), key=lambda r: r["offset"]) == sorted(
        expected.to_pylist(), key=lambda r: r["offset"]
    )
    assert frame.where("offset < 5").count() == 5
    assert read_table(spark, path, version=0, storage_options=storage).count() == ROWS_PER_FILE
    located = spark_path(path)
    assert located.startswith("s3a://")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{located}`").collect()
    assert sorted(r["version"] for r in history) == [0, 1, 2]

    new = spark.createDataFrame(message_rows(3 * ROWS_PER_FILE, 7)).repartition(2)
    writer = new.write.format(SOURCE_NAME).mode("append").options(**storage)
    writer.option("txnAppId", "s3-job").option("txnVersion", "1").save(path)
    writer.option("txnAppId", "s3-job").option("txnVersion", "1").save(path)  # skipped
    table = DeltaTable(path, storage_options=storage)
    assert table.version() == 3
    assert table.transaction_version("s3-job") == 1
    assert table.to_pyarrow_table().num_rows == 3 * ROWS_PER_FILE + 7

    create_view(spark, "s3_messages", path, storage_options=storage)
    total = spark.sql("SELECT count(*) AS n, sum(size) AS b FROM s3_messages").first()
    assert total is not None and total["n"] == 3 * ROWS_PER_FILE + 7
