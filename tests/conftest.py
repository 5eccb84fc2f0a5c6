"""Shared fixtures: lakes on local disk and on a real local S3 (moto server subprocess)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from lakepubsub import Engine, Settings

S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


@dataclass(frozen=True)
class MotoServer:
    endpoint: str
    bucket: str

    @property
    def storage_options(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, **S3_CREDENTIALS}

    def env(self) -> dict[str, str]:
        return self.storage_options


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """A real S3 API on 127.0.0.1, in its own process (DESIGN.md: never in-process)."""
    import boto3

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
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


@dataclass(frozen=True)
class LakeSpec:
    """Where a test's lake lives and how a process (or subprocess) reaches it."""

    uri: str
    storage_options: dict[str, str]

    def settings(self, **overrides: object) -> Settings:
        base: dict[str, object] = {"pull_wait_s": 2.0, "pull_poll_interval_s": 0.05}
        base.update(overrides)
        return Settings(lake=self.uri, storage_options=self.storage_options, **base)  # type: ignore[arg-type]

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that reads ``Settings.from_env()``."""
        return {**os.environ, "LAKEPUBSUB_LAKE": self.uri, **self.storage_options}


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
