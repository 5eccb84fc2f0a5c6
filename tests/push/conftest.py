"""Push tests: a real API server (with its push dispatcher) and real local endpoints.

One server per test module (tests use their own topics and subscriptions);
tests that need other push settings start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pushkit import PUSH_ENV, Endpoint
from support import LakeSpec, Server, start_server, stop_server

from lakepubsub import Engine


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint()
    yield ep
    ep.close()


@pytest.fixture(scope="module")
def push_lake(tmp_path_factory: pytest.TempPathFactory) -> LakeSpec:
    return LakeSpec(str(tmp_path_factory.mktemp("push-lake")), {})


@pytest.fixture(scope="module")
def server(push_lake: LakeSpec) -> Iterator[Server]:
    srv = start_server(push_lake, extra_env=PUSH_ENV)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="module")
def lake_engine(push_lake: LakeSpec) -> Iterator[Engine]:
    """An engine in the test process on the server's lake, to look at stored state."""
    with Engine(push_lake.settings()) as engine:
        yield engine
