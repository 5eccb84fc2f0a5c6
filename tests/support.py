"""Helpers shared by the test packages: lakes on local disk and on a local S3."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx

from lakepubsub import Settings

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
