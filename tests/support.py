"""Helpers shared by the test packages: lakes on local disk and on a local S3."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

import httpx

from bench.harness.lakepubsub_server import LakePubSubServer
from bench.harness.moto_server import MotoServer  # noqa: F401 (the type of the moto_server fixture)
from bench.harness.ports import free_port, wait_for_port  # noqa: F401 (for the tests)
from lakepubsub import Settings


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
    launcher: LakePubSubServer

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


def start_server(
    lake: LakeSpec, *, extra_env: dict[str, str] | None = None, app: str = "api.app:create_app"
) -> Server:
    """A uvicorn process serving the factory ``app`` on ``lake``: ``module:function``,
    importable from the repository root, or ``path/to/dir/module:function``. Started by
    the harness's launcher (bench/harness/lakepubsub_server.py); the test's own
    ``LAKEPUBSUB_*`` settings reach it, under ``extra_env``."""
    inherited = {k: v for k, v in os.environ.items() if k.startswith("LAKEPUBSUB_")}
    launcher = LakePubSubServer(
        lake=lake.uri,
        storage_options=lake.storage_options,
        pull_wait_s=2.0,
        app=app,
        env={**inherited, "LAKEPUBSUB_PULL_WAIT_S": "2", **(extra_env or {})},
    ).__enter__()
    assert launcher.process is not None
    return Server(launcher.url, lake, launcher.process, launcher)


def stop_server(server: Server) -> None:
    server.launcher.__exit__()
