"""A real ``lakepubsub serve`` process for the gRPC door's tests, and helpers."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from support import LakeSpec, free_port

from bench.harness.lakepubsub_server import LakePubSubServer

# The console script, for tests that start ``lakepubsub serve`` as the harness cannot (TLS).
LAKEPUBSUB = str(Path(sys.executable).with_name("lakepubsub"))
# ``lakepubsub serve``'s SIGTERM waits for open streams to end.
STOP_TIMEOUT_S = 40.0


@dataclass
class Serve:
    """A ``lakepubsub serve`` process: REST at ``url``, gRPC at ``host``, one port."""

    lake: LakeSpec
    launcher: LakePubSubServer

    @property
    def port(self) -> int:
        return self.launcher.port

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self.launcher.process is not None
        return self.launcher.process

    @property
    def host(self) -> str:
        return self.launcher.emulator_host

    @property
    def url(self) -> str:
        return self.launcher.url

    def log(self) -> str:
        assert self.launcher.log_path is not None
        return self.launcher.log_path.read_text(errors="replace")


def start_serve(
    lake: LakeSpec, log_dir: Path, *, extra_env: dict[str, str] | None = None, port: int = 0
) -> Serve:
    """Started by the harness's launcher (bench/harness/lakepubsub_server.py), with this
    process's environment; ``port`` fixed, for a restart on the same one."""
    port = port or free_port()
    launcher = LakePubSubServer(
        serve=True,
        lake=lake.uri,
        storage_options=lake.storage_options,
        pull_wait_s=2.0,
        env=extra_env,
        port=port,
        log=log_dir / f"serve-{port}-{uuid.uuid4().hex[:6]}.log",
        log_level="warning",
        inherit_env=True,
    )
    return Serve(lake, launcher.__enter__())


def stop_serve(serve: Serve) -> None:
    serve.launcher.stop(STOP_TIMEOUT_S)
    serve.launcher.__exit__()


@dataclass
class Names:
    tag: str
    project: str = "demo"

    def topic(self, name: str = "topic") -> str:
        return f"projects/{self.project}/topics/{name}-{self.tag}"

    def subscription(self, name: str = "sub") -> str:
        return f"projects/{self.project}/subscriptions/{name}-{self.tag}"

    def snapshot(self, name: str = "snap") -> str:
        return f"projects/{self.project}/snapshots/{name}-{self.tag}"


def rest(serve: Serve) -> httpx.Client:
    return httpx.Client(base_url=serve.url, timeout=30)


def wait_until(predicate: object, timeout_s: float = 30.0, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval_s)
    return bool(predicate())  # type: ignore[operator]
