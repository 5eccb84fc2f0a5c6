"""The one lakepubsub server launcher, for the benchmarks and the tests: an API process
(uvicorn, or ``lakepubsub serve`` with ``serve=True``) on a fresh lake (local or moto S3)
or a given one, on a port it picks or a fixed one (then it can be killed and restarted);
it creates topics and subscriptions over REST and checks through an in-process
``Engine`` what the lake holds. bench/README.md, "One entry point, one harness".
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.harness import scratch
from bench.harness.moto_server import DIRECTORY_BUCKET_ENV, MotoServer
from bench.harness.ports import free_port
from bench.harness.processes import stop
from bench.harness.s3_proxy import KINDS, S3Proxy, request_kind
from lakepubsub import Engine, Settings, constants
from lakepubsub.resources.names import SubscriptionName, TopicName

REPO = Path(__file__).resolve().parents[2]
PROJECT = "bench"
BUCKET = "lakepubsub-bench"
# The server imports pyarrow, deltalake and FastAPI: seconds on a loaded machine.
START_TIMEOUT_S = 60.0
# A stopping server commits what is queued first.
STOP_TIMEOUT_S = 30.0
# Bounds one request; a hung server fails the run instead of stalling it.
REQUEST_TIMEOUT_S = 120.0
# Acks reach the lease table within the server's lease flush window (30 s on S3:
# held in memory, then committed together) and a commit's time after it.
ACKS_SETTLE_TIMEOUT_S = 10.0 + constants.S3_LEASE_FLUSH_MS / 1000
# S3 request kinds counted from moto's log (as the proxy counts them); "post" (multipart,
# batch delete) is billed as PUT, "delete" is free.
S3_KINDS = KINDS
_COMMITS = "lakepubsub_delta_commits_total"
_CONFLICTS = "lakepubsub_commit_conflicts_total"
_CALLS = "lakepubsub_grpc_requests_total"
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
# moto (werkzeug) logs one line per request: ... "PUT /bucket/key?query HTTP/1.1" 200 -
_MOTO_REQUEST = re.compile(rb'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (/[^ ]*) HTTP/[0-9.]+')


class BenchError(RuntimeError):
    """A run did not do what the case says (an error answer, lost messages...)."""


class MotoS3(MotoServer):
    """A moto S3 server subprocess with one bucket; counts requests from its log."""

    def __init__(self, directory: Path, more_buckets: tuple[str, ...] = ()) -> None:
        self.log_path = directory / "moto.log"
        super().__init__(BUCKET, log=self.log_path, more_buckets=more_buckets)

    def log_offset(self) -> int:
        return self.log_path.stat().st_size

    def requests_since(self, offset: int) -> Counter[str]:
        """Requests moto answered since ``offset`` of its log, by kind (``S3_KINDS``)."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            text = log.read()
        kinds: Counter[str] = Counter()
        for method, target in _MOTO_REQUEST.findall(text):
            path, _, query = target.decode().partition("?")
            kinds[request_kind(method.decode(), path, query)] += 1
        return kinds


@dataclass(frozen=True)
class Counters:
    """Server counters at one moment; the difference of two is what a case cost."""

    commits: int
    conflicts: int
    moto_log_offset: int
    # The Delta commits by table ("messages", "intake", "leases"...).
    commits_by_table: dict[str, float] = field(default_factory=dict)
    # The unary gRPC calls answered, by method ("Publish", "Acknowledge"...).
    calls_by_method: dict[str, float] = field(default_factory=dict)


class LakePubSubServer:
    """A lakepubsub API server subprocess on a fresh lake, on ``lake`` (with its
    ``storage_options``), or on the lake of the running server it ``joins``.

    A fresh lake is a directory in a scratch directory, or with ``s3`` a prefix
    in the bucket of a moto server started for it, reached through a counting,
    delaying proxy (``bench/harness/s3_proxy.py``) when ``proxy`` names a latency
    profile. ``url``, ``pid``, ``lake`` and ``storage_options`` are set inside
    the ``with`` block; leaving it stops the servers and releases the directory.
    """

    def __init__(
        self,
        *,
        s3: bool = False,
        serve: bool = False,
        pull_wait_s: float = 1.0,
        joins: LakePubSubServer | None = None,
        lake: str | None = None,
        storage_options: dict[str, str] | None = None,
        proxy: str | None = None,
        env: dict[str, str] | None = None,
        app: str = "api.app:create_app",
        intake_bucket: str | None = None,
        port: int = 0,
        log: Path | None = None,
        log_level: str = "info",
        inherit_env: bool = False,
        grpc_port: bool = False,
        workers: int = 1,
        code: Path = REPO,
    ) -> None:
        self._joins = joins
        # The checkout whose lakepubsub the server runs (its working directory, first
        # on its import path): this one, or another revision's (``bench ab``).
        self._code = code
        self.s3: bool = s3 if joins is None else joins.s3
        self.serve = serve
        self._pull_wait_s = pull_wait_s
        self._proxy_profile = proxy
        self._env = env or {}
        # With ``s3``: a second moto bucket holding the intake (LAKEPUBSUB_INTAKE_LAKE),
        # a directory bucket's name for S3 Express One Zone beside a Standard lake.
        self._intake_bucket = intake_bucket
        # A factory ``module:function`` importable from the repository, or ``dir/module:function``.
        self._app = app
        self.system = "lakepubsub-s3" if self.s3 else "lakepubsub"
        self.proxy: S3Proxy | None = None
        self.directory: Path | None = None
        self.moto: MotoS3 | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.pid = 0
        self.lake = lake or ""
        self.storage_options: dict[str, str] = storage_options or {}
        # A fixed ``port`` (kept for ``restart``); the server's output appended to ``log``
        # (by default a file in the scratch directory); below "info" only with a fixed port
        # (the launcher reads the port a port-0 server chose from its log).
        self.port, self._log, self._log_level = port, log, log_level
        self.log_path: Path | None = None
        # Whether the server gets this process's whole environment, or none of its
        # LAKEPUBSUB_ and AWS_ settings.
        self._inherit_env = inherit_env
        # ``serve --grpc-port``: Google's clients reach grpcio on a port of its own
        # (chosen once, kept for ``restart``), not through the shared port's relay.
        self.grpc_port = free_port() if grpc_port and serve else 0
        # ``serve --workers``: processes under one supervisor (``pid``), each a peer on
        # the lake; ``counters`` then reads the one a connection reaches.
        self.workers = workers if serve else 1

    def __enter__(self) -> LakePubSubServer:
        self.directory = scratch.directory("bench-lakepubsub-")
        try:
            self._start(self.directory)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, directory: Path) -> None:
        if self._joins is not None:
            self.lake = self._joins.lake
            self.storage_options = self._joins.storage_options
        elif self.lake:
            pass
        elif self.s3:
            more = (self._intake_bucket,) if self._intake_bucket else ()
            moto = MotoS3(directory, more)
            self.moto = moto
            moto.__enter__()
            self.lake = f"s3://{BUCKET}/lake"
            self.storage_options = moto.storage_options
            if self._intake_bucket:
                self._env = {
                    **DIRECTORY_BUCKET_ENV,
                    "LAKEPUBSUB_INTAKE_LAKE": f"s3://{self._intake_bucket}/lake",
                    **self._env,
                }
            if self._proxy_profile is not None:
                self.proxy = S3Proxy(
                    moto.endpoint, self._proxy_profile, directory / "proxy.log"
                ).__enter__()
                self.storage_options = {
                    **self.storage_options,
                    "AWS_ENDPOINT_URL": self.proxy.endpoint,
                }
        else:
            self.lake = str(directory / "lake")
        self.log_path = self._log or directory / "server.log"
        self._spawn()

    def _spawn(self) -> None:
        # Only this run's settings (unless ``inherit_env``): nothing inherited points the
        # server elsewhere.
        env = dict(os.environ)
        if not self._inherit_env:
            env = {k: v for k, v in env.items() if not k.startswith(("LAKEPUBSUB_", "AWS_"))}
        env.update(self.storage_options)
        env.update(LAKEPUBSUB_LAKE=self.lake, LAKEPUBSUB_PULL_WAIT_S=str(self._pull_wait_s))
        env.update(self._env)
        where, _, spec = self._app.rpartition("/")
        command = [
            sys.executable, "-m", "uvicorn", spec, "--factory",
            *(["--app-dir", where] if where else []),
            "--host", "127.0.0.1", "--port", str(self.port), "--no-access-log",
            "--log-level", self._log_level,
            # As ``lakepubsub serve``: with uvicorn's default of 5 s, the idle
            # expiry of httpx's pool too, a server closing an idle connection
            # meets a client sending on it, and the client sees a reset.
            "--timeout-keep-alive", str(constants.KEEP_ALIVE_S),
        ]  # fmt: skip
        if self.serve:
            command = [
                sys.executable, "-c", "from lakepubsub.cli import main; main()",
                "--lake", self.lake, "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--no-access-log", "--log-level", self._log_level,
                *(["--grpc-port", str(self.grpc_port)] if self.grpc_port else []),
                *(["--workers", str(self.workers)] if self.workers > 1 else []),
            ]  # fmt: skip
        log_path = self.log_path
        assert log_path is not None
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=self._code, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.pid = self.process.pid
        self.port = self.port or _wait_listening(self.process, log_path)
        self.url = f"http://127.0.0.1:{self.port}"
        _wait_healthy(self.process, f"{self.url}/healthz", log_path)

    def restart(self) -> None:
        """The server process again, on the same lake and port (after ``kill`` or ``stop``)."""
        self._spawn()

    def kill(self) -> None:
        """SIGKILL: no clean stop; what the server held in memory is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the lake and port are kept."""
        if self.process is not None:
            stop(self.process, timeout_s)

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.process = None
        if self.proxy is not None:
            self.proxy.__exit__()
            self.proxy = None
        if self.moto is not None:
            self.moto.__exit__()
            self.moto = None
        if self.directory is not None:
            scratch.release(self.directory)
            self.directory = None

    @property
    def emulator_host(self) -> str:
        """``PUBSUB_EMULATOR_HOST`` for Google's clients (gRPC; ``serve=True`` servers only)."""
        if self.grpc_port:
            return f"127.0.0.1:{self.grpc_port}"
        return self.url.removeprefix("http://")

    def counters(self) -> Counters:
        """This server's Delta commit and conflict counters, and moto's log offset."""
        text = httpx.get(f"{self.url}/metrics", timeout=REQUEST_TIMEOUT_S).text
        by_table: dict[str, float] = {}
        calls: dict[str, float] = {}
        conflicts = 0.0
        for line in text.splitlines():
            name, _, rest = line.partition("{")
            if name == _COMMITS:
                table = rest.partition('table="')[2].partition('"')[0]
                by_table[table] = by_table.get(table, 0.0) + float(rest.rpartition(" ")[2])
            elif name == _CONFLICTS:
                conflicts += float(rest.rpartition(" ")[2])
            elif name == _CALLS:
                method = rest.partition('method="')[2].partition('"')[0]
                calls[method] = calls.get(method, 0.0) + float(rest.rpartition(" ")[2])
        return Counters(
            commits=round(sum(by_table.values())),
            conflicts=round(conflicts),
            moto_log_offset=self.moto.log_offset() if self.moto else 0,
            commits_by_table=by_table,
            calls_by_method=calls,
        )

    def engine(self) -> Engine:
        """A lakepubsub Engine on this server's lake, in this process, to check what it
        stored (``with server.engine() as engine``: leaving the block closes it)."""
        return Engine(Settings(lake=self.lake, storage_options=self.storage_options))

    def create_topic(self) -> str:
        """A fresh topic; returns its path (``projects/p/topics/t``)."""
        path = f"projects/{PROJECT}/topics/bench-{uuid.uuid4().hex[:12]}"
        httpx.put(f"{self.url}/v1/{path}", json={}, timeout=REQUEST_TIMEOUT_S).raise_for_status()
        return path

    def create_subscription(self, topic: str, *, ack_deadline_s: int, **fields: Any) -> str:
        """A fresh subscription; ``fields`` are more of its REST body (``filter``...)."""
        path = f"projects/{PROJECT}/subscriptions/bench-{uuid.uuid4().hex[:12]}"
        body = {"topic": topic, "ackDeadlineSeconds": ack_deadline_s, **fields}
        answer = httpx.put(f"{self.url}/v1/{path}", json=body, timeout=REQUEST_TIMEOUT_S)
        answer.raise_for_status()
        return path

    def topic_and_subscription(self, *, ack_deadline_s: int, **fields: Any) -> tuple[str, str]:
        """A fresh topic and one fresh subscription to it (``fields`` as above)."""
        topic = self.create_topic()
        return topic, self.create_subscription(topic, ack_deadline_s=ack_deadline_s, **fields)

    def topic_head(self, topic: str) -> int:
        """How many messages the topic holds."""
        with self.engine() as engine:
            return int(engine.topic_head(TopicName.parse(topic)))

    def check_stored(self, topic: str, total: int) -> None:
        """The topic's head is ``total``: every published message is in the lake, once."""
        if (head := self.topic_head(topic)) != total:
            raise BenchError(f"topic holds {head} messages, {total} were published")

    def check_all_acked(self, topic: str, subscription: str, total: int) -> None:
        """Wait until the subscription's cursor is past all ``total`` messages, none outstanding."""
        self.check_stored(topic, total)
        with self.engine() as engine:
            deadline = time.monotonic() + ACKS_SETTLE_TIMEOUT_S
            while True:
                state = engine.subscription_state(SubscriptionName.parse(subscription))
                if state.outstanding() == 0 and state.cursor.frontier == total:
                    return
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"after the run: frontier {state.cursor.frontier} of {total}, "
                        f"{state.outstanding()} outstanding"
                    )
                time.sleep(0.05)


@contextlib.contextmanager
def servers(*, fresh: bool, **options: Any) -> Iterator[Callable[[], ContextManager[Any]]]:
    """A run's server: a fresh one per run, or without ``fresh`` one shared by every run
    (each run still on fresh topics: seconds less per run, for CI)."""
    with contextlib.ExitStack() as stack:
        shared = None if fresh else stack.enter_context(LakePubSubServer(**options))
        yield lambda: contextlib.nullcontext(shared) if shared else LakePubSubServer(**options)


def _wait_listening(process: subprocess.Popen[bytes], log_path: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        listening = _LISTENING.search(log_path.read_text(errors="replace"))
        if listening:
            return int(listening.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.02)
    raise BenchError(f"lakepubsub did not start:\n{log_path.read_text(errors='replace')}")


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == httpx.codes.OK:
                return
        time.sleep(0.05)
    raise BenchError(f"{url} did not answer:\n{log_path.read_text(errors='replace')}")
