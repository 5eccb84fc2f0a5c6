"""The side-by-side workload, shared by both peers (lakepubsub over REST, NATS JetStream):
its cases and sizes, the figures every run reports, and the loop that runs every case on
one peer. What each case measures: bench/README.md, "The workload".
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from bench.clients import Report, span_s
from bench.harness.lakepubsub_server import BenchError
from bench.harness.meter import ProcessUsage
from bench.report import EN_DASH, Result, fmt, table
from lakepubsub.constants import DEFAULT_ACK_DEADLINE_S

MESSAGE_BYTES = 1024

# Messages published per publish case, by batch size: enough for the batch-of-1
# cases (one round trip per message) and the batch-of-1000 ones (many full
# batches) to take a few seconds each on 2 cores.
_FULL_PUBLISH_MESSAGES = {1: 10_000, 100: 100_000, 1000: 200_000}
_QUICK_PUBLISH_MESSAGES = {1: 400, 100: 4_000, 1000: 16_000}
_BATCH_SIZES = (1, 100, 1000)
_PUBLISH_CLIENTS = (1, 8)
_PULL_CONSUMERS = (1, 4)
# Pub/Sub's pull caps maxMessages at 1,000; both peers pull that many at most.
_MAX_MESSAGES_PER_PULL = 1000

# Metric names and units, so both peers' rows line up in one report.
THROUGHPUT = "throughput"
MSGS_PER_S = "msgs/s"
MESSAGES = "messages"
MSGS = "msgs"
BATCH_LATENCY_P50 = "batch_latency_p50"
BATCH_LATENCY_P99 = "batch_latency_p99"
LATENCY_P50 = "latency_p50"
LATENCY_P99 = "latency_p99"
LATENCY_MAX = "latency_max"
MS = "ms"
ACHIEVED_RATE = "achieved_rate"
DRAIN_TIME = "drain_time"
SECONDS = "s"
SERVER_CPU_PER_MILLION = "server_cpu_per_million_msgs"
CPU_S_PER_MILLION = "cpu_s/1M msgs"
SERVER_PEAK_RSS = "server_peak_rss"
# CPU of the benchmark's own client processes, to show which side is the bottleneck.
CLIENT_CPU_PER_MILLION = "client_cpu_per_million_msgs"
MIB = "MiB"
MILLION = 1_000_000
_BYTES_PER_MIB = 1024 * 1024
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class PublishCase:
    batch_size: int
    clients: int
    messages_per_client: int

    @property
    def name(self) -> str:
        return f"publish batch={self.batch_size} clients={self.clients}"

    @property
    def total_messages(self) -> int:
        return self.clients * self.messages_per_client


@dataclass(frozen=True)
class PullCase:
    consumers: int
    backlog_messages: int
    max_messages_per_pull: int

    @property
    def name(self) -> str:
        return f"pull+ack consumers={self.consumers} max={self.max_messages_per_pull}"


class DrainCase(PullCase):
    """A pull + ack case timed as a drain of its backlog."""

    @property
    def name(self) -> str:
        return f"drain backlog={self.backlog_messages} consumers={self.consumers}"


@dataclass(frozen=True)
class LatencyCase:
    offered_rate_per_s: int
    duration_s: float
    # The consumer asks for up to this many and takes whatever is available.
    max_messages_per_pull: int = 100

    @property
    def name(self) -> str:
        return f"latency rate={self.offered_rate_per_s}/s"

    @property
    def total_messages(self) -> int:
        return round(self.offered_rate_per_s * self.duration_s)


@dataclass(frozen=True)
class Workload:
    publish: tuple[PublishCase, ...]
    pull: tuple[PullCase, ...]
    latency: tuple[LatencyCase, ...]
    drain: tuple[DrainCase, ...]
    runs: int
    ack_deadline_s: int


def _workload(
    publish_messages: dict[int, int],
    *,
    pull_backlog: int,
    latency: tuple[LatencyCase, ...],
    drain_backlog: int,
    runs: int,
) -> Workload:
    return Workload(
        publish=tuple(
            # A whole number of batches per client.
            PublishCase(batch, clients, publish_messages[batch] // clients // batch * batch)
            for batch in _BATCH_SIZES
            for clients in _PUBLISH_CLIENTS
        ),
        pull=tuple(
            PullCase(consumers, pull_backlog, _MAX_MESSAGES_PER_PULL)
            for consumers in _PULL_CONSUMERS
        ),
        latency=latency,
        drain=(DrainCase(1, drain_backlog, _MAX_MESSAGES_PER_PULL),),
        runs=runs,
        ack_deadline_s=DEFAULT_ACK_DEADLINE_S,
    )


def full() -> Workload:
    """The documented workload, three runs of each case.

    About 6-9 minutes for the NATS side on 2 cores, over half of it the 1M
    drain (each run publishes its own backlog first, untimed).
    """
    return _workload(
        _FULL_PUBLISH_MESSAGES,
        pull_backlog=100_000,
        # One rate both systems sustain (latency without queueing), and one
        # above what one lakepubsub process takes in single-message requests.
        latency=(LatencyCase(200, 10.0), LatencyCase(1_000, 10.0)),
        drain_backlog=1_000_000,
        runs=3,
    )


def quick() -> Workload:
    """The same shapes at tiny sizes, one run each: for CI, seconds per peer."""
    return _workload(
        _QUICK_PUBLISH_MESSAGES,
        pull_backlog=4_000,
        latency=(LatencyCase(500, 1.0),),
        drain_backlog=10_000,
        runs=1,
    )


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: the smallest value with ``fraction`` of the values at or below it.

    Both peers use this, so p50/p99/max are computed the same way on both sides.
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def merge_runs(results: Iterable[Result]) -> list[Result]:
    """Join the results of repeated runs: one Result per (system, case, metric, unit).

    Keeps first-seen order, so a report lists cases in the order they ran.
    """
    merged: dict[tuple[str, str, str, str], list[float]] = {}
    for result in results:
        key = (result.system, result.case, result.metric, result.unit)
        merged.setdefault(key, []).extend(result.values)
    return [
        Result(system=system, case=case, metric=metric, unit=unit, values=tuple(values))
        for (system, case, metric, unit), values in merged.items()
    ]


def result(system: str, case: str, metric: str, unit: str, value: float) -> Result:
    """One run's figure."""
    return Result(system=system, case=case, metric=metric, unit=unit, values=(float(value),))


def publish_figures(
    system: str, case: str, *, seconds: float, messages: int, round_trips_ms: Sequence[float] = ()
) -> list[Result]:
    """Throughput of a publish run, and the round trip p50 / p99 of its requests if timed."""
    figure = partial(result, system, case)
    timed = [
        figure(metric, MS, percentile(round_trips_ms, fraction))
        for metric, fraction in ((BATCH_LATENCY_P50, 0.50), (BATCH_LATENCY_P99, 0.99))
        if round_trips_ms
    ]
    return [
        figure(THROUGHPUT, MSGS_PER_S, messages / seconds),
        *timed,
        figure(MESSAGES, MSGS, messages),
    ]


def consume_figures(
    system: str, case: str, *, seconds: float, messages: int, drain: bool
) -> list[Result]:
    """Throughput of a pull + ack (or drain) run, and for a drain its time."""
    figure = partial(result, system, case)
    return [
        *([figure(DRAIN_TIME, SECONDS, seconds)] if drain else []),
        figure(THROUGHPUT, MSGS_PER_S, messages / seconds),
        figure(MESSAGES, MSGS, messages),
    ]


def latency_figures(
    system: str, case: str, latencies_ms: Sequence[float], *, achieved_rate: float
) -> list[Result]:
    """Publish -> receive latency p50 / p99 / max of a latency run, and the rate achieved."""
    figure = partial(result, system, case)
    return [
        figure(LATENCY_P50, MS, percentile(latencies_ms, 0.50)),
        figure(LATENCY_P99, MS, percentile(latencies_ms, 0.99)),
        figure(LATENCY_MAX, MS, max(latencies_ms)),
        figure(ACHIEVED_RATE, MSGS_PER_S, achieved_rate),
        figure(MESSAGES, MSGS, len(latencies_ms)),
    ]


def usage_figures(
    system: str, case: str, usage: ProcessUsage, *, client_cpu_s: float, messages: int
) -> list[Result]:
    """Server and client CPU per million messages, the server's peak RSS."""
    figure = partial(result, system, case)
    return [
        figure(SERVER_CPU_PER_MILLION, CPU_S_PER_MILLION, usage.cpu_s * MILLION / messages),
        figure(SERVER_PEAK_RSS, MIB, usage.peak_rss_bytes / _BYTES_PER_MIB),
        figure(CLIENT_CPU_PER_MILLION, CPU_S_PER_MILLION, client_cpu_s * MILLION / messages),
    ]


class Side(Protocol):
    """One system on one running server, as a run sees it (``peer_lakepubsub.Side``,
    ``peer_nats.Side``): a fresh topic or stream per run, the clients of each case, what
    the server holds afterwards and the figures a run adds."""

    system: str

    def prepare(self, *, receive: bool, backlog: int = 0) -> None: ...
    def check_stored(self, n: int) -> None: ...
    def check_acked(self, n: int) -> None: ...
    def figures(
        self, case: str, usage: ProcessUsage, client_cpu_s: float, messages: int
    ) -> list[Result]: ...
    def publish(self, case: PublishCase) -> tuple[list[Report], ProcessUsage]: ...
    def consume(self, case: PullCase) -> tuple[list[Report], ProcessUsage]: ...
    def latency(self, case: LatencyCase) -> tuple[list[Report], ProcessUsage]: ...


def _cpu_s(reports: Sequence[Report]) -> float:
    return sum(r.cpu_s for r in reports)


def due_s(start_ns: int, i: int, rate_per_s: float) -> float:
    """Seconds until message ``i`` of a run paced at ``rate_per_s`` from ``start_ns`` is due."""
    return max(0.0, (start_ns + i * NS_PER_S / rate_per_s - time.monotonic_ns()) / NS_PER_S)


def run_publish(side: Side, case: PublishCase) -> list[Result]:
    """One run of a publish case on a fresh topic or stream."""
    side.prepare(receive=False)
    reports, usage = side.publish(case)
    total = case.total_messages
    side.check_stored(total)
    round_trips_ms = [ms for r in reports for ms in r.latencies_ms]
    return [
        *publish_figures(
            side.system, case.name, seconds=span_s(reports), messages=total,
            round_trips_ms=round_trips_ms,
        ),
        *side.figures(case.name, usage, _cpu_s(reports), total),
    ]  # fmt: skip


def run_consume(side: Side, case: PullCase) -> list[Result]:
    """One run of a pull + ack or drain case: publish the backlog (untimed), then drain it."""
    backlog = case.backlog_messages
    side.prepare(receive=True, backlog=backlog)
    reports, usage = side.consume(case)
    side.check_acked(backlog)
    received, redelivered = sum(r.messages for r in reports), sum(r.redelivered for r in reports)
    if received != backlog or redelivered:
        raise BenchError(
            f"consumers received {received} deliveries of {backlog} messages, "
            f"{redelivered} redelivered"
        )
    drain = isinstance(case, DrainCase)
    return [
        *consume_figures(side.system, case.name, seconds=span_s(reports), messages=received,
                         drain=drain),
        *side.figures(case.name, usage, _cpu_s(reports), received),
    ]  # fmt: skip


def run_latency(side: Side, case: LatencyCase, samples: list[float] | None = None) -> list[Result]:
    """One run of the latency case: publish at a fixed rate, measure publish -> receive;
    ``samples``, if given, gets every message's latency in ms."""
    side.prepare(receive=True)
    reports, usage = side.latency(case)
    received, sent = reports if reports[0].latencies_ms else reversed(reports)
    total = case.total_messages
    side.check_acked(total)
    if received.redelivered:
        raise BenchError(f"{received.redelivered} messages were redelivered")
    if samples is not None:
        samples.extend(received.latencies_ms)
    rate = total / (sent.end_s - sent.start_s)
    return [
        *latency_figures(side.system, case.name, received.latencies_ms, achieved_rate=rate),
        *side.figures(case.name, usage, _cpu_s(reports), total),
    ]


def run_cases(
    workload: Workload,
    *,
    system: str,
    server: Callable[[], contextlib.AbstractContextManager[Any]],
    side: Callable[[Any, int], Side],
    progress: Callable[[str], None] | None = None,
    latency_samples: list[float] | None = None,
) -> list[Result]:
    """Every case of the workload on one system, ``workload.runs`` times each, each run on
    the server ``server()`` enters (a fresh one per run, or a shared one).

    ``latency_samples``, if given, gets every message's latency in ms of the first
    latency case (the one the report charts).
    """
    cases: list[tuple[str, Callable[[Side], list[Result]]]] = [
        *((p.name, partial(run_publish, case=p)) for p in workload.publish),
        *((c.name, partial(run_consume, case=c)) for c in workload.pull),
        *(
            (c.name, partial(run_latency, case=c, samples=latency_samples if i == 0 else None))
            for i, c in enumerate(workload.latency)
        ),
        *((c.name, partial(run_consume, case=c)) for c in workload.drain),
    ]
    results: list[Result] = []
    for name, run in cases:
        for i in range(workload.runs):
            if progress:
                progress(f"{system}: {name} (run {i + 1}/{workload.runs})")
            with server() as running:
                results.extend(run(side(running, workload.ack_deadline_s)))
    return merge_runs(results)


def markdown_table(results: Iterable[Result]) -> str:
    """Results as a markdown table: median and min-max per row."""
    header = ["system", "case", "metric", "unit", "median", "min-max", "runs"]
    rows = [
        (r.system, r.case, r.metric, r.unit, fmt(r.median), f"{fmt(r.min)}{EN_DASH}{fmt(r.max)}",
         len(r.values))
        for r in results
    ]  # fmt: skip
    return "\n".join(table(header, rows, right=4))


# Seeds the payload generator, so payloads are the same in every process and run.
_PAYLOAD_SEED = b"lakepubsub-bench-v1"


def payload(i: int) -> bytes:
    """Message ``i``'s payload: MESSAGE_BYTES of pseudo-random bytes, the same every time.

    Each payload is an independent SHAKE-128 stream, so neither one payload nor
    a batch of them compresses (a storage format's compression gains nothing).
    """
    return hashlib.shake_128(_PAYLOAD_SEED + i.to_bytes(8, "big", signed=True)).digest(
        MESSAGE_BYTES
    )
