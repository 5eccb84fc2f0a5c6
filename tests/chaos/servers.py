"""The processes a chaos run drives: a moto S3 server and lakepubsub API servers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.harness.lakepubsub_server import LakePubSubServer
from bench.harness.moto_server import S3_CREDENTIALS, MotoServer
from bench.harness.ports import free_port

REPO = Path(__file__).resolve().parents[2]
BUCKET = "lakepubsub-chaos"


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
    """One uvicorn process serving the API on a fixed port; can be killed and restarted.
    Started by the harness's launcher (bench/harness/lakepubsub_server.py), with this
    process's environment."""

    def __init__(
        self,
        lake: Lake,
        *,
        pull_wait_s: float = 1.0,
        log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.lake = lake
        self.log = log
        self.launcher = LakePubSubServer(
            lake=lake.uri,
            storage_options=lake.served_options,
            pull_wait_s=pull_wait_s,
            env=env,
            port=free_port(),
            log=log,
            log_level="warning",
            inherit_env=True,
        )
        self.port = self.launcher.port
        self.url = f"http://127.0.0.1:{self.port}"
        self.starts = 0
        self.start_seconds: list[float] = []  # time from spawn to serving, per start

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.launcher.process

    def start(self) -> None:
        started = time.monotonic()
        if self.launcher.directory is None:
            self.launcher.__enter__()
        else:
            self.launcher.restart()
        self.starts += 1
        self.start_seconds.append(time.monotonic() - started)

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, queued work is lost mid-flight."""
        self.launcher.kill()

    def stop(self) -> None:
        self.launcher.__exit__()

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
