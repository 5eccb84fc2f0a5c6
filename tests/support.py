"""Helpers shared by the test packages: lakes on local disk and on a local S3."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import httpx

from bench.harness.moto_server import MotoServer  # noqa: F401 (the type of the moto_server fixture)
from bench.harness.ports import free_port, wait_for_port
from lakepubsub import Settings, constants


class Clock:
    """A clock the test drives (``Settings.clock_us``): lease expiry without sleeping."""

    def __init__(self, now_us: int = 1_000_000_000_000) -> None:
        self.now_us = now_us

    def __call__(self) -> int:
        return self.now_us


@dataclass(frozen=True)
class LakeSpec:
    """Where a test's lake lives and how a process (or subprocess) reaches it."""

    uri: str
    storage_options: dict[str, str]

    def settings(self, **overrides: object) -> Settings:
        # Engines in one test process are not peered, so nothing tells one of the
        # other's commits: they look every 50 ms, on S3 too (tests/test_idle.py
        # runs the S3 default, where a look is rare and commits are told).
        base: dict[str, object] = {
            "pull_wait_s": 2.0,
            "pull_poll_interval_s": 0.05,
            "change_check_s": 0.05,
            # Every cycle commits, on S3 too, so a test may read the lease table
            # right after an answer (tests/test_idle.py runs the S3 defaults).
            "lease_flush_ms": 0.0,
        }
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


def start_server(
    lake: LakeSpec, *, extra_env: dict[str, str] | None = None, app: str = "api.app:create_app"
) -> Server:
    """A uvicorn process serving the factory ``app`` on ``lake``: ``module:function``,
    importable from the repository root, or ``path/to/dir/module:function``."""
    where, _, spec = app.rpartition("/")
    app_dir = ["--app-dir", where] if where else []
    env = {
        **lake.env(),
        "LAKEPUBSUB_PULL_WAIT_S": "2",
        **(extra_env or {}),
    }
    # A port checked free may still be taken before the child binds it (another test
    # run on the machine): a server that exits before listening gets a new port.
    for attempt in range(3):
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", spec, "--factory", *app_dir,
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                "--timeout-keep-alive", str(constants.KEEP_ALIVE_S),  # as lakepubsub serve
            ],
            env=env,
        )  # fmt: skip
        try:
            wait_for_port(port, process=process)
        except RuntimeError:
            if attempt == 2:
                raise
            continue
        except TimeoutError:
            process.kill()
            raise
        return Server(f"http://127.0.0.1:{port}", lake, process)
    raise AssertionError("unreachable")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
