"""A real uvicorn server process on 127.0.0.1 serving a test lake."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from support import LakeSpec, free_port, wait_for_port


@dataclass
class Server:
    url: str
    lake: LakeSpec
    process: subprocess.Popen[bytes]

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


def start_server(lake: LakeSpec, *, extra_env: dict[str, str] | None = None) -> Server:
    port = free_port()
    env = {
        **lake.env(),
        "LAKEPUBSUB_PULL_WAIT_S": "2",
        **(extra_env or {}),
    }
    process = subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        ],
        env=env,
    )  # fmt: skip
    try:
        wait_for_port(port)
    except TimeoutError:
        process.kill()
        raise
    return Server(f"http://127.0.0.1:{port}", lake, process)


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture
def server(lake: LakeSpec) -> Iterator[Server]:
    srv = start_server(lake)
    yield srv
    stop_server(srv)


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client
