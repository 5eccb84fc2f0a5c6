"""The gRPC cases: lakepubsub through Google's Pub/Sub Go client, NATS JetStream through nats.go.

    python -m bench.grpc_bench [--quick] [--runs N]   # these cases alone, a markdown table

Both sides are driven by one Go program, ``bench/loadgen`` (built once per
machine by ``bench/gobuild.py``), so neither client is the slow part: for
lakepubsub Google's unmodified Go client (``cloud.google.com/go/pubsub/v2``)
over gRPC against ``lakepubsub serve`` (REST and gRPC on one port, found
through ``PUBSUB_EMULATOR_HOST``), for JetStream the official NATS Go client
against the same kind of ``nats-server`` as ``bench/peer_nats.py`` (file
storage, one stream). 1 KiB messages, the shared workload's payloads.

The cases (lakepubsub / JetStream):

- ``grpc drain backlog=N``: a backlog of N, published first (untimed; over
  REST / by the NATS peer's prefill), received and acked: through
  StreamingPull (``Subscriber.Receive``, one stream) / from a durable push
  consumer, one ack per message.
- ``grpc publish batching=default publishers=P``: P publishers, each with a
  client (connection) of its own, hand all their messages over at once and
  wait for every result: ``Publisher.Publish`` with the client's default
  batching (100 messages or 10 ms a request, many requests in flight) /
  ``PublishAsync`` with its default window of pending acks.
- ``grpc publish single publishers=1``: one publisher awaits each publish
  before the next: ``Publish(...).Get`` with bundling off (``CountThreshold``
  1; by default the client waits 10 ms for more) / ``Publish``, which waits for
  the stream's ack. Round trip p50 / p99.
- ``grpc latency rate=R/s``: one publisher at R msgs/s (bundling off),
  stamping its send time in an attribute / a header; one receiver in the same
  process (StreamingPull / push consumer) records receive minus send time.

Both receivers allow ``max_outstanding`` unacked messages
(``ReceiveSettings.MaxOutstandingMessages``; the push consumer's
``MaxAckPending``). Each publisher sends one untimed warm-up message first (it
connects), counted in the stored total. The timed part starts when the
driver signals every prepared client at once; a drain ends when the last ack
is sent (Pub/Sub: ``Receive`` returned, which waits for the acks to go out;
NATS: a flush after the last ack), a publish when the last result is in.

Every run checks what the server holds: every message stored once; after a
drain or latency run every message acknowledged, none outstanding and none
redelivered. A run that fails (the build, the client, a check) is recorded as
a failure with its error and the other runs still run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import gobuild, peer_nats
from bench import peer_lakepubsub as lps
from bench import workload as w
from bench.procstats import ProcessMeter, ProcessUsage

SYSTEMS = (peer_nats.SYSTEM, lps.SYSTEM)
# The push consumers the load generator creates on the NATS side.
PUSH_DURABLE = "bench-push"
# Unacked messages each receiver allows (both sides).
MAX_OUTSTANDING = 10_000
# The Go client's ``ReceiveSettings.NumGoroutines``: StreamingPull streams.
STREAMS = 1
# Child processes never look for a cloud metadata server.
NO_METADATA_ENV = {
    "METADATA_SERVER_DETECTION": "none",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
}
# Connecting and building 200,000 payloads takes a second or two; this bounds a hang.
READY_TIMEOUT_S = 120.0
# The timed part of one run; the load generator enforces it, the driver adds a margin.
RUN_TIMEOUT_S = 900.0
EXIT_MARGIN_S = 120.0
# How much of a failure goes into the report.
ERROR_CHARS = 1500
OUTPUT_TAIL_CHARS = 3000
_BYTES_PER_MIB = 1024 * 1024
_MILLION = 1_000_000


class BenchError(RuntimeError):
    """A run did not do what the case says (a client error, a lost or redelivered message...)."""


# --- the workload ----------------------------------------------------------------


@dataclass(frozen=True)
class GrpcWorkload:
    drain_messages: int
    # Messages of the batching publish case, all publishers together.
    publish_messages: int
    publishers: int
    single_messages: int
    latency_rate_per_s: int
    latency_duration_s: float
    max_outstanding: int
    runs: int
    ack_deadline_s: int

    @property
    def drain_case(self) -> str:
        return f"grpc drain backlog={self.drain_messages}"

    @property
    def publish_case(self) -> str:
        return f"grpc publish batching=default publishers={self.publishers}"

    @property
    def single_case(self) -> str:
        return "grpc publish single publishers=1"

    @property
    def latency_case(self) -> str:
        return f"grpc latency rate={self.latency_rate_per_s}/s"

    @property
    def latency_messages(self) -> int:
        return round(self.latency_rate_per_s * self.latency_duration_s)

    @property
    def cases(self) -> tuple[str, ...]:
        return (self.drain_case, self.publish_case, self.single_case, self.latency_case)


def full() -> GrpcWorkload:
    """The documented sizes: the 1M drain dominates (each run publishes its backlog first)."""
    return GrpcWorkload(
        drain_messages=1_000_000,
        publish_messages=200_000,
        publishers=8,
        single_messages=5_000,
        latency_rate_per_s=200,
        latency_duration_s=10.0,
        max_outstanding=MAX_OUTSTANDING,
        runs=3,
        ack_deadline_s=w.full().ack_deadline_s,
    )


def quick() -> GrpcWorkload:
    """CI sizes, one run: well under a minute for both systems after the build."""
    return dataclasses.replace(
        full(),
        drain_messages=20_000,
        publish_messages=16_000,
        single_messages=200,
        latency_duration_s=2.0,
        runs=1,
    )


def workload_lines(workload: GrpcWorkload) -> list[str]:
    return [
        f"- gRPC cases (Go clients on both sides, `bench/loadgen`; {workload.runs} run(s) each, "
        f"receivers allow {workload.max_outstanding:,} unacked messages): drain a backlog of "
        f"{workload.drain_messages:,}; {workload.publishers} publishers with the client's "
        f"default batching, {workload.publish_messages:,} messages; single-message publish, "
        f"one publisher, {workload.single_messages:,} messages; publish → receive at "
        f"{workload.latency_rate_per_s} msgs/s for {workload.latency_duration_s:g} s.",
    ]


def software_line() -> str:
    """The gRPC cases' software: Go, the client modules (``bench/loadgen/go.mod``), grpcio."""
    go = subprocess.run(
        ["go", "version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip() if shutil.which("go") else "no Go on PATH"  # fmt: skip
    wanted = (
        "cloud.google.com/go/pubsub/v2",
        "github.com/nats-io/nats.go",
        "google.golang.org/grpc",
    )
    modules = []
    for line in (gobuild.LOADGEN / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in wanted:
            modules.append(f"{parts[0]} {parts[1]}")
    try:
        grpcio = importlib.metadata.version("grpcio")
    except importlib.metadata.PackageNotFoundError:
        grpcio = "not installed"
    return (
        f"- **gRPC cases:** {go}; `bench/loadgen` with {', '.join(modules)}; "
        f"the server's grpcio {grpcio}"
    )


# --- outcomes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One failed run of one case on one system, with its error."""

    system: str
    case: str
    error: str


@dataclass
class Outcome:
    results: list[w.Result] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    # End-to-end latencies (ms) of the latency case, all runs, per system.
    latency_samples: dict[str, list[float]] = field(default_factory=dict)


def describe(exc: BaseException) -> str:
    """An error as the report shows it: type and message, shortened."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= ERROR_CHARS else f"{text[:ERROR_CHARS]} …"


# --- the load generator --------------------------------------------------------------


@dataclass(frozen=True)
class LoadgenReport:
    """The load generator's JSON line (see ``bench/loadgen/main.go``)."""

    doc: dict[str, Any]

    @property
    def elapsed_s(self) -> float:
        return float(self.doc["elapsed_s"])

    @property
    def cpu_s(self) -> float:
        return float(self.doc["cpu_s"])

    @property
    def latencies_ms(self) -> list[float]:
        return [float(v) for v in self.doc["latencies_ms"]]

    def __getitem__(self, key: str) -> Any:
        return self.doc[key]


def run_loadgen(
    binary: Path,
    args: Sequence[str],
    *,
    server_pid: int,
    env: dict[str, str] | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
) -> tuple[LoadgenReport, ProcessUsage]:
    """Start the load generator, wait until it is ready, start it and meter the server."""
    command = [str(binary), "-wait", "-timeout", f"{timeout_s:g}", *args]
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, **NO_METADATA_ENV, **(env or {})},
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_read_lines, args=(process, lines), daemon=True)
        reader.start()
        output: list[str] = []
        try:
            _wait_ready(process, lines, output)
            with ProcessMeter(server_pid) as meter:
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()
                process.wait(timeout=timeout_s + EXIT_MARGIN_S)
        except BaseException as exc:
            process.kill()
            process.wait()
            reader.join(timeout=5)
            if not isinstance(exc, Exception):
                raise
            raise BenchError(
                f"loadgen {' '.join(args)}: {describe(exc)}{_tails(output, lines, stderr)}"
            ) from exc
        reader.join(timeout=5)
        output += _drain(lines)
        docs = [json.loads(line) for line in output if line.startswith("{")]
        report = next((d for d in reversed(docs) if "mode" in d), None)
        if process.returncode != 0 or report is None or report.get("errors"):
            errors = report.get("errors") if report else None
            raise BenchError(
                f"loadgen {' '.join(args)} exited {process.returncode}; errors: {errors}"
                f"{_tails(output, lines, stderr) if report is None else ''}"
            )
    return LoadgenReport(report), meter.usage


def _read_lines(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _wait_ready(
    process: subprocess.Popen[str], lines: queue.Queue[str | None], output: list[str]
) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is None:
            raise BenchError(f"exited {process.wait()} before it was ready")
        output.append(line)
        if line.startswith('{"ready"'):
            return
    raise BenchError(f"not ready in {READY_TIMEOUT_S:g} s")


def _drain(lines: queue.Queue[str | None]) -> list[str]:
    found = []
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return found
        if line is not None:
            found.append(line)


def _tails(output: list[str], lines: queue.Queue[str | None], stderr: Any) -> str:
    stderr.seek(0)
    err = stderr.read()[-OUTPUT_TAIL_CHARS:]
    out = "\n".join([*output, *_drain(lines)])[-OUTPUT_TAIL_CHARS:]
    return f"\nstdout: {out}\nstderr: {err}"


# --- lakepubsub over gRPC ------------------------------------------------------------


def _lps_env(server: lps.LakePubSubServer) -> dict[str, str]:
    return {"PUBSUB_EMULATOR_HOST": server.emulator_host}


def _lps_figures(
    server: lps.LakePubSubServer,
    case: str,
    report: LoadgenReport,
    usage: ProcessUsage,
    messages: int,
    before: Any,
    after: Any,
) -> list[w.Result]:
    clients = [
        lps._Report(start_s=0, end_s=report.elapsed_s, messages=messages, cpu_s=report.cpu_s)
    ]
    return [
        *lps._usage_results(server, case, usage, clients, messages),
        *lps._storage_results(server, case, before, after, messages),
    ]


def lps_drain(server: lps.LakePubSubServer, binary: Path, workload: GrpcWorkload) -> list[w.Result]:
    """One run of the drain case: publish the backlog over REST (untimed), StreamingPull it."""
    n, case = workload.drain_messages, workload.drain_case
    topic = lps._create_topic(server)
    subscription = lps._create_subscription(server, topic, ack_deadline_s=workload.ack_deadline_s)
    lps._publish_backlog(server, topic, n)
    before = server.counters()
    report, usage = run_loadgen(
        binary,
        ["-system", "pubsub", "-mode", "drain", "-subscription", subscription,
         "-messages", str(n), "-max-outstanding", str(workload.max_outstanding),
         "-streams", str(STREAMS)],
        server_pid=server.pid,
        env=_lps_env(server),
    )  # fmt: skip
    after = server.counters()
    _check_received(report, n)
    lps._check_all_acked(server, topic, subscription, n)
    result = _lps_result(server, case)
    return [
        result(w.DRAIN_TIME, w.SECONDS, report.elapsed_s),
        result(w.THROUGHPUT, w.MSGS_PER_S, n / report.elapsed_s),
        result(w.MESSAGES, w.MSGS, report["distinct"]),
        *_lps_figures(server, case, report, usage, n, before, after),
    ]


def lps_publish(
    server: lps.LakePubSubServer, binary: Path, workload: GrpcWorkload, *, single: bool
) -> list[w.Result]:
    """One run of a publish case on a fresh topic."""
    publishers = 1 if single else workload.publishers
    n = workload.single_messages if single else workload.publish_messages
    case = workload.single_case if single else workload.publish_case
    topic = lps._create_topic(server)
    before = server.counters()
    report, usage = run_loadgen(
        binary,
        ["-system", "pubsub", "-mode", "publish", "-topic", topic,
         "-publishers", str(publishers), "-messages", str(n), *(["-single"] if single else [])],
        server_pid=server.pid,
        env=_lps_env(server),
    )  # fmt: skip
    after = server.counters()
    _check_published(report, n)
    lps._check_stored(server, topic, n + publishers)
    return [
        *_publish_figures(_lps_result(server, case), report, n, single=single),
        *_lps_figures(server, case, report, usage, n, before, after),
    ]


def lps_latency(
    server: lps.LakePubSubServer,
    binary: Path,
    workload: GrpcWorkload,
    samples: list[float] | None = None,
) -> list[w.Result]:
    """One run of the latency case: publish at a fixed rate, receive through StreamingPull."""
    n, case = workload.latency_messages, workload.latency_case
    topic = lps._create_topic(server)
    subscription = lps._create_subscription(server, topic, ack_deadline_s=workload.ack_deadline_s)
    before = server.counters()
    report, usage = run_loadgen(
        binary,
        ["-system", "pubsub", "-mode", "latency", "-topic", topic, "-subscription", subscription,
         "-messages", str(n), "-rate", str(workload.latency_rate_per_s),
         "-max-outstanding", str(workload.max_outstanding), "-streams", str(STREAMS)],
        server_pid=server.pid,
        env=_lps_env(server),
    )  # fmt: skip
    after = server.counters()
    _check_received(report, n)
    lps._check_all_acked(server, topic, subscription, n)
    if samples is not None:
        samples.extend(report.latencies_ms)
    return [
        *_latency_figures(_lps_result(server, case), report, n),
        *_lps_figures(server, case, report, usage, n, before, after),
    ]


def _lps_result(server: lps.LakePubSubServer, case: str) -> Callable[[str, str, float], w.Result]:
    def result(metric: str, unit: str, value: float) -> w.Result:
        return lps._result(server.system, case, metric, unit, value)

    return result


# --- NATS JetStream through nats.go ------------------------------------------------------


def _nats_result(case: str) -> Callable[[str, str, float], w.Result]:
    def result(metric: str, unit: str, value: float) -> w.Result:
        return peer_nats._result(case, metric, unit, value)

    return result


def _nats_usage(
    case: str, report: LoadgenReport, usage: ProcessUsage, messages: int
) -> list[w.Result]:
    clients = [
        peer_nats._Report(start_s=0, end_s=report.elapsed_s, messages=messages, cpu_s=report.cpu_s)
    ]
    return peer_nats._usage_results(case, usage, clients, messages)


def nats_drain(
    server: peer_nats.NatsServer, binary: Path, workload: GrpcWorkload
) -> list[w.Result]:
    """One run of the drain case: publish the backlog (untimed), drain it from a push consumer."""
    n, case = workload.drain_messages, workload.drain_case
    asyncio.run(peer_nats._create_stream(server.url))
    peer_nats._publish_backlog(server, n)
    report, usage = run_loadgen(
        binary,
        ["-system", "nats", "-mode", "drain", "-nats-url", server.url,
         "-stream", peer_nats.STREAM, "-consumer", PUSH_DURABLE, "-messages", str(n),
         "-max-outstanding", str(workload.max_outstanding),
         "-ack-wait", str(workload.ack_deadline_s)],
        server_pid=server.pid,
    )  # fmt: skip
    _check_received(report, n)
    asyncio.run(peer_nats._check_all_acked(server.url, n, durable=PUSH_DURABLE))
    result = _nats_result(case)
    return [
        result(w.DRAIN_TIME, w.SECONDS, report.elapsed_s),
        result(w.THROUGHPUT, w.MSGS_PER_S, n / report.elapsed_s),
        result(w.MESSAGES, w.MSGS, report["distinct"]),
        *_nats_usage(case, report, usage, n),
    ]


def nats_publish(
    server: peer_nats.NatsServer, binary: Path, workload: GrpcWorkload, *, single: bool
) -> list[w.Result]:
    """One run of a publish case on a fresh stream."""
    publishers = 1 if single else workload.publishers
    n = workload.single_messages if single else workload.publish_messages
    case = workload.single_case if single else workload.publish_case
    asyncio.run(peer_nats._create_stream(server.url))
    report, usage = run_loadgen(
        binary,
        ["-system", "nats", "-mode", "publish", "-nats-url", server.url,
         "-subject", peer_nats.SUBJECT, "-publishers", str(publishers), "-messages", str(n),
         *(["-single"] if single else [])],
        server_pid=server.pid,
    )  # fmt: skip
    _check_published(report, n)
    stored = asyncio.run(peer_nats._stream_messages(server.url))
    if stored != n + publishers:
        raise BenchError(f"stream holds {stored} messages, {n} + {publishers} were published")
    return [
        *_publish_figures(_nats_result(case), report, n, single=single),
        *_nats_usage(case, report, usage, n),
    ]


def nats_latency(
    server: peer_nats.NatsServer,
    binary: Path,
    workload: GrpcWorkload,
    samples: list[float] | None = None,
) -> list[w.Result]:
    """One run of the latency case: publish at a fixed rate, receive from a push consumer."""
    n, case = workload.latency_messages, workload.latency_case
    asyncio.run(peer_nats._create_stream(server.url))
    report, usage = run_loadgen(
        binary,
        ["-system", "nats", "-mode", "latency", "-nats-url", server.url,
         "-stream", peer_nats.STREAM, "-subject", peer_nats.SUBJECT, "-consumer", PUSH_DURABLE,
         "-messages", str(n), "-rate", str(workload.latency_rate_per_s),
         "-max-outstanding", str(workload.max_outstanding),
         "-ack-wait", str(workload.ack_deadline_s)],
        server_pid=server.pid,
    )  # fmt: skip
    _check_received(report, n)
    asyncio.run(peer_nats._check_all_acked(server.url, n, durable=PUSH_DURABLE))
    if samples is not None:
        samples.extend(report.latencies_ms)
    return [*_latency_figures(_nats_result(case), report, n), *_nats_usage(case, report, usage, n)]


# --- shared checks and figures -----------------------------------------------------


def _check_received(report: LoadgenReport, n: int) -> None:
    if report["distinct"] != n or report["redelivered"] or report["acked"] < n:
        raise BenchError(
            f"received {report['received']} deliveries of {report['distinct']} distinct "
            f"messages ({n} expected), {report['redelivered']} redelivered, "
            f"{report['acked']} acked"
        )


def _check_published(report: LoadgenReport, n: int) -> None:
    if report["published"] != n:
        raise BenchError(f"{report['published']} of {n} publishes confirmed")


def _publish_figures(
    result: Callable[[str, str, float], w.Result], report: LoadgenReport, n: int, *, single: bool
) -> list[w.Result]:
    found = [
        result(w.THROUGHPUT, w.MSGS_PER_S, n / report.elapsed_s),
        result(w.MESSAGES, w.MSGS, report["published"]),
    ]
    if single:
        latencies = report.latencies_ms
        if len(latencies) != n:
            raise BenchError(f"{len(latencies)} round trips reported for {n} publishes")
        found += [
            result(w.BATCH_LATENCY_P50, w.MS, w.percentile(latencies, 0.50)),
            result(w.BATCH_LATENCY_P99, w.MS, w.percentile(latencies, 0.99)),
        ]
    return found


def _latency_figures(
    result: Callable[[str, str, float], w.Result], report: LoadgenReport, n: int
) -> list[w.Result]:
    latencies = report.latencies_ms
    if len(latencies) != n:
        raise BenchError(f"{len(latencies)} latencies reported for {n} messages")
    return [
        result(w.LATENCY_P50, w.MS, w.percentile(latencies, 0.50)),
        result(w.LATENCY_P99, w.MS, w.percentile(latencies, 0.99)),
        result(w.LATENCY_MAX, w.MS, max(latencies)),
        result(w.ACHIEVED_RATE, w.MSGS_PER_S, n / report["publish_s"]),
        result(w.MESSAGES, w.MSGS, len(latencies)),
    ]


# --- running everything ------------------------------------------------------------


def run_all(
    workload: GrpcWorkload,
    *,
    fresh_server: bool = True,
    progress: Callable[[str], None] | None = None,
    checkpoint: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """Every case on both systems, NATS then lakepubsub for each run of each case.

    A failed run is recorded (``Outcome.failures``) and the rest still run; a
    build failure fails every case. ``checkpoint`` gets the outcome so far after
    each case (for partial reports). Without ``fresh_server`` one lakepubsub
    server serves every run (each on a fresh topic and subscription).
    """
    outcome = Outcome()
    raw: list[w.Result] = []
    try:
        binary = gobuild.build()
    except gobuild.BuildError as exc:
        outcome.failures += [
            Failure(system, case, f"bench/loadgen not built: {describe(exc)}")
            for case in workload.cases
            for system in SYSTEMS
        ]
        return outcome
    samples: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    cases: list[tuple[str, Callable[..., list[w.Result]], Callable[..., list[w.Result]]]] = [
        (workload.drain_case, nats_drain, lps_drain),
        (
            workload.publish_case,
            lambda *a: nats_publish(*a, single=False),
            lambda *a: lps_publish(*a, single=False),
        ),
        (
            workload.single_case,
            lambda *a: nats_publish(*a, single=True),
            lambda *a: lps_publish(*a, single=True),
        ),
        (
            workload.latency_case,
            lambda *a: nats_latency(*a, samples=samples[peer_nats.SYSTEM]),
            lambda *a: lps_latency(*a, samples=samples[lps.SYSTEM]),
        ),
    ]
    with contextlib.ExitStack() as stack:
        shared: lps.LakePubSubServer | None = None
        for name, on_nats, on_lps in cases:
            for i in range(workload.runs):
                for system in SYSTEMS:
                    if progress:
                        progress(f"{system}: {name} (gRPC, run {i + 1}/{workload.runs})")
                    try:
                        if system == peer_nats.SYSTEM:
                            with peer_nats.NatsServer() as nats_server:
                                raw += on_nats(nats_server, binary, workload)
                            continue
                        if shared is None and not fresh_server:
                            shared = stack.enter_context(lps.LakePubSubServer(grpc=True))
                        with _server(shared) as server:
                            raw += on_lps(server, binary, workload)
                    except Exception as exc:
                        if progress:
                            progress(f"{system}: {name} FAILED: {describe(exc)[:300]}")
                        outcome.failures.append(Failure(system, name, describe(exc)))
                        _debug(exc)
            outcome.results = w.merge_runs(raw)
            outcome.latency_samples = {s: list(v) for s, v in samples.items() if v}
            if checkpoint:
                checkpoint(outcome)
    return outcome


@contextlib.contextmanager
def _server(shared: lps.LakePubSubServer | None) -> Iterator[lps.LakePubSubServer]:
    if shared is not None:
        yield shared
        return
    with lps.LakePubSubServer(grpc=True) as server:
        yield server


def _debug(exc: BaseException) -> None:
    if os.environ.get("BENCH_DEBUG"):
        traceback.print_exception(exc, file=sys.stderr)


# --- tables --------------------------------------------------------------------------


def failures_table(failures: Sequence[Failure]) -> str:
    lines = ["| system | case | error |", "| --- | --- | --- |"]
    for f in failures:
        error = " ".join(f.error.split()).replace("|", "\\|")
        lines.append(f"| {f.system} | {f.case} | {error} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="The gRPC cases: lakepubsub (Google's Go client) vs JetStream (nats.go)."
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run (for CI)")
    parser.add_argument("--runs", type=int, default=None, help="runs of every case")
    args = parser.parse_args(argv)
    chosen = quick() if args.quick else full()
    if args.runs is not None:
        chosen = dataclasses.replace(chosen, runs=args.runs)
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {line}", file=sys.stderr, flush=True)

    outcome = run_all(chosen, fresh_server=not args.quick, progress=progress)
    print(w.markdown_table(outcome.results))
    if outcome.failures:
        print(f"\n{failures_table(outcome.failures)}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
