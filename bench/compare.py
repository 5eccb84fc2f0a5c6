"""The side-by-side benchmark: lakepubsub over REST and gRPC and NATS JetStream, one run.

    python -m bench [--quick] [--s3] [--runs N] [--out DIR] [--only rest|grpc]

Runs the shared workload (``bench/workload.py``) against NATS JetStream
(``bench/peer_nats.py``) and against lakepubsub on a local lake
(``bench/peer_lakepubsub.py``), one after the other on this machine; with
``--s3`` also against lakepubsub on a moto S3 server, at ``S3_FRACTION`` of
the message counts (a moto commit is about ten times slower than a local
one), for its Delta commits, S3 requests and request cost per million
messages. Writes ``report.md`` and PNG charts (``-quick`` names for
``--quick``) to ``bench/results/``; a full run into the default directory
also puts its table into ``bench/README.md``.

The gRPC cases (``bench/grpc_bench.py``: lakepubsub through Google's Pub/Sub
Go client, JetStream through the NATS Go client, both driven by the Go load
generator in ``bench/loadgen``) run last, in the same run; ``--only grpc``
runs just them, ``--only rest`` just the others. A case that fails is
recorded in the report with its error and the others still run; the report is
rewritten after every phase and gRPC case (marked partial until the end), and
the command exits 1 if anything failed.

``--quick`` is for CI: the quick workload with every publish client capped at
``QUICK_ROUND_TRIPS`` requests (a batch-of-1 publish costs lakepubsub one
Delta commit per request), one run. It checks that the harness works (every
message published, received and acknowledged) and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import inspect
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench import grpc_bench, peer_nats
from bench import peer_lakepubsub as lps
from bench import workload as w

RESULTS = Path(__file__).parent / "results"
README = Path(__file__).parent / "README.md"
# The README's copy of the latest table sits between these lines.
README_START = "<!-- bench:latest:start -->"
README_END = "<!-- bench:latest:end -->"

# Requests per publish client in --quick (CI) runs.
QUICK_ROUND_TRIPS = 40
# Share of the message counts that the moto S3 runs publish.
S3_FRACTION = 0.1

# S3 Standard request prices in us-east-1, USD per 1,000 requests, as quoted in
# the product brief from aws.amazon.com/s3/pricing (not re-checked online when
# a report is written; the report says so). DELETE requests are free.
S3_PRICES_AS_OF = "2026-11"
S3_PUT_TIER_PER_1000 = 0.005  # PUT, COPY, POST, LIST
S3_GET_TIER_PER_1000 = 0.0004  # GET, SELECT and all other requests
_PUT_TIER = ("put", "post", "list")
_GET_TIER = ("get", "head")

# Figures in the side-by-side table; the storage ones get a section of their own.
_SIDE_BY_SIDE = (
    w.THROUGHPUT,
    w.BATCH_LATENCY_P50,
    w.BATCH_LATENCY_P99,
    w.LATENCY_P50,
    w.LATENCY_P99,
    w.LATENCY_MAX,
    w.ACHIEVED_RATE,
    w.DRAIN_TIME,
    w.SERVER_CPU_PER_MILLION,
    w.SERVER_PEAK_RSS,
    w.CLIENT_CPU_PER_MILLION,
)
_LABELS = {
    peer_nats.SYSTEM: "NATS JetStream",
    lps.SYSTEM: "lakepubsub (local lake)",
    lps.SYSTEM_S3: "lakepubsub (moto S3)",
}
_COLORS = {peer_nats.SYSTEM: "#4c72b0", lps.SYSTEM: "#dd8452", lps.SYSTEM_S3: "#55a868"}
# The gRPC cases' phase (both systems) in the report's timing line.
GRPC_PHASE = "grpc"
_PHASES = {**_LABELS, GRPC_PHASE: "gRPC cases"}
_EN_DASH = "\u2013"
_NONE = "\u2014"
_MILLION = 1_000_000
_PER_1000 = 1_000
_GIB = 1024**3
_CHART_DPI = 110

Key = tuple[str, str, str]


# --- workloads ----------------------------------------------------------------


def ci_workload() -> w.Workload:
    """The quick workload with every publish client capped at ``QUICK_ROUND_TRIPS`` requests."""
    quick = w.quick()
    publish = tuple(
        dataclasses.replace(
            case,
            messages_per_client=min(case.messages_per_client, QUICK_ROUND_TRIPS * case.batch_size),
        )
        for case in quick.publish
    )
    return dataclasses.replace(quick, publish=publish)


def scaled(workload: w.Workload, fraction: float) -> w.Workload:
    """The same cases with ``fraction`` of the messages (whole batches, at least one)."""

    def count(n: int, unit: int = 1) -> int:
        return max(unit, round(n * fraction) // unit * unit)

    replace = dataclasses.replace
    return replace(
        workload,
        publish=tuple(
            replace(c, messages_per_client=count(c.messages_per_client, c.batch_size))
            for c in workload.publish
        ),
        pull=tuple(replace(c, backlog_messages=count(c.backlog_messages)) for c in workload.pull),
        drain=tuple(replace(c, backlog_messages=count(c.backlog_messages)) for c in workload.drain),
    )


# --- running ------------------------------------------------------------------


@dataclass
class Run:
    """Everything one ``python -m bench`` measured."""

    workload: w.Workload
    s3_workload: w.Workload | None
    # Whether every lakepubsub run had a server of its own (CI runs share one).
    fresh_server: bool
    results: list[w.Result]
    # End-to-end latencies (ms) of the latency case, all runs, per system that gives them.
    latency_samples: dict[str, list[float]]
    elapsed_s: dict[str, float]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    # The gRPC cases' sizes, if they ran; whether the REST cases (and their NATS peers) ran.
    grpc_workload: grpc_bench.GrpcWorkload | None = None
    rest: bool = True
    # End-to-end latencies (ms) of the gRPC latency case, all runs, per system.
    grpc_latency_samples: dict[str, list[float]] = field(default_factory=dict)
    # Cases (or whole phases) that failed, with their errors.
    failures: list[grpc_bench.Failure] = field(default_factory=list)
    # True until the last case has run: a report written meanwhile says it is partial.
    partial: bool = False


def run(
    workload: w.Workload,
    *,
    s3_workload: w.Workload | None = None,
    fresh_server: bool = True,
    progress: Callable[[str], None] | None = None,
    grpc_workload: grpc_bench.GrpcWorkload | None = None,
    rest: bool = True,
    checkpoint: Callable[[Run], None] | None = None,
) -> Run:
    """NATS JetStream, then lakepubsub on a local lake, then optionally on moto S3, then
    the gRPC cases (``grpc_workload``; both systems, case by case).

    Without ``fresh_server`` one lakepubsub server serves all its runs (CI).
    Without ``rest`` only the gRPC cases run. A phase that fails is recorded in
    ``Run.failures`` and the next one still runs; ``checkpoint`` gets the run so
    far after every phase and every gRPC case.
    """
    done = Run(
        workload, s3_workload, fresh_server, [], {}, {}, os.getloadavg(), (0, 0, 0),
        grpc_workload=grpc_workload, rest=rest, partial=True,
    )  # fmt: skip

    def save() -> None:
        done.load_after = os.getloadavg()
        if checkpoint:
            checkpoint(done)

    def timed(system: str, results: Callable[[list[float]], list[w.Result]]) -> None:
        started = time.monotonic()
        samples: list[float] = []
        try:
            done.results += results(samples)
        except Exception as exc:  # the other phases still run; the report shows this one
            error = grpc_bench.describe(exc)
            done.failures.append(grpc_bench.Failure(system, "every case of the phase", error))
            if progress:
                progress(f"{system}: FAILED, the phase stopped: {error[:300]}")
        done.elapsed_s[system] = time.monotonic() - started
        if samples:
            done.latency_samples[system] = samples
        save()

    if rest:
        _run_rest(done, timed, progress=progress)
    if grpc_workload is not None:
        _run_grpc(done, grpc_workload, progress=progress, save=save)
    done.load_after = os.getloadavg()
    done.partial = False
    return done


def _run_rest(
    done: Run,
    timed: Callable[[str, Callable[[list[float]], list[w.Result]]], None],
    *,
    progress: Callable[[str], None] | None,
) -> None:
    workload, s3_workload, fresh_server = done.workload, done.s3_workload, done.fresh_server

    def nats(samples: list[float]) -> list[w.Result]:
        # The NATS peer hands out raw latencies once its run_all takes latency_samples.
        extra: dict[str, Any] = {}
        if "latency_samples" in inspect.signature(peer_nats.run_all).parameters:
            extra["latency_samples"] = samples
        return peer_nats.run_all(workload, progress=progress, **extra)

    timed(peer_nats.SYSTEM, nats)
    timed(
        lps.SYSTEM,
        lambda samples: lps.run_all(
            workload, fresh_server=fresh_server, progress=progress, latency_samples=samples
        ),
    )
    if s3_workload is not None:
        timed(
            lps.SYSTEM_S3,
            lambda samples: lps.run_all(
                s3_workload,
                s3=True,
                fresh_server=fresh_server,
                progress=progress,
                latency_samples=samples,
            ),
        )


def _run_grpc(
    done: Run,
    workload: grpc_bench.GrpcWorkload,
    *,
    progress: Callable[[str], None] | None,
    save: Callable[[], None],
) -> None:
    """The gRPC cases; their results so far join the run's after every case."""
    started = time.monotonic()
    results, failures = list(done.results), list(done.failures)

    def merge(outcome: grpc_bench.Outcome) -> None:
        done.results = results + outcome.results
        done.failures = failures + outcome.failures
        done.grpc_latency_samples = outcome.latency_samples
        done.elapsed_s[GRPC_PHASE] = time.monotonic() - started

    def checkpoint(outcome: grpc_bench.Outcome) -> None:
        merge(outcome)
        save()

    try:
        outcome = grpc_bench.run_all(
            workload, fresh_server=done.fresh_server, progress=progress, checkpoint=checkpoint
        )
    except Exception as exc:  # a bug in the harness: keep what was measured before it
        error = grpc_bench.describe(exc)
        done.failures.append(grpc_bench.Failure(GRPC_PHASE, "the gRPC cases not yet run", error))
        done.elapsed_s[GRPC_PHASE] = time.monotonic() - started
        return
    merge(outcome)


# --- tables -------------------------------------------------------------------


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _cell(result: w.Result | None, divisor: float = 1.0) -> str:
    if result is None:
        return _NONE
    median = _fmt(result.median / divisor)
    if len(result.values) == 1:
        return median
    return f"{median} [{_fmt(result.min / divisor)}{_EN_DASH}{_fmt(result.max / divisor)}]"


def _ratio(ours: w.Result | None, peer: w.Result | None) -> str:
    if ours is None or peer is None or peer.median == 0:
        return _NONE
    return f"{ours.median / peer.median:.3g}\u00d7"


def _index(results: Iterable[w.Result], system: str) -> dict[Key, w.Result]:
    return {(r.case, r.metric, r.unit): r for r in results if r.system == system}


def side_by_side_table(results: Sequence[w.Result]) -> str:
    """lakepubsub (local lake) and NATS JetStream per case and figure, with lakepubsub ÷ NATS."""
    ours, peer = _index(results, lps.SYSTEM), _index(results, peer_nats.SYSTEM)
    keys = [k for k in dict.fromkeys([*ours, *peer]) if k[1] in _SIDE_BY_SIDE]
    lines = [
        "| case | metric | unit | lakepubsub | NATS JetStream | ratio |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for key in keys:
        mine, theirs = ours.get(key), peer.get(key)
        lines.append(
            f"| {' | '.join(key)} | {_cell(mine)} | {_cell(theirs)} | {_ratio(mine, theirs)} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    """A target (bench/README.md): one figure of one case, its bound, and the passing side."""

    label: str
    case: str
    metric: str
    unit: str
    bound: float
    at_least: bool
    # The figure is compared divided by this (commits per 1M messages -> per message).
    divisor: float = 1.0

    def met(self, result: w.Result) -> bool:
        value = result.median / self.divisor
        return value >= self.bound if self.at_least else value <= self.bound


def targets(workload: w.Workload) -> list[Target]:
    """The targets (bench/README.md) for the REST API, as figures of this workload's cases."""
    publish = {(c.batch_size, c.clients): c.name for c in workload.publish}
    pull = next(c.name for c in workload.pull if c.consumers == 4)
    found = [
        Target(
            f"publish, 8 clients, batches of {batch:,}",
            publish[batch, 8], w.THROUGHPUT, w.MSGS_PER_S, 50_000, at_least=True,
        )
        for batch in (100, 1000)
    ]  # fmt: skip
    found += [
        Target(
            f"single-message publish {metric.removeprefix('batch_latency_')}, "
            f"{_count(clients, 'client')}",
            publish[1, clients], metric, w.MS, bound, at_least=False,
        )
        for clients in (1, 8)
        for metric, bound in ((w.BATCH_LATENCY_P50, 25), (w.BATCH_LATENCY_P99, 100))
    ]  # fmt: skip
    found.append(
        Target("pull + ack, 4 consumers", pull, w.THROUGHPUT, w.MSGS_PER_S, 20_000, at_least=True)
    )
    found += [
        Target(
            f"Delta commits per delivered message, {case}",
            case, lps.DELTA_COMMITS_PER_MILLION, "commits/msg", 0.01, at_least=False,
            divisor=_MILLION,
        )
        for case in (pull, *(d.name for d in workload.drain))
    ]  # fmt: skip
    return found


def targets_table(results: Sequence[w.Result], workload: w.Workload) -> str:
    ours = {(r.case, r.metric): r for r in results if r.system == lps.SYSTEM}
    peer = {(r.case, r.metric): r for r in results if r.system == peer_nats.SYSTEM}
    lines = [
        "| target (bench/README.md) | unit | lakepubsub median [min-max] | target | met "
        "| NATS JetStream |",
        "| --- | --- | ---: | ---: | :---: | ---: |",
    ]
    for t in targets(workload):
        if (result := ours.get((t.case, t.metric))) is None:
            continue
        met = "yes" if t.met(result) else "**no**"
        bound = f"{'≥' if t.at_least else '≤'} {t.bound:,g}"
        lines.append(
            f"| {t.label} | {t.unit} | {_cell(result, t.divisor)} | {bound} | {met} "
            f"| {_cell(peer.get((t.case, t.metric)), t.divisor)} |"
        )
    latency = workload.latency[0].name
    for metric in (w.LATENCY_P50, w.LATENCY_P99):
        if (result := ours.get((latency, metric))) is not None:
            lines.append(
                f"| end-to-end {metric.removeprefix('latency_')}, {latency} | {w.MS} "
                f"| {_cell(result)} | {_NONE} | {_NONE} | {_cell(peer.get((latency, metric)))} |"
            )
    return "\n".join(lines)


def _cost_per_million(by_kind: dict[str, w.Result]) -> w.Result | None:
    """USD of S3 requests per million messages, per run, from the per-kind request counts."""
    if not by_kind:
        return None
    runs = len(next(iter(by_kind.values())).values)

    def tier(kinds: Sequence[str], run: int) -> float:
        return sum(by_kind[k].values[run] for k in kinds if k in by_kind) / _PER_1000

    costs = tuple(
        tier(_PUT_TIER, i) * S3_PUT_TIER_PER_1000 + tier(_GET_TIER, i) * S3_GET_TIER_PER_1000
        for i in range(runs)
    )
    return w.Result(lps.SYSTEM_S3, "", "s3_request_cost", "USD/1M msgs", costs)


def storage_table(results: Sequence[w.Result], system: str) -> str:
    """Delta commits and conflicts per million messages, and on S3 requests and their cost."""
    found = [r for r in results if r.system == system]
    cases = list(dict.fromkeys(r.case for r in found))
    by_case = {(r.case, r.metric): r for r in found}
    s3 = any(r.metric == lps.s3_metric("put") for r in found)
    columns = ["Delta commits", "commit conflicts"]
    if s3:
        columns += [kind.upper() for kind in lps.S3_KINDS] + ["request cost, USD"]
    lines = [
        f"| case (per 1M messages) | {' | '.join(columns)} |",
        f"| --- |{' ---: |' * len(columns)}",
    ]
    for case in cases:
        cells = [
            _cell(by_case.get((case, lps.DELTA_COMMITS_PER_MILLION))),
            _cell(by_case.get((case, lps.COMMIT_CONFLICTS_PER_MILLION))),
        ]
        if s3:
            by_kind = {
                kind: by_case[case, lps.s3_metric(kind)]
                for kind in lps.S3_KINDS
                if (case, lps.s3_metric(kind)) in by_case
            }
            cells += [_cell(by_kind.get(kind)) for kind in lps.S3_KINDS]
            cost = _cost_per_million(by_kind)
            cells.append(_cell(cost) if cost is None else _money(cost))
        lines.append(f"| {case} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _money(result: w.Result) -> str:
    def usd(value: float) -> str:
        return f"${value:,.2f}" if value >= 1 else f"${value:.3g}"

    if len(result.values) == 1:
        return usd(result.median)
    return f"{usd(result.median)} [{usd(result.min)}{_EN_DASH}{usd(result.max)}]"


def full_table(results: Sequence[w.Result], system: str) -> str:
    """Every figure of one system (the S3 runs' own table)."""
    return w.markdown_table(r for r in results if r.system == system)


# The REST case each gRPC figure is shown beside: the closest one of the REST workload.
def _rest_counterparts(workload: w.Workload, grpc: grpc_bench.GrpcWorkload) -> dict[str, str]:
    publish = {(c.batch_size, c.clients): c.name for c in workload.publish}
    found = {
        # Google's Go client sends bundles of up to 100 messages by default.
        grpc.publish_case: publish.get((100, grpc.publishers), ""),
        grpc.single_case: publish.get((1, 1), ""),
        grpc.latency_case: next(
            (c.name for c in workload.latency if c.offered_rate_per_s == grpc.latency_rate_per_s),
            "",
        ),
        grpc.drain_case: next((c.name for c in workload.drain if c.consumers == 1), ""),
    }
    return {k: v for k, v in found.items() if v}


_GRPC_FIGURES = (
    w.DRAIN_TIME,
    w.THROUGHPUT,
    w.BATCH_LATENCY_P50,
    w.BATCH_LATENCY_P99,
    w.LATENCY_P50,
    w.LATENCY_P99,
    w.LATENCY_MAX,
    w.ACHIEVED_RATE,
    w.SERVER_CPU_PER_MILLION,
    w.CLIENT_CPU_PER_MILLION,
)
_FAILED = "**failed**"


def grpc_table(
    results: Sequence[w.Result],
    failures: Sequence[grpc_bench.Failure],
    workload: w.Workload,
    grpc: grpc_bench.GrpcWorkload,
) -> str:
    """The gRPC cases: lakepubsub (Go client, gRPC) beside JetStream (Go client), and the
    closest REST case's figure from this run (the REST client is Python)."""
    ours, peer = _index(results, lps.SYSTEM), _index(results, peer_nats.SYSTEM)
    failed = {(f.system, f.case) for f in failures}
    rest = _rest_counterparts(workload, grpc)
    lines = [
        "| case | metric | unit | lakepubsub gRPC | NATS JetStream | ratio "
        "| lakepubsub REST, same run | REST case |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for case in grpc.cases:
        metrics = [m for m in _GRPC_FIGURES for k in (*ours, *peer) if k[:2] == (case, m)]
        if not metrics:
            lines.append(
                f"| {case} | {_NONE} | | {_grpc_cell(None, (lps.SYSTEM, case) in failed)} "
                f"| {_grpc_cell(None, (peer_nats.SYSTEM, case) in failed)} | | | |"
            )
            continue
        for metric in dict.fromkeys(metrics):
            unit = next(k[2] for k in (*ours, *peer) if k[:2] == (case, metric))
            mine, theirs = ours.get((case, metric, unit)), peer.get((case, metric, unit))
            twin = rest.get(case, "")
            if metric == w.DRAIN_TIME and not any(
                c.backlog_messages == grpc.drain_messages for c in workload.drain
            ):
                twin = ""  # drain times of different backlogs do not compare
            beside = ours.get((twin, metric, unit)) if twin else None
            lines.append(
                f"| {case} | {metric} | {unit} "
                f"| {_grpc_cell(mine, (lps.SYSTEM, case) in failed)} "
                f"| {_grpc_cell(theirs, (peer_nats.SYSTEM, case) in failed)} "
                f"| {_ratio(mine, theirs)} | {_cell(beside)} | {twin if beside else ''} |"
            )
    return "\n".join(lines)


def _grpc_cell(result: w.Result | None, failed: bool) -> str:
    if result is None:
        return _FAILED if failed else _NONE
    return f"{_cell(result)} ({_FAILED} in some runs)" if failed else _cell(result)


# --- the machine --------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _command(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _disk(path: str) -> str:
    """The device, file system and size under ``path`` (where the lakes and stores live)."""
    parts = [p for p in psutil.disk_partitions(all=True) if path.startswith(p.mountpoint)]
    if not parts:
        return "unknown disk"
    part = max(parts, key=lambda p: len(p.mountpoint))
    usage = psutil.disk_usage(part.mountpoint)
    device = Path(part.device).name
    rotational = Path(f"/sys/block/{device}/queue/rotational")
    kind = ""
    if rotational.is_file():
        kind = f", kernel-reported rotational={rotational.read_text().strip()}"
    model = _command("lsblk", "-dno", "MODEL,TRAN", part.device)
    return (
        f"{part.device} ({part.fstype}, {usage.total / _GIB:.0f} GiB, "
        f"{usage.free / _GIB:.0f} GiB free{kind}{', ' + model if model else ''}) "
        f"mounted at {part.mountpoint}"
    )


def machine_lines(done: Run) -> list[str]:
    nats_server = _command(peer_nats.find_nats_server(), "--version") or "unknown"
    temp = tempfile.gettempdir()
    return [
        f"- **CPU:** {os.cpu_count()} cores ({_cpu_model()}); "
        f"{psutil.virtual_memory().total / _GIB:.1f} GiB RAM; {platform.platform()}",
        f"- **Disk:** lakes, moto and the JetStream store in `{temp}` on {_disk(temp)}",
        f"- **Load average** (1/5/15 min): {_load(done.load_before)} at the start, "
        f"{_load(done.load_after)} at the end. Other jobs shared the machine; figures are noisy.",
        f"- **Software:** Python {platform.python_version()}; lakepubsub "
        f"{_version('lakepubsub')}, deltalake {_version('deltalake')}, pyarrow "
        f"{_version('pyarrow')}, FastAPI {_version('fastapi')}, uvicorn {_version('uvicorn')} "
        f"(uvloop {_version('uvloop')}, httptools {_version('httptools')}), httpx "
        f"{_version('httpx')}, orjson {_version('orjson')}; {nats_server}, nats-py "
        f"{_version('nats-py')}; moto {_version('moto')}",
        *([grpc_bench.software_line()] if done.grpc_workload else []),
    ]


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.1f}" for v in load)


# --- charts -------------------------------------------------------------------


def throughput_chart(results: Sequence[w.Result], path: Path) -> None:
    """Grouped horizontal bars: throughput per case and system, min-max whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = [r for r in results if r.metric == w.THROUGHPUT]
    cases = list(dict.fromkeys(r.case for r in found))
    systems = [s for s in _LABELS if any(r.system == s for r in found)]
    by_key = {(r.system, r.case): r for r in found}
    height = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.55 * len(cases) * len(systems)))
    for k, system in enumerate(systems):
        rows = [(i, by_key[system, c]) for i, c in enumerate(cases) if (system, c) in by_key]
        ys = [i + (k - (len(systems) - 1) / 2) * height for i, _ in rows]
        medians = [r.median for _, r in rows]
        errors = [[r.median - r.min for _, r in rows], [r.max - r.median for _, r in rows]]
        ax.barh(ys, medians, height, xerr=errors, label=_LABELS[system], color=_COLORS[system])
        for y, value in zip(ys, medians, strict=True):
            ax.annotate(
                f" {_fmt(value)}", (value, y), va="center", fontsize=7, annotation_clip=False
            )
    ax.set_yticks(range(len(cases)), cases, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("messages per second (log scale; median, whiskers min-max)")
    ax.set_title("Throughput, 1 KiB messages")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=_CHART_DPI)
    plt.close(fig)


def latency_chart(done: Run, path: Path) -> None:
    """End-to-end latency CDF (latency case), and publish round-trip p50/p99 per publish case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = done.results
    fig, (cdf, batches) = plt.subplots(1, 2, figsize=(13, 5.5))
    latency_case = done.workload.latency[0].name
    for system, label in _LABELS.items():
        samples = sorted(done.latency_samples.get(system, []))
        if samples:
            fractions = [(i + 1) / len(samples) for i in range(len(samples))]
            cdf.step(samples, fractions, where="post", label=label, color=_COLORS[system])
            continue
        # A system that reports only percentiles shows them as points.
        points = [
            (r.median, fraction)
            for metric, fraction in (
                (w.LATENCY_P50, 0.5),
                (w.LATENCY_P99, 0.99),
                (w.LATENCY_MAX, 1.0),
            )
            for r in results
            if r.system == system and r.metric == metric and r.case == latency_case
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            cdf.plot(xs, ys, "o", label=f"{label} (p50, p99, max only)", color=_COLORS[system])
    for system, samples in done.grpc_latency_samples.items():
        # The gRPC latency case (Go clients on both sides), dashed.
        ordered = sorted(samples)
        fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
        rate = done.grpc_workload.latency_rate_per_s if done.grpc_workload else 0
        over = " over gRPC" if system == lps.SYSTEM else ""
        label = f"{_LABELS[system]}, Go client{over} ({rate:,} msgs/s)"
        cdf.step(
            ordered, fractions, where="post", linestyle="--", label=label, color=_COLORS[system]
        )
    cdf.set_xscale("log")
    cdf.set_xlabel("publish → receive latency, ms (log scale)")
    cdf.set_ylabel("fraction of messages")
    rate = done.workload.latency[0].offered_rate_per_s
    cdf.set_title(f"End-to-end latency at {rate:,} msgs/s offered ({latency_case}), all runs")
    cdf.grid(which="both", alpha=0.3)
    cdf.legend(fontsize=8, loc="lower right")

    publish = [c.name for c in done.workload.publish]
    systems = [s for s in (peer_nats.SYSTEM, lps.SYSTEM) if any(r.system == s for r in results)]
    by_key = {(r.system, r.case, r.metric): r for r in results}
    width = 0.8 / (2 * len(systems))
    for k, (system, metric) in enumerate(
        (s, m) for s in systems for m in (w.BATCH_LATENCY_P50, w.BATCH_LATENCY_P99)
    ):
        offsets = [i + (k - (2 * len(systems) - 1) / 2) * width for i in range(len(publish))]
        values = [
            by_key[system, c, metric].median if (system, c, metric) in by_key else 0.0
            for c in publish
        ]
        hatch = "//" if metric == w.BATCH_LATENCY_P99 else ""
        label = f"{_LABELS[system]} {metric.removeprefix('batch_latency_')}"
        batches.bar(
            offsets,
            values,
            width,
            label=label,
            color=_COLORS[system],
            hatch=hatch,
            edgecolor="white",
        )
    batches.set_xticks(
        range(len(publish)), [c.removeprefix("publish ") for c in publish], rotation=20, fontsize=8
    )
    batches.set_yscale("log")
    batches.set_ylabel("publish request round trip, ms (log scale; medians of runs)")
    batches.set_title("Publish round-trip latency p50 / p99 per publish case")
    batches.grid(axis="y", which="both", alpha=0.3)
    batches.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=_CHART_DPI)
    plt.close(fig)


# --- the report ---------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _workload_lines(workload: w.Workload, *, fresh_server: bool) -> list[str]:
    publish = ", ".join(
        f"batches of {c.batch_size:,} from {_count(c.clients, 'client')}: {c.total_messages:,}"
        for c in workload.publish
    )
    pull = ", ".join(
        f"{_count(c.consumers, 'consumer')}: {c.backlog_messages:,}" for c in workload.pull
    )
    latency = ", ".join(
        f"{c.offered_rate_per_s:,} msgs/s for {c.duration_s:g} s "
        f"({_count(c.total_messages, 'message')}), pulls of up to {c.max_messages_per_pull}"
        for c in workload.latency
    )
    drain = ", ".join(
        f"{_count(c.backlog_messages, 'message')}, {_count(c.consumers, 'consumer')}"
        for c in workload.drain
    )
    servers = (
        "each run on a fresh server and store"
        if fresh_server
        else "each NATS run on a fresh server; all lakepubsub runs on one server, "
        "each on a fresh topic and subscription"
    )
    return [
        f"- 1 KiB incompressible messages; {_count(workload.runs, 'run')} of every case, "
        f"{servers}; every client its own process; ack deadline {workload.ack_deadline_s} s.",
        f"- publish, messages per case: {publish}.",
        f"- pull + ack of a backlog published first (untimed), pulls of up to "
        f"{workload.pull[0].max_messages_per_pull:,}: {pull}.",
        f"- end-to-end latency, one publisher (one message per publish), one consumer: {latency}.",
        f"- backlog drain: {drain}.",
    ]


def report(done: Run, *, command: str, charts: tuple[str | None, str | None]) -> str:
    """The report; ``charts`` are the chart files' names (``None``: no such chart)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    minutes = sum(done.elapsed_s.values()) / 60
    took = ", ".join(f"{_PHASES.get(s, s)} {t / 60:.1f} min" for s, t in done.elapsed_s.items())
    sections = ["# lakepubsub vs NATS JetStream: side-by-side benchmark", ""]
    if done.partial:
        sections += [
            f"**Partial report** ({now}): the run is still going; the cases so far.",
            "",
        ]
    sections += [
        f"Written {now} by `{command}` in {minutes:.1f} min ({took}).",
        "",
        "## Machine",
        "",
        *machine_lines(done),
        "",
        "## Workload",
        "",
        "Defined in `bench/workload.py` (REST cases) and `bench/grpc_bench.py` (gRPC cases), "
        "the same for both systems, on the same machine, one system after the other.",
        "",
        *(_workload_lines(done.workload, fresh_server=done.fresh_server) if done.rest else []),
        *(grpc_bench.workload_lines(done.grpc_workload) if done.grpc_workload else []),
        "",
        "Each figure is the median of the runs, with [min-max]. `ratio` is lakepubsub ÷ NATS: "
        "for throughput below 1 means lakepubsub is slower; for latency, time, CPU and memory "
        "above 1 means lakepubsub takes more. CPU is user + system seconds per million messages, "
        "of the server process (uvicorn; nats-server) and of all client processes; peak RSS is "
        "the server's.",
        "",
    ]
    if done.rest:
        sections += ["## Targets", "", targets_table(done.results, done.workload), ""]
    sections += [
        "## Side by side",
        "",
        side_by_side_table(done.results),
        "",
        *([f"![throughput]({charts[0]})", ""] if charts[0] else []),
        *([f"![latency]({charts[1]})", ""] if charts[1] else []),
    ]
    if done.grpc_workload is not None:
        sections += [
            "## gRPC: Google's Go client vs the NATS Go client",
            "",
            "lakepubsub through Google's unmodified Pub/Sub Go client over gRPC "
            "(`lakepubsub serve`, one process), NATS JetStream through the official NATS Go "
            "client; both driven by `bench/loadgen`, so neither client is the slow part "
            "(`bench/grpc_bench.py` says how each case maps onto each system). The drain "
            "receives through StreamingPull on one side and a push consumer on the other. "
            "`lakepubsub REST` is the closest REST case of the same run (Python clients), "
            "where it ran.",
            "",
            grpc_table(done.results, done.failures, done.workload, done.grpc_workload),
            "",
        ]
    if done.failures:
        sections += [
            "## Failed cases",
            "",
            "These runs failed; the other cases ran and are reported above.",
            "",
            grpc_bench.failures_table(done.failures),
            "",
        ]
    sections += [
        "## Delta commits per million messages (lakepubsub, local lake)",
        "",
        storage_table(done.results, lps.SYSTEM),
        "",
    ]
    if done.s3_workload is not None:
        sections += [
            "## lakepubsub on S3 (moto server)",
            "",
            f"The same cases at {S3_FRACTION:g} of the message counts:",
            "",
            *_workload_lines(done.s3_workload, fresh_server=done.fresh_server),
            "",
            "S3 requests are counted from moto's request log over each case's timed part "
            "(setup and backlog publishing excluded). Request cost at S3 Standard prices "
            f"(us-east-1, as of {S3_PRICES_AS_OF}, from aws.amazon.com/s3/pricing, not re-checked "
            f"when this report was written): PUT, COPY, POST and LIST "
            f"${S3_PUT_TIER_PER_1000} per 1,000; GET, HEAD and other requests "
            f"${S3_GET_TIER_PER_1000} per 1,000; DELETE free. Storage and transfer not included.",
            "",
            storage_table(done.results, lps.SYSTEM_S3),
            "",
            full_table(done.results, lps.SYSTEM_S3),
            "",
        ]
    sections += [
        "## Reproduce",
        "",
        "```",
        "make install",
        "python -m bench            # this report: bench/results/report.md and *.png",
        "python -m bench --s3       # also lakepubsub on a moto S3 server",
        "python -m bench --quick    # CI: tiny sizes, one run, a few minutes",
        "python -m bench --only grpc --runs 1   # just the gRPC cases and their NATS peers",
        "```",
        "",
    ]
    return "\n".join(sections)


def update_readme(readme: Path, done: Run, report_name: str) -> None:
    """Put the latest targets and side-by-side tables between the README's markers."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return
    load = _load(done.load_before)
    body = "\n".join(
        [
            README_START,
            "",
            f"From `results/{report_name}` ({datetime.date.today().isoformat()}, "
            f"{os.cpu_count()} cores, load average {load} at the start; "
            "median [min-max] of the runs; ratio = lakepubsub ÷ NATS):",
            "",
            targets_table(done.results, done.workload),
            "",
            side_by_side_table(done.results),
            "",
        ]
    )
    readme.write_text(text[:start] + body + text[end:])


def _chart(draw: Callable[[Path], None], out: Path, name: str | None) -> str | None:
    """Draw one chart; a run with nothing to draw (every case failed) has none."""
    if name is None:
        return None
    try:
        draw(out / name)
    except (ValueError, ZeroDivisionError, KeyError) as exc:
        print(f"no {name}: {exc!r}", file=sys.stderr)
        return None
    return name


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="The side-by-side benchmark: lakepubsub over REST and gRPC, and NATS "
        "JetStream.",
    )
    parser.add_argument("--quick", action="store_true", help="CI sizes, one run, a few minutes")
    parser.add_argument("--s3", action="store_true", help="also run lakepubsub on moto S3")
    parser.add_argument("--runs", type=int, default=None, help="runs of every case")
    parser.add_argument("--out", type=Path, default=RESULTS, help="report directory")
    parser.add_argument(
        "--only",
        choices=("rest", "grpc"),
        default=None,
        help="only the REST cases, or only the gRPC cases (each with its NATS peers)",
    )
    args = parser.parse_args(argv)
    workload = ci_workload() if args.quick else w.full()
    grpc_workload = grpc_bench.quick() if args.quick else grpc_bench.full()
    if args.runs is not None:
        workload = dataclasses.replace(workload, runs=args.runs)
        grpc_workload = dataclasses.replace(grpc_workload, runs=args.runs)
    rest = args.only != "grpc"
    s3_workload = scaled(workload, S3_FRACTION) if args.s3 and not args.quick else None
    if args.s3 and args.quick:
        s3_workload = workload
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f} s] {line}", file=sys.stderr, flush=True)

    # A gRPC-only run has report-grpc.md of its own: it never replaces the full report.
    suffix = ("-grpc" if not rest else "") + ("-quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    charts: tuple[str | None, str | None] = (
        f"throughput{suffix}.png",
        f"latency{suffix}.png" if rest else None,
    )
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])
    report_path = args.out / f"report{suffix}.md"

    def checkpoint(so_far: Run) -> None:
        report_path.write_text(report(so_far, command=command, charts=charts))

    done = run(
        workload,
        s3_workload=s3_workload if rest else None,
        fresh_server=not args.quick,
        progress=progress,
        grpc_workload=grpc_workload if args.only != "rest" else None,
        rest=rest,
        checkpoint=checkpoint,
    )
    charts = (
        _chart(lambda path: throughput_chart(done.results, path), args.out, charts[0]),
        _chart(lambda path: latency_chart(done, path), args.out, charts[1]),
    )
    report_path.write_text(report(done, command=command, charts=charts))
    if not args.quick and args.out == RESULTS and rest:
        update_readme(README, done, report_path.name)
    print(side_by_side_table(done.results))
    print(f"\nwrote {report_path}", file=sys.stderr)
    if done.failures:
        print(f"\n{len(done.failures)} failed:\n{grpc_bench.failures_table(done.failures)}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
