"""A real uvicorn server process on 127.0.0.1 serving a test lake."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from support import LakeSpec, Server, start_server, stop_server


@pytest.fixture
def server(lake: LakeSpec) -> Iterator[Server]:
    srv = start_server(lake)
    yield srv
    stop_server(srv)


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client
