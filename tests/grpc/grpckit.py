"""A real ``lakepubsub serve`` process for the gRPC door's tests, and helpers."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from support import LakeSpec, free_port, wait_for_port

LAKEPUBSUB = str(Path(sys.executable).with_name("lakepubsub"))


@dataclass
class Serve:
    """A ``lakepubsub serve`` process: REST at ``url``, gRPC at ``host``, one port."""

    lake: LakeSpec
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_serve(
    lake: LakeSpec, log_dir: Path, *, extra_env: dict[str, str] | None = None, port: int = 0
) -> Serve:
    port = port or free_port()
    log_path = log_dir / f"serve-{port}-{uuid.uuid4().hex[:6]}.log"
    env = {**lake.env(), "LAKEPUBSUB_PULL_WAIT_S": "2", **(extra_env or {})}
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                LAKEPUBSUB,
                "--lake",
                lake.uri,
                "serve",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, process=process)
    except (TimeoutError, RuntimeError):
        process.kill()
        raise
    return Serve(lake, port, process, log_path)


def stop_serve(serve: Serve) -> None:
    serve.process.terminate()
    try:
        serve.process.wait(timeout=40)
    except subprocess.TimeoutExpired:
        serve.process.kill()
        serve.process.wait()


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
