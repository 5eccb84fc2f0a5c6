"""Shared fixtures: lakes on local disk and on a real local S3 (moto server subprocess)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from support import LakeSpec, MotoServer, free_port, wait_for_port

from lakepubsub import Engine


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """A real S3 API on 127.0.0.1, in its own process (never in-process:
    ``DeltaTable.history()`` deadlocks against moto's threaded server)."""
    import boto3

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process=proc)
        endpoint = f"http://127.0.0.1:{port}"
        bucket = "lakepubsub-test"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        yield MotoServer(endpoint, bucket)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def lake(request: pytest.FixtureRequest, tmp_path: object) -> LakeSpec:
    """A fresh, empty lake: a temp directory, or a fresh prefix in the moto bucket."""
    if request.param == "local":
        return LakeSpec(str(tmp_path), {})
    server: MotoServer = request.getfixturevalue("moto_server")
    return LakeSpec(f"s3://{server.bucket}/{uuid.uuid4().hex}", server.storage_options)


@pytest.fixture
def local_lake(tmp_path: object) -> LakeSpec:
    return LakeSpec(str(tmp_path), {})


@pytest.fixture
def engine(lake: LakeSpec) -> Iterator[Engine]:
    with Engine(lake.settings()) as eng:
        yield eng
