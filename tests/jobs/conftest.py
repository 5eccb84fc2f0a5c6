"""One local Spark session for the job tests, and jobs contexts on the repo's lakes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from support import LakeSpec

from lakepubsub import Engine
from lakepubsub.spark import local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """``local[2]`` with two shuffle partitions, as a 2-core CI box runs the jobs."""
    session = local_session("lakepubsub-job-tests", "local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def local_engine(local_lake: LakeSpec) -> Iterator[Engine]:
    """An engine on a local lake only (the repo's ``engine`` also runs on S3)."""
    with Engine(local_lake.settings()) as engine:
        yield engine
