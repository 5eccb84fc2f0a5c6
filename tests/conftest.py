"""Shared fixtures: lakes on local disk and on a real local S3 (moto server subprocess)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support import LakeSpec, MotoServer

from bench.harness.s3_proxy import S3Proxy
from lakepubsub import Engine
from lakepubsub._lake import Lake


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """A real S3 API on 127.0.0.1, in its own process, with one bucket."""
    with MotoServer("lakepubsub-test") as server:
        yield server


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def lake(request: pytest.FixtureRequest, tmp_path: object) -> LakeSpec:
    """A fresh, empty lake: a temp directory, or a fresh prefix in the moto bucket."""
    if request.param == "local":
        return LakeSpec(str(tmp_path), {})
    server: MotoServer = request.getfixturevalue("moto_server")
    return LakeSpec(f"s3://{server.bucket}/{uuid.uuid4().hex}", server.storage_options)


@pytest.fixture
def proxied_lake(moto_server: MotoServer) -> Iterator[tuple[Lake, S3Proxy]]:
    """A fresh lake on the moto bucket, reached through a proxy that counts requests."""
    with S3Proxy(moto_server.endpoint) as proxy:
        options = {**moto_server.storage_options, "AWS_ENDPOINT_URL": proxy.endpoint}
        spec = LakeSpec(f"s3://{moto_server.bucket}/{uuid.uuid4().hex}", options)
        yield Lake(spec.settings()), proxy


@pytest.fixture
def local_lake(tmp_path: object) -> LakeSpec:
    return LakeSpec(str(tmp_path), {})


@pytest.fixture
def engine(lake: LakeSpec) -> Iterator[Engine]:
    with Engine(lake.settings()) as eng:
        yield eng
