"""The gRPC cases of the side-by-side run: lakepubsub through Google's Pub/Sub Go client,
NATS JetStream through nats.go, both driven by ``bench/loadgen`` (``python -m bench
--only grpc [--quick] [--runs N]``).

How each case maps onto each system and what every run checks: bench/README.md, "gRPC
cases". A run that fails (the build, the client, a check) is recorded with its error and
the other runs still run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import gobuild, peer_nats
from bench import peer_lakepubsub as lps
from bench import workload as w
from bench.harness.lakepubsub_server import BenchError, servers
from bench.harness.meter import ProcessMeter, ProcessUsage
from bench.harness.nats_server import NatsServer
from bench.report import executable_version, table, version

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
    go = executable_version("go", "version") if shutil.which("go") else "no Go on PATH"
    wanted = (
        "cloud.google.com/go/pubsub/v2",
        "github.com/nats-io/nats.go",
        "google.golang.org/grpc",
    )
    requires = [line.split() for line in (gobuild.LOADGEN / "go.mod").read_text().splitlines()]
    modules = [f"{p[0]} {p[1]}" for p in requires if len(p) > 1 and p[0] in wanted]
    return (
        f"- **gRPC cases:** {go}; `bench/loadgen` with {', '.join(modules)}; "
        f"the server's grpcio {version('grpcio')}"
    )


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
    output: list[str] = []
    ready = threading.Event()

    def read(stdout: Any) -> None:
        for line in stdout:
            output.append(line.rstrip("\n"))
            if line.startswith('{"ready"'):
                ready.set()

    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, **NO_METADATA_ENV, **(env or {})},
            text=True,
        )
        reader = threading.Thread(target=read, args=(process.stdout,), daemon=True)
        reader.start()

        def tails() -> str:
            stderr.seek(0)
            out, err = "\n".join(output)[-OUTPUT_TAIL_CHARS:], stderr.read()[-OUTPUT_TAIL_CHARS:]
            return f"\nstdout: {out}\nstderr: {err}"

        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not ready.wait(0.5):
                if process.poll() is not None:
                    raise BenchError(f"exited {process.returncode} before it was ready")
                if time.monotonic() > deadline:
                    raise BenchError(f"not ready in {READY_TIMEOUT_S:g} s")
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
            raise BenchError(f"loadgen {' '.join(args)}: {describe(exc)}{tails()}") from exc
        reader.join(timeout=5)
        docs = [json.loads(line) for line in output if line.startswith("{")]
        report = next((d for d in reversed(docs) if "mode" in d), None)
        if process.returncode != 0 or report is None or report.get("errors"):
            errors = report.get("errors") if report else None
            raise BenchError(
                f"loadgen {' '.join(args)} exited {process.returncode}; errors: {errors}"
                f"{tails() if report is None else ''}"
            )
    return LoadgenReport(report), meter.usage


# The cases run on either system's side.
_Side = lps.Side | peer_nats.Side


def run_drain(side: _Side, binary: Path, workload: GrpcWorkload) -> list[w.Result]:
    """One run of the drain case: publish the backlog (untimed), then receive and ack it."""
    n, case = workload.drain_messages, workload.drain_case
    side.prepare(receive=True, backlog=n)
    report, usage = _loadgen(side, binary, ["-mode", "drain", "-messages", str(n)], workload)
    _check_received(report, n)
    side.check_acked(n)
    return [
        *w.consume_figures(
            side.system, case, seconds=report.elapsed_s, messages=report["distinct"], drain=True
        ),
        *side.figures(case, usage, report.cpu_s, n),
    ]


def run_publish(
    side: _Side, binary: Path, workload: GrpcWorkload, *, single: bool
) -> list[w.Result]:
    """One run of a publish case on a fresh topic or stream."""
    publishers = 1 if single else workload.publishers
    n = workload.single_messages if single else workload.publish_messages
    case = workload.single_case if single else workload.publish_case
    side.prepare(receive=False)
    args = ["-mode", "publish", "-publishers", str(publishers), "-messages", str(n)]
    report, usage = _loadgen(side, binary, [*args, *(["-single"] if single else [])], workload)
    if report["published"] != n:
        raise BenchError(f"{report['published']} of {n} publishes confirmed")
    side.check_stored(n + publishers)
    round_trips = report.latencies_ms if single else []
    if single and len(round_trips) != n:
        raise BenchError(f"{len(round_trips)} round trips reported for {n} publishes")
    return [
        *w.publish_figures(
            side.system, case, seconds=report.elapsed_s, messages=n, round_trips_ms=round_trips
        ),
        *side.figures(case, usage, report.cpu_s, n),
    ]


def run_latency(
    side: _Side, binary: Path, workload: GrpcWorkload, samples: list[float] | None = None
) -> list[w.Result]:
    """One run of the latency case: publish at a fixed rate, receive in the same process."""
    n, case = workload.latency_messages, workload.latency_case
    side.prepare(receive=True)
    args = ["-mode", "latency", "-messages", str(n), "-rate", str(workload.latency_rate_per_s)]
    report, usage = _loadgen(side, binary, args, workload)
    _check_received(report, n)
    side.check_acked(n)
    latencies = report.latencies_ms
    if len(latencies) != n:
        raise BenchError(f"{len(latencies)} latencies reported for {n} messages")
    if samples is not None:
        samples.extend(latencies)
    return [
        *w.latency_figures(side.system, case, latencies, achieved_rate=n / report["publish_s"]),
        *side.figures(case, usage, report.cpu_s, n),
    ]


def receiving_args(workload: GrpcWorkload) -> list[str]:
    """``bench/loadgen``'s receiver settings for ``workload`` (both systems)."""
    return ["-max-outstanding", str(workload.max_outstanding), "-streams", str(STREAMS)]


def _loadgen(
    side: _Side, binary: Path, args: list[str], workload: GrpcWorkload
) -> tuple[LoadgenReport, ProcessUsage]:
    target, env = side.loadgen_args()
    found = run_loadgen(
        binary, [*target, *args, *receiving_args(workload)], server_pid=side.server.pid, env=env
    )
    side.ran()
    return found


def _check_received(report: LoadgenReport, n: int) -> None:
    if report["distinct"] != n or report["redelivered"] or report["acked"] < n:
        raise BenchError(
            f"received {report['received']} deliveries of {report['distinct']} distinct "
            f"messages ({n} expected), {report['redelivered']} redelivered, "
            f"{report['acked']} acked"
        )


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
    cases: list[tuple[str, Callable[[_Side], list[w.Result]]]] = [
        (workload.drain_case, lambda side: run_drain(side, binary, workload)),
        (workload.publish_case, lambda side: run_publish(side, binary, workload, single=False)),
        (workload.single_case, lambda side: run_publish(side, binary, workload, single=True)),
        (
            workload.latency_case,
            lambda side: run_latency(side, binary, workload, samples[side.system]),
        ),
    ]
    ack_s = workload.ack_deadline_s
    with servers(fresh=fresh_server, serve=True, grpc_port=True) as lakepubsub_server:
        for name, run in cases:
            for i in range(workload.runs):
                for system in SYSTEMS:
                    if progress:
                        progress(f"{system}: {name} (gRPC, run {i + 1}/{workload.runs})")
                    try:
                        if system == peer_nats.SYSTEM:
                            with NatsServer() as nats_server:
                                raw += run(peer_nats.Side(nats_server, ack_s, durable=PUSH_DURABLE))
                            continue
                        with lakepubsub_server() as server:
                            raw += run(lps.Side(server, ack_s))
                    except Exception as exc:
                        if progress:
                            progress(f"{system}: {name} FAILED: {describe(exc)[:300]}")
                        outcome.failures.append(Failure(system, name, describe(exc)))
            outcome.results = w.merge_runs(raw)
            outcome.latency_samples = {s: list(v) for s, v in samples.items() if v}
            if checkpoint:
                checkpoint(outcome)
    return outcome


def failures_table(failures: Sequence[Failure]) -> str:
    rows = [(f.system, f.case, " ".join(f.error.split()).replace("|", "\\|")) for f in failures]
    return "\n".join(table(["system", "case", "error"], rows, right=3))
