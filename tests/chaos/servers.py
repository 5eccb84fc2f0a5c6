"""The processes a chaos run drives: a moto S3 server and lakepubsub API servers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.harness.moto_server import S3_CREDENTIALS, MotoServer
from bench.harness.ports import free_port
from lakepubsub import constants

REPO = Path(__file__).resolve().parents[2]
BUCKET = "lakepubsub-chaos"
# How long a server may take to start serving (imports pyarrow, deltalake, FastAPI).
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Lake:
    """Where a run's lake lives: a local directory or a prefix in the moto bucket.

    ``options`` reach storage directly; ``served_options`` are what the API
    servers get (through the fault proxy, when there is one).
    """

    uri: str
    options: dict[str, str] = field(default_factory=dict)
    served_options: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {"LAKEPUBSUB_LAKE": self.uri, **self.served_options}

    def via(self, endpoint: str) -> Lake:
        """The same lake, served through another S3 endpoint (the fault proxy)."""
        return Lake(self.uri, self.options, {**self.options, "AWS_ENDPOINT_URL": endpoint})


@contextlib.contextmanager
def local_lake() -> Iterator[Lake]:
    with tempfile.TemporaryDirectory(prefix="lakepubsub-chaos-") as root:
        yield Lake(os.path.join(root, "lake"))


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server subprocess with the chaos bucket; yields its endpoint URL."""
    with MotoServer(BUCKET) as moto:
        yield moto.endpoint


def s3_lake(endpoint: str) -> Lake:
    options = {"AWS_ENDPOINT_URL": endpoint, **S3_CREDENTIALS}
    return Lake(f"s3://{BUCKET}/{uuid.uuid4().hex}", options, options)


class ApiServer:
    """One uvicorn process serving the API on a fixed port; can be killed and restarted."""

    def __init__(self, lake: Lake, *, pull_wait_s: float = 1.0, log: Path | None = None) -> None:
        self.lake = lake
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.pull_wait_s = pull_wait_s
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.start_seconds: list[float] = []  # time from spawn to serving, per start

    def start(self) -> None:
        started = time.monotonic()
        env = {**os.environ, **self.lake.env(), "LAKEPUBSUB_PULL_WAIT_S": str(self.pull_wait_s)}
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory",
                    "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
                    "--timeout-keep-alive", str(constants.KEEP_ALIVE_S),  # as lakepubsub serve
                ],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=out,
            )  # fmt: skip
        finally:
            if self.log:
                out.close()  # type: ignore[union-attr]
        self.starts += 1
        self.wait_ready()
        self.start_seconds.append(time.monotonic() - started)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"server on port {self.port} exited: {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise TimeoutError(f"server on port {self.port} did not become ready")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, queued work is lost mid-flight."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> dict[tuple[str, str], float]:
        """This process's Prometheus counters, keyed by (name, labels text)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return parse_metrics(text)


# Log lines that mean a request or a worker failed on an unexpected exception.
UNHANDLED_MARKERS = (
    "Exception in ASGI application",
    "unhandled error",
    "crashed",
    "publish commit failed",
)


def unhandled_errors(log: Path) -> list[str]:
    """The unexpected-exception reports in a server log, each with its exception line."""
    if not log.exists():
        return []
    lines = log.read_text(errors="replace").splitlines()
    found = []
    for i, line in enumerate(lines):
        if any(marker in line for marker in UNHANDLED_MARKERS):
            # the exception line is the first unindented line after the traceback
            tail = (t for t in lines[i + 1 :] if t and not t.startswith((" ", "Traceback")))
            found.append(f"{line.strip()} -> {next(tail, '?')[:200]}")
    return found


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        name, _, labels = series.partition("{")
        found[(name, labels.rstrip("}"))] = float(value)
    return found
