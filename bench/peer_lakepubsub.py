"""The lakepubsub peer: the shared workload over Pub/Sub REST against a local uvicorn server.

Setup, the same for every case and run: a fresh server (``python -m uvicorn
api.app:create_app --factory``, one process, on 127.0.0.1 and a port it picks
itself, with ``lakepubsub serve``'s keep-alive timeout) on a fresh lake in a
temporary directory, or with ``s3=True`` in a bucket of a fresh moto S3 server
subprocess; and a fresh topic and subscription (ack deadline from the workload)
per run. Every client is its own process (one ``httpx.Client`` with keep-alive
each), as the NATS side's clients are, and request bodies are built before the
common start. Client processes are forked from a clean forkserver that has
this module imported: starting eight takes a fraction of a second instead of
seconds.

How the workload maps onto Pub/Sub REST:

- "publish a batch of N": one ``:publish`` request carrying N messages; the
  next is sent once it is answered, which is after the messages are committed.
- "pull up to N": one ``:pull`` with ``maxMessages`` N and
  ``returnImmediately: false``. The server's long-poll wait is set to the NATS
  side's idle fetch timeout (``PULL_WAIT_S``), so an idle consumer checks as
  often whether it is done.
- "acknowledge": one ``:acknowledge`` with every ack id of the pull, answered
  after its commit, before the next pull. The latency consumer acknowledges
  from a second thread instead, so its next pull does not wait for the ack
  (the NATS side's acks are fire-and-forget).
- the latency publisher sends one message per request at the offered rate,
  keeps up to ``LATENCY_MAX_IN_FLIGHT`` requests in flight, and stamps the time
  it hands a message to HTTP in the ``bench-sent-ns`` attribute.

After every run the lake itself is checked: the topic holds exactly the
published messages, and every consumed subscription has acknowledged all of
them with none outstanding. Delta commits and commit conflicts are read from
the server's ``/metrics`` around the timed part; on S3, requests are counted
from moto's request log over the same window.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import multiprocessing as mp
import os
import queue
import re
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import httpx
import orjson

from bench import scratch
from bench import workload as w
from bench.harness.moto_server import MotoServer
from bench.harness.processes import stop
from bench.harness.s3_proxy import S3Proxy
from bench.procstats import ProcessMeter, ProcessUsage
from lakepubsub import constants

SYSTEM = "lakepubsub"
SYSTEM_S3 = "lakepubsub-s3"
PROJECT = "bench"
# Carries the publisher's send time (time.monotonic_ns: one clock for all
# processes on a Linux machine) to the latency consumer.
SENT_NS_ATTRIBUTE = "bench-sent-ns"
REPO = Path(__file__).resolve().parents[1]

# The server imports pyarrow, deltalake and FastAPI: seconds on a loaded machine.
SERVER_START_TIMEOUT_S = 60.0
# A stopping server commits what is queued first.
SERVER_STOP_TIMEOUT_S = 30.0
# Building the request bodies of 200,000 messages takes a few seconds.
WORKERS_READY_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 900.0
# Bounds one request; a hung server fails the run instead of stalling it.
REQUEST_TIMEOUT_S = 120.0
# The server's long-poll wait: the NATS peer's idle fetch timeout.
PULL_WAIT_S = 1.0
# Acks reach the lease table within the server's lease flush window (30 s on S3:
# held in memory, then committed together) and a commit's time after it.
ACKS_SETTLE_TIMEOUT_S = 10.0 + constants.S3_LEASE_FLUSH_MS / 1000
# The latency consumer gives up when nothing new arrives for this long.
STALL_TIMEOUT_S = 60.0
# Backlogs are published, untimed, by this many processes in batches of this
# size, as on the NATS side.
PREFILL_CLIENTS = 2
PREFILL_BATCH = 1000
# Enough for 1,000 msgs/s at up to 64 ms per publish round trip.
LATENCY_MAX_IN_FLIGHT = 64

# Storage figures this peer adds to the shared ones (NATS has no counterpart).
DELTA_COMMITS_PER_MILLION = "delta_commits_per_million_msgs"
COMMIT_CONFLICTS_PER_MILLION = "commit_conflicts_per_million_msgs"
COMMITS_PER_MILLION = "commits/1M msgs"
REQUESTS_PER_MILLION = "requests/1M msgs"
# S3 request kinds counted from moto's log; "post" (multipart, batch delete) is
# billed as PUT, "delete" is free.
S3_KINDS = ("put", "post", "list", "get", "head", "delete")
BUCKET = "lakepubsub-bench"

_JSON = {"content-type": "application/json"}
_SENT_KEY = SENT_NS_ATTRIBUTE.encode()
_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000
_BYTES_PER_MIB = 1024 * 1024
_MILLION = 1_000_000
_COMMITS = "lakepubsub_delta_commits_total"
_CONFLICTS = "lakepubsub_commit_conflicts_total"
_LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
# moto (werkzeug) logs one line per request: ... "PUT /bucket/key?query HTTP/1.1" 200 -
_MOTO_REQUEST = re.compile(rb'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (/[^ ]*) HTTP/[0-9.]+')


class BenchError(RuntimeError):
    """A run did not do what the workload says (an error answer, lost messages...)."""


# --- storage: moto S3 with a request count ------------------------------------


class MotoS3(MotoServer):
    """A moto S3 server subprocess with one bucket; counts requests from its log."""

    def __init__(self, directory: Path) -> None:
        self.log_path = directory / "moto.log"
        super().__init__(BUCKET, log=self.log_path)

    def log_offset(self) -> int:
        return self.log_path.stat().st_size

    def requests_since(self, offset: int) -> Counter[str]:
        """Requests moto answered since ``offset`` of its log, by kind (``S3_KINDS``)."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            text = log.read()
        kinds: Counter[str] = Counter()
        for method, target in _MOTO_REQUEST.findall(text):
            kinds[_request_kind(method.decode(), target.decode())] += 1
        return kinds


def _request_kind(method: str, target: str) -> str:
    path, _, _ = target.partition("?")
    if method == "GET":
        # Path-style addressing: a GET on the bucket itself lists it.
        return "list" if path.strip("/").count("/") == 0 else "get"
    return method.lower() if method.lower() in S3_KINDS else "get"


# --- the server ---------------------------------------------------------------


class LakePubSubServer:
    """A lakepubsub API server subprocess on a fresh lake, or on the lake of the
    running server it ``joins`` (several processes serving one lake).

    The lake is a directory in a temporary directory, or with ``s3`` a prefix
    in the bucket of a moto server started for it. ``url``, ``pid``, ``lake``
    and ``storage_options`` are set inside the ``with`` block; leaving it
    stops the servers and removes the directory (server and moto logs too).
    """

    def __init__(
        self,
        *,
        s3: bool = False,
        pull_wait_s: float = PULL_WAIT_S,
        grpc: bool = False,
        joins: LakePubSubServer | None = None,
        proxy: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        # ``joins``: serve the lake of that running server instead of a fresh one.
        self._joins = joins
        self.s3 = s3 if joins is None else joins.s3
        self._pull_wait_s = pull_wait_s
        # ``lakepubsub serve`` (REST and gRPC on one port) instead of plain uvicorn.
        self.grpc = grpc
        self.system = SYSTEM_S3 if self.s3 else SYSTEM
        # With ``s3``: the server reaches moto through a counting, delaying proxy
        # (bench/harness/s3_proxy.py) with this latency profile.
        self._proxy_profile = proxy
        self.proxy: S3Proxy | None = None
        self._env = env or {}
        self.directory: Path | None = None
        self.moto: MotoS3 | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.pid = 0
        self.lake = ""
        self.storage_options: dict[str, str] = {}

    def __enter__(self) -> LakePubSubServer:
        self.directory = scratch.directory("bench-lakepubsub-")
        try:
            self._start(self.directory)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self, directory: Path) -> None:
        if self._joins is not None:
            self.lake = self._joins.lake
            self.storage_options = self._joins.storage_options
        elif self.s3:
            self.moto = MotoS3(directory).__enter__()
            self.lake = f"s3://{BUCKET}/lake"
            self.storage_options = self.moto.storage_options
            if self._proxy_profile is not None:
                self.proxy = S3Proxy(
                    self.moto.endpoint, self._proxy_profile, directory / "proxy.log"
                ).__enter__()
                self.storage_options = {
                    **self.storage_options,
                    "AWS_ENDPOINT_URL": self.proxy.endpoint,
                }
        else:
            self.lake = str(directory / "lake")
        # Only this run's settings: nothing inherited points the server elsewhere.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEPUBSUB_", "AWS_"))}
        env.update(self.storage_options)
        env.update(LAKEPUBSUB_LAKE=self.lake, LAKEPUBSUB_PULL_WAIT_S=str(self._pull_wait_s))
        env.update(self._env)
        log_path = directory / "server.log"
        command = [
            sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory",
            "--host", "127.0.0.1", "--port", "0", "--no-access-log", "--log-level", "info",
            # As ``lakepubsub serve``: with uvicorn's default of 5 s, the idle
            # expiry of httpx's pool too, a server closing an idle connection
            # meets a client sending on it, and the client sees a reset (the
            # latency case at 1,000 msgs/s failed so in 4 runs of 5).
            "--timeout-keep-alive", str(constants.KEEP_ALIVE_S),
        ]  # fmt: skip
        if self.grpc:
            command = [
                sys.executable, "-c", "from lakepubsub.cli import main; main()",
                "--lake", self.lake, "serve", "--host", "127.0.0.1", "--port", "0",
                "--no-access-log",  # as the uvicorn command above
            ]  # fmt: skip
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.pid = self._process.pid
        self.url = f"http://127.0.0.1:{_wait_listening(self._process, log_path)}"
        _wait_healthy(self._process, f"{self.url}/healthz", log_path)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._process is not None:
            stop(self._process, SERVER_STOP_TIMEOUT_S)
            self._process = None
        if self.proxy is not None:
            self.proxy.__exit__(None, None, None)
            self.proxy = None
        if self.moto is not None:
            self.moto.__exit__(None, None, None)
            self.moto = None
        if self.directory is not None:
            scratch.release(self.directory)
            self.directory = None

    @property
    def emulator_host(self) -> str:
        """``PUBSUB_EMULATOR_HOST`` for Google's clients (gRPC; ``grpc=True`` servers only)."""
        return self.url.removeprefix("http://")

    def counters(self) -> _Counters:
        """This server's Delta commit and conflict counters (all tables), and moto's log offset."""
        text = httpx.get(f"{self.url}/metrics", timeout=REQUEST_TIMEOUT_S).text
        found = {_COMMITS: 0.0, _CONFLICTS: 0.0}
        for line in text.splitlines():
            name, _, rest = line.partition("{")
            if name in found:
                found[name] += float(rest.rpartition(" ")[2])
        return _Counters(
            commits=round(found[_COMMITS]),
            conflicts=round(found[_CONFLICTS]),
            moto_log_offset=self.moto.log_offset() if self.moto else 0,
        )

    @contextlib.contextmanager
    def engine(self) -> Iterator[Any]:
        """A lakepubsub Engine on this server's lake, in this process, to check what it stored."""
        from lakepubsub import Engine, Settings

        engine = Engine(Settings(lake=self.lake, storage_options=self.storage_options))
        try:
            yield engine
        finally:
            engine.close()


@dataclass(frozen=True)
class _Counters:
    """Server counters at one moment; the difference of two is what a case cost."""

    commits: int
    conflicts: int
    moto_log_offset: int


def _wait_listening(process: subprocess.Popen[bytes], log_path: Path) -> int:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        listening = _LISTENING.search(log_path.read_text(errors="replace"))
        if listening:
            return int(listening.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.02)
    raise BenchError(f"lakepubsub did not start:\n{log_path.read_text(errors='replace')}")


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise BenchError(f"{url} did not answer:\n{log_path.read_text(errors='replace')}")


# --- client processes ---------------------------------------------------------


@dataclass(frozen=True)
class _Report:
    """What one client process did: its timed span and what it saw."""

    start_s: float
    end_s: float
    messages: int
    # This process's CPU time (user + system) over the timed span.
    cpu_s: float
    redelivered: int = 0
    latencies_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class _Failure:
    traceback: str


class _Job(Protocol):
    def run(self, ctx: _Context) -> _Report: ...


@dataclass(frozen=True)
class _Context:
    """What every client process shares with the parent."""

    barrier: Barrier
    # Messages acked so far by all consumers of the run.
    acked: Synchronized[int]

    def start(self) -> _Clock:
        """Wait until every client is ready; all start together."""
        self.barrier.wait(WORKERS_READY_TIMEOUT_S)
        return _Clock(start_s=time.monotonic(), start_cpu_s=time.process_time())


@dataclass(frozen=True)
class _Clock:
    start_s: float
    start_cpu_s: float

    def report(self, messages: int, *, end_s: float | None = None, **details: Any) -> _Report:
        """What this client did from its start until ``end_s`` (default: now)."""
        return _Report(
            start_s=self.start_s,
            end_s=time.monotonic() if end_s is None else end_s,
            messages=messages,
            cpu_s=time.process_time() - self.start_cpu_s,
            **details,
        )


@contextlib.contextmanager
def _client(url: str, *, connections: int = 1) -> Iterator[httpx.Client]:
    """A keep-alive client, connected before the clock starts."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    with httpx.Client(
        base_url=url, headers=_JSON, timeout=REQUEST_TIMEOUT_S, limits=limits
    ) as client:
        client.get("/healthz").raise_for_status()
        yield client


def _post(client: httpx.Client, path: str, body: bytes) -> dict[str, Any]:
    """POST a prebuilt JSON body; anything but 200 fails the run, with the answer."""
    response = client.post(path, content=body)
    if response.status_code != 200:
        raise BenchError(f"POST {path}: HTTP {response.status_code}: {response.text[:1000]}")
    doc: dict[str, Any] = orjson.loads(response.content) if response.content else {}
    return doc


def _data(i: int) -> str:
    return base64.b64encode(w.payload(i)).decode()


def _publish_body(first: int, end: int) -> bytes:
    return orjson.dumps({"messages": [{"data": _data(i)} for i in range(first, end)]})


@dataclass(frozen=True)
class _PublishJob:
    url: str
    topic: str
    batch_size: int
    messages: int
    first_index: int
    # Prefill publishers (untimed) build each body when they send it.
    prebuild: bool = True

    def run(self, ctx: _Context) -> _Report:
        path = f"/v1/{self.topic}:publish"
        end = self.first_index + self.messages
        firsts = range(self.first_index, end, self.batch_size)
        spans = [(a, min(a + self.batch_size, end)) for a in firsts]
        bodies = [_publish_body(a, b) for a, b in spans] if self.prebuild else []
        with _client(self.url) as client:
            batch_ms: list[float] = []
            clock = ctx.start()
            for k, (a, b) in enumerate(spans):
                body = bodies[k] if bodies else _publish_body(a, b)
                sent = time.monotonic()
                ids = _post(client, path, body).get("messageIds", [])
                batch_ms.append((time.monotonic() - sent) * 1000)
                if len(ids) != b - a:
                    raise BenchError(f"published {b - a} messages, got {len(ids)} ids")
            return clock.report(self.messages, latencies_ms=tuple(batch_ms))


def _pull_body(max_messages: int) -> bytes:
    return orjson.dumps({"maxMessages": max_messages, "returnImmediately": False})


def _ack_body(items: Sequence[dict[str, Any]]) -> bytes:
    return orjson.dumps({"ackIds": [item["ackId"] for item in items]})


def _first_delivery(item: dict[str, Any]) -> bool:
    return int(item.get("deliveryAttempt", 1)) <= 1


def _check_attribute(items: Sequence[dict[str, Any]], key: str, value: str) -> None:
    for item in items:
        if item["message"].get("attributes", {}).get(key) != value:
            message_id = item["message"].get("messageId")
            raise BenchError(f"delivered message {message_id} without {key}={value!r}")


@dataclass(frozen=True)
class _ConsumeJob:
    """Pull and ack until the run's consumers together acked ``total`` messages."""

    url: str
    subscription: str
    max_messages_per_pull: int
    total: int
    # If set, (key, value): every delivery must carry this attribute (a filter's check).
    required_attribute: tuple[str, str] | None = None

    def run(self, ctx: _Context) -> _Report:
        pull_path, ack_path = (
            f"/v1/{self.subscription}:pull",
            f"/v1/{self.subscription}:acknowledge",
        )
        pull_body = _pull_body(self.max_messages_per_pull)
        with _client(self.url) as client:
            received = redelivered = 0
            clock = ctx.start()
            last_acked_s = clock.start_s
            while ctx.acked.value < self.total:
                items = _post(client, pull_path, pull_body).get("receivedMessages", [])
                if not items:
                    continue
                if self.required_attribute is not None:
                    _check_attribute(items, *self.required_attribute)
                _post(client, ack_path, _ack_body(items))
                last_acked_s = time.monotonic()
                first_deliveries = sum(1 for item in items if _first_delivery(item))
                received += len(items)
                redelivered += len(items) - first_deliveries
                with ctx.acked.get_lock():
                    ctx.acked.value += first_deliveries
            # Not the time of leaving the loop: that can be an idle pull later.
            return clock.report(received, end_s=last_acked_s, redelivered=redelivered)


@dataclass(frozen=True)
class _LatencyPublishJob:
    url: str
    topic: str
    rate_per_s: int
    messages: int

    def run(self, ctx: _Context) -> _Report:
        path = f"/v1/{self.topic}:publish"
        # Each body is built but for its send time: head + time + tail.
        heads = [
            b'{"messages":[{"data":"%s","attributes":{"%s":"' % (_data(i).encode(), _SENT_KEY)
            for i in range(self.messages)
        ]
        tail = b'"}}]}'
        interval_ns = _NS_PER_S / self.rate_per_s
        with (
            _client(self.url, connections=LATENCY_MAX_IN_FLIGHT) as client,
            ThreadPoolExecutor(LATENCY_MAX_IN_FLIGHT) as senders,
        ):
            clock = ctx.start()
            start_ns = time.monotonic_ns()
            sent = []
            for i in range(self.messages):
                if (delay_ns := start_ns + i * interval_ns - time.monotonic_ns()) > 0:
                    time.sleep(delay_ns / _NS_PER_S)
                body = heads[i] + str(time.monotonic_ns()).encode() + tail
                sent.append(senders.submit(_post, client, path, body))
            for request in sent:
                request.result()
            return clock.report(self.messages)


class _Acker:
    """Acknowledges from a thread of its own, so the next pull need not wait for an ack."""

    def __init__(self, client: httpx.Client, path: str) -> None:
        self._client = client
        self._path = path
        self._bodies: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def submit(self, body: bytes) -> None:
        self._bodies.put(body)

    def close(self) -> None:
        """Send what is queued, stop; raise the first failure, if any."""
        self._bodies.put(None)
        self._thread.join()
        if self._failure is not None:
            raise self._failure

    def _loop(self) -> None:
        while (body := self._bodies.get()) is not None:
            try:
                _post(self._client, self._path, body)
            except BaseException as exc:
                self._failure = self._failure or exc


@dataclass(frozen=True)
class _LatencyConsumeJob:
    """Pull until ``messages`` first deliveries arrived, each timed from its send stamp.

    Fails if nothing new arrives for ``STALL_TIMEOUT_S``: a server that falls
    behind the offered rate only makes the run longer, a lost message fails it.
    """

    url: str
    subscription: str
    max_messages_per_pull: int
    messages: int

    def run(self, ctx: _Context) -> _Report:
        pull_path, ack_path = (
            f"/v1/{self.subscription}:pull",
            f"/v1/{self.subscription}:acknowledge",
        )
        pull_body = _pull_body(self.max_messages_per_pull)
        with _client(self.url, connections=2) as client:
            acker = _Acker(client, ack_path)
            latencies_ms: list[float] = []
            redelivered = 0
            clock = ctx.start()
            last_progress_s = clock.start_s
            try:
                while len(latencies_ms) < self.messages:
                    if time.monotonic() - last_progress_s > STALL_TIMEOUT_S:
                        raise BenchError(
                            f"received {len(latencies_ms)} of {self.messages} messages, "
                            f"then nothing for {STALL_TIMEOUT_S} s"
                        )
                    items = _post(client, pull_path, pull_body).get("receivedMessages", [])
                    received_ns = time.monotonic_ns()
                    for item in items:
                        if not _first_delivery(item):
                            redelivered += 1
                            continue
                        sent_ns = int(item["message"]["attributes"][SENT_NS_ATTRIBUTE])
                        latencies_ms.append((received_ns - sent_ns) / _NS_PER_MS)
                    if items:
                        acker.submit(_ack_body(items))
                        last_progress_s = time.monotonic()
            finally:
                acker.close()
            return clock.report(
                len(latencies_ms), latencies_ms=tuple(latencies_ms), redelivered=redelivered
            )


def _client_main(job: _Job, ctx: _Context, reports: Queue[_Report | _Failure]) -> None:
    try:
        reports.put(job.run(ctx))
    except BaseException:
        ctx.barrier.abort()
        reports.put(_Failure(traceback.format_exc()))


def _run_clients(jobs: Sequence[_Job], *, server_pid: int) -> tuple[list[_Report], ProcessUsage]:
    """Run each job in its own process; start them together; meter the server."""
    forkserver = mp.get_context("forkserver")
    forkserver.set_forkserver_preload([__name__])
    ctx = _Context(barrier=forkserver.Barrier(len(jobs) + 1), acked=forkserver.Value("q", 0))
    reports: Queue[_Report | _Failure] = forkserver.Queue()
    processes = [
        forkserver.Process(target=_client_main, args=(job, ctx, reports), daemon=True)
        for job in jobs
    ]
    for process in processes:
        process.start()
    try:
        done: list[_Report] = []
        try:
            ctx.barrier.wait(WORKERS_READY_TIMEOUT_S)
        except threading.BrokenBarrierError:
            # A client that failed to start says why; otherwise one is stuck.
            _collect(reports, processes, done, expected=1, timeout_s=WORKERS_READY_TIMEOUT_S)
            raise BenchError("client processes did not start") from None
        with ProcessMeter(server_pid) as meter:
            _collect(reports, processes, done, expected=len(jobs))
        return done, meter.usage
    except BaseException:
        # The others would wait for messages that will never come.
        for process in processes:
            process.kill()
        raise
    finally:
        for process in processes:
            process.join(timeout=SERVER_STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()


def _collect(
    reports: Queue[_Report | _Failure],
    processes: Sequence[mp.process.BaseProcess],
    done: list[_Report],
    *,
    expected: int,
    timeout_s: float = RUN_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while len(done) < expected:
        try:
            report = reports.get(timeout=1.0)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in processes):
                raise BenchError("a client process died without a report") from None
            if time.monotonic() > deadline:
                raise BenchError(f"clients did not finish in {timeout_s} s") from None
            continue
        if isinstance(report, _Failure):
            raise BenchError(f"a client process failed:\n{report.traceback}")
        done.append(report)


# --- topics, subscriptions and checks -----------------------------------------


def _create_topic(server: LakePubSubServer) -> str:
    """A fresh topic; returns its path (``projects/p/topics/t``)."""
    path = f"projects/{PROJECT}/topics/bench-{uuid.uuid4().hex[:12]}"
    httpx.put(f"{server.url}/v1/{path}", json={}, timeout=REQUEST_TIMEOUT_S).raise_for_status()
    return path


def _create_subscription(
    server: LakePubSubServer, topic: str, *, ack_deadline_s: int, **fields: Any
) -> str:
    """A fresh subscription; ``fields`` are more of its REST body (``filter``...)."""
    path = f"projects/{PROJECT}/subscriptions/bench-{uuid.uuid4().hex[:12]}"
    body = {"topic": topic, "ackDeadlineSeconds": ack_deadline_s, **fields}
    httpx.put(f"{server.url}/v1/{path}", json=body, timeout=REQUEST_TIMEOUT_S).raise_for_status()
    return path


def _check_stored(server: LakePubSubServer, topic: str, total: int) -> None:
    """The topic's head is ``total``: every published message is in the lake, once."""
    from lakepubsub.resources.names import TopicName

    with server.engine() as engine:
        head = engine.topic_head(TopicName.parse(topic))
    if head != total:
        raise BenchError(f"topic holds {head} messages, {total} were published")


def _check_all_acked(server: LakePubSubServer, topic: str, subscription: str, total: int) -> None:
    """Wait until the subscription's cursor is past all ``total`` messages, none outstanding."""
    from lakepubsub.resources.names import SubscriptionName, TopicName

    with server.engine() as engine:
        if (head := engine.topic_head(TopicName.parse(topic))) != total:
            raise BenchError(f"topic holds {head} messages, {total} were published")
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


def _publish(
    server: LakePubSubServer,
    topic: str,
    *,
    batch_size: int,
    per_client: Sequence[int],
    prebuild: bool = True,
) -> tuple[list[_Report], ProcessUsage]:
    jobs: list[_Job] = [
        _PublishJob(
            url=server.url,
            topic=topic,
            batch_size=batch_size,
            messages=messages,
            first_index=sum(per_client[:c]),
            prebuild=prebuild,
        )
        for c, messages in enumerate(per_client)
    ]
    return _run_clients(jobs, server_pid=server.pid)


def _publish_backlog(server: LakePubSubServer, topic: str, messages: int) -> None:
    per_client = [len(range(c, messages, PREFILL_CLIENTS)) for c in range(PREFILL_CLIENTS)]
    _publish(server, topic, batch_size=PREFILL_BATCH, per_client=per_client, prebuild=False)


# --- the cases ----------------------------------------------------------------


def run_publish(server: LakePubSubServer, case: w.PublishCase) -> list[w.Result]:
    """One run of a publish case on a fresh topic."""
    topic = _create_topic(server)
    before = server.counters()
    reports, usage = _publish(
        server,
        topic,
        batch_size=case.batch_size,
        per_client=[case.messages_per_client] * case.clients,
    )
    after = server.counters()
    _check_stored(server, topic, case.total_messages)
    batch_ms = [ms for r in reports for ms in r.latencies_ms]
    result = partial(_result, server.system, case.name)
    return [
        result(w.THROUGHPUT, w.MSGS_PER_S, case.total_messages / _span_s(reports)),
        result(w.BATCH_LATENCY_P50, w.MS, w.percentile(batch_ms, 0.50)),
        result(w.BATCH_LATENCY_P99, w.MS, w.percentile(batch_ms, 0.99)),
        result(w.MESSAGES, w.MSGS, case.total_messages),
        *_usage_results(server, case.name, usage, reports, case.total_messages),
        *_storage_results(server, case.name, before, after, case.total_messages),
    ]


def run_pull(server: LakePubSubServer, case: w.PullCase, ack_deadline_s: int) -> list[w.Result]:
    """One run of a pull + ack case: publish the backlog (untimed), then drain it."""
    return _consume_backlog(
        server,
        case.name,
        backlog=case.backlog_messages,
        consumers=case.consumers,
        max_messages_per_pull=case.max_messages_per_pull,
        ack_deadline_s=ack_deadline_s,
    )


def run_drain(server: LakePubSubServer, case: w.DrainCase, ack_deadline_s: int) -> list[w.Result]:
    """One run of a drain case: pull + ack as ``run_pull``, reporting the drain time too."""
    return _consume_backlog(
        server,
        case.name,
        backlog=case.backlog_messages,
        consumers=case.consumers,
        max_messages_per_pull=case.max_messages_per_pull,
        ack_deadline_s=ack_deadline_s,
        report_drain_time=True,
    )


def _consume_backlog(
    server: LakePubSubServer,
    case: str,
    *,
    backlog: int,
    consumers: int,
    max_messages_per_pull: int,
    ack_deadline_s: int,
    report_drain_time: bool = False,
) -> list[w.Result]:
    topic = _create_topic(server)
    subscription = _create_subscription(server, topic, ack_deadline_s=ack_deadline_s)
    _publish_backlog(server, topic, backlog)
    job = _ConsumeJob(
        url=server.url,
        subscription=subscription,
        max_messages_per_pull=max_messages_per_pull,
        total=backlog,
    )
    before = server.counters()
    reports, usage = _run_clients([job] * consumers, server_pid=server.pid)
    after = server.counters()
    _check_all_acked(server, topic, subscription, backlog)
    received = sum(r.messages for r in reports)
    if received != backlog or any(r.redelivered for r in reports):
        raise BenchError(
            f"consumers received {received} deliveries of {backlog} messages, "
            f"{sum(r.redelivered for r in reports)} redelivered"
        )
    span_s = _span_s(reports)
    result = partial(_result, server.system, case)
    drain = [result(w.DRAIN_TIME, w.SECONDS, span_s)] if report_drain_time else []
    return [
        *drain,
        result(w.THROUGHPUT, w.MSGS_PER_S, received / span_s),
        result(w.MESSAGES, w.MSGS, received),
        *_usage_results(server, case, usage, reports, received),
        *_storage_results(server, case, before, after, received),
    ]


def run_latency(
    server: LakePubSubServer,
    case: w.LatencyCase,
    ack_deadline_s: int,
    *,
    samples: list[float] | None = None,
) -> list[w.Result]:
    """One run of the latency case: publish at a fixed rate, measure publish → receive.

    ``samples``, if given, gets every message's latency in ms (for a distribution chart).
    """
    topic = _create_topic(server)
    subscription = _create_subscription(server, topic, ack_deadline_s=ack_deadline_s)
    total = case.total_messages
    consumer = _LatencyConsumeJob(
        url=server.url,
        subscription=subscription,
        max_messages_per_pull=case.max_messages_per_pull,
        messages=total,
    )
    publisher = _LatencyPublishJob(
        url=server.url, topic=topic, rate_per_s=case.offered_rate_per_s, messages=total
    )
    before = server.counters()
    reports, usage = _run_clients([consumer, publisher], server_pid=server.pid)
    after = server.counters()
    received, sent = reports if reports[0].latencies_ms else reversed(reports)
    _check_all_acked(server, topic, subscription, total)
    if received.redelivered:
        raise BenchError(f"{received.redelivered} messages were redelivered")
    latencies = received.latencies_ms
    if samples is not None:
        samples.extend(latencies)
    result = partial(_result, server.system, case.name)
    return [
        result(w.LATENCY_P50, w.MS, w.percentile(latencies, 0.50)),
        result(w.LATENCY_P99, w.MS, w.percentile(latencies, 0.99)),
        result(w.LATENCY_MAX, w.MS, max(latencies)),
        result(w.ACHIEVED_RATE, w.MSGS_PER_S, total / (sent.end_s - sent.start_s)),
        result(w.MESSAGES, w.MSGS, received.messages),
        *_usage_results(server, case.name, usage, reports, total),
        *_storage_results(server, case.name, before, after, total),
    ]


def run_all(
    workload: w.Workload,
    *,
    s3: bool = False,
    fresh_server: bool = True,
    progress: Callable[[str], None] | None = None,
    latency_samples: list[float] | None = None,
) -> list[w.Result]:
    """Every case of the workload, ``workload.runs`` times each, a fresh server per run.

    Without ``fresh_server`` one server serves every run (each still on a
    fresh topic and subscription): seconds less per run, for CI.
    ``latency_samples``, if given, gets every message's latency in ms of the first
    latency case (the one the report charts).
    """
    ack_s = workload.ack_deadline_s
    latency = partial(run_latency, ack_deadline_s=ack_s)
    cases: list[tuple[str, Callable[[LakePubSubServer], list[w.Result]]]] = [
        *((p.name, partial(run_publish, case=p)) for p in workload.publish),
        *((q.name, partial(run_pull, case=q, ack_deadline_s=ack_s)) for q in workload.pull),
        *(
            (c.name, partial(latency, case=c, samples=latency_samples if i == 0 else None))
            for i, c in enumerate(workload.latency)
        ),
        *((d.name, partial(run_drain, case=d, ack_deadline_s=ack_s)) for d in workload.drain),
    ]
    system = SYSTEM_S3 if s3 else SYSTEM
    results: list[w.Result] = []
    with contextlib.ExitStack() as stack:
        shared = None if fresh_server else stack.enter_context(LakePubSubServer(s3=s3))
        for name, run in cases:
            for i in range(workload.runs):
                if progress:
                    progress(f"{system}: {name} (run {i + 1}/{workload.runs})")
                with (
                    contextlib.nullcontext(shared) if shared else LakePubSubServer(s3=s3) as server
                ):
                    results.extend(run(server))
    return w.merge_runs(results)


# --- figures ------------------------------------------------------------------


def _result(system: str, case: str, metric: str, unit: str, value: float) -> w.Result:
    return w.Result(system=system, case=case, metric=metric, unit=unit, values=(float(value),))


def _usage_results(
    server: LakePubSubServer,
    case: str,
    usage: ProcessUsage,
    reports: Sequence[_Report],
    messages: int,
) -> list[w.Result]:
    client_cpu_s = sum(r.cpu_s for r in reports)
    result = partial(_result, server.system, case)
    return [
        result(w.SERVER_CPU_PER_MILLION, w.CPU_S_PER_MILLION, usage.cpu_s * _MILLION / messages),
        result(w.SERVER_PEAK_RSS, w.MIB, usage.peak_rss_bytes / _BYTES_PER_MIB),
        result(w.CLIENT_CPU_PER_MILLION, w.CPU_S_PER_MILLION, client_cpu_s * _MILLION / messages),
    ]


def s3_metric(kind: str) -> str:
    """The metric name of S3 ``kind`` requests per million messages."""
    return f"s3_{kind}_per_million_msgs"


def _storage_results(
    server: LakePubSubServer,
    case: str,
    before: _Counters,
    after: _Counters,
    messages: int,
) -> list[w.Result]:
    per_million = _MILLION / messages
    result = partial(_result, server.system, case)
    found = [
        result(
            DELTA_COMMITS_PER_MILLION,
            COMMITS_PER_MILLION,
            (after.commits - before.commits) * per_million,
        ),
        result(
            COMMIT_CONFLICTS_PER_MILLION,
            COMMITS_PER_MILLION,
            (after.conflicts - before.conflicts) * per_million,
        ),
    ]
    if server.moto is not None:
        requests = server.moto.requests_since(before.moto_log_offset)
        found += [
            result(s3_metric(kind), REQUESTS_PER_MILLION, requests[kind] * per_million)
            for kind in S3_KINDS
        ]
    return found


def _span_s(reports: Sequence[_Report]) -> float:
    return max(r.end_s for r in reports) - min(r.start_s for r in reports)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Run the benchmark workload against lakepubsub over REST."
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run (for CI)")
    parser.add_argument("--s3", action="store_true", help="lake on a moto S3 server")
    args = parser.parse_args(argv)
    chosen = w.quick() if args.quick else w.full()
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {line}", file=sys.stderr, flush=True)

    results = run_all(chosen, s3=args.s3, progress=progress)
    print(w.markdown_table(results))


if __name__ == "__main__":
    main()
