"""One local Spark session for every Spark test, and Delta tables written with delta-rs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession
from sparktools import FILES, ROWS_PER_FILE, MessagesFactory, message_rows

from lakepubsub.spark import local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """``local[2]`` with two shuffle partitions, as a 2-core CI box runs the jobs."""
    session = local_session("lakepubsub-tests", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def messages_table(tmp_path: Path) -> MessagesFactory:
    """Build a messages table of ``files`` commits of ``rows`` messages each; returns its path."""

    def build(files: int = FILES, rows: int = ROWS_PER_FILE, name: str = "messages") -> str:
        path = str(tmp_path / name)
        for i in range(files):
            write_deltalake(path, message_rows(i * rows, rows), mode="append")
        return path

    return build
