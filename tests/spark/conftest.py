"""One local Spark session for every Spark test, and Delta tables written with delta-rs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession

from lakepubsub.schemas import MESSAGES
from lakepubsub.spark import local_session

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
# Messages per file and files per table: small, but enough files to see pruning.
ROWS_PER_FILE = 20
FILES = 5

MessagesFactory = Callable[..., str]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """``local[2]`` with two shuffle partitions, as a 2-core CI box runs the jobs."""
    session = local_session("lakepubsub-tests", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


def message_rows(first_offset: int, count: int) -> pa.Table:
    """``count`` messages from ``first_offset``: one publish every 10 ms, varied nulls."""
    offsets = list(range(first_offset, first_offset + count))
    return pa.table(
        {
            "offset": offsets,
            "message_id": [f"m{o:06d}" for o in offsets],
            "publish_time": [
                T0 + dt.timedelta(milliseconds=10 * o, microseconds=7) for o in offsets
            ],
            "data": [None if o % 7 == 0 else bytes([o % 256]) * 16 for o in offsets],
            "attributes": [
                None if o % 5 == 0 else [("k", f"v{o % 3}"), ("o", str(o))] for o in offsets
            ],
            "ordering_key": [None if o % 2 else f"key{o % 4}" for o in offsets],
            "size": [16 + o % 3 for o in offsets],
        },
        schema=MESSAGES,
    )


@pytest.fixture
def messages_table(tmp_path: Path) -> MessagesFactory:
    """Build a messages table of ``files`` commits of ``rows`` messages each; returns its path."""

    def build(files: int = FILES, rows: int = ROWS_PER_FILE, name: str = "messages") -> str:
        path = str(tmp_path / name)
        for i in range(files):
            write_deltalake(path, message_rows(i * rows, rows), mode="append")
        return path

    return build
