"""The benchmark workload, shared by both peers (lakepubsub over REST, NATS JetStream).

Every figure compares the two systems on the same cases, sizes and machine:

- publish: ``clients`` client processes each publish ``messages_per_client``
  messages of ``MESSAGE_BYTES`` in batches of ``batch_size``; the next batch
  is sent once the previous one is acknowledged. Throughput is all messages
  over the wall time from the common start to the last acknowledgement.
- pull: ``backlog_messages`` are published first (not timed); then
  ``consumers`` client processes pull up to ``max_messages_per_pull`` at a
  time and acknowledge every message until the backlog is gone.
- latency: one publisher sends at ``offered_rate_per_s`` for ``duration_s``,
  stamping its send time; one consumer records receive time minus send time.
- drain: as pull, for a large backlog, reporting the time to drain it.
- resources: server CPU seconds per million messages and server peak RSS,
  for every case.

Each case runs ``runs`` times; a figure is the median of its runs with min-max.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from bench.harness.meter import ProcessUsage
from bench.report import EN_DASH, fmt

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
# Matches Pub/Sub's default subscription ack deadline.
_ACK_DEADLINE_S = 10

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
_MILLION = 1_000_000
_BYTES_PER_MIB = 1024 * 1024


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
class DrainCase:
    backlog_messages: int
    consumers: int
    max_messages_per_pull: int

    @property
    def name(self) -> str:
        return f"drain backlog={self.backlog_messages} consumers={self.consumers}"


@dataclass(frozen=True)
class Workload:
    publish: tuple[PublishCase, ...]
    pull: tuple[PullCase, ...]
    latency: tuple[LatencyCase, ...]
    drain: tuple[DrainCase, ...]
    runs: int
    ack_deadline_s: int


def _publish_cases(messages_by_batch: dict[int, int]) -> tuple[PublishCase, ...]:
    return tuple(
        PublishCase(
            batch_size=batch,
            clients=clients,
            # A whole number of batches per client.
            messages_per_client=messages_by_batch[batch] // clients // batch * batch,
        )
        for batch in _BATCH_SIZES
        for clients in _PUBLISH_CLIENTS
    )


def full() -> Workload:
    """The documented workload, three runs of each case.

    About 6-9 minutes for the NATS side on 2 cores, over half of it the 1M
    drain (each run publishes its own backlog first, untimed).
    """
    return Workload(
        publish=_publish_cases(_FULL_PUBLISH_MESSAGES),
        pull=tuple(
            PullCase(
                consumers=consumers,
                backlog_messages=100_000,
                max_messages_per_pull=_MAX_MESSAGES_PER_PULL,
            )
            for consumers in _PULL_CONSUMERS
        ),
        # One rate both systems sustain (latency without queueing), and one
        # above what one lakepubsub process takes in single-message requests.
        latency=(
            LatencyCase(offered_rate_per_s=200, duration_s=10.0),
            LatencyCase(offered_rate_per_s=1_000, duration_s=10.0),
        ),
        drain=(
            DrainCase(
                backlog_messages=1_000_000,
                consumers=1,
                max_messages_per_pull=_MAX_MESSAGES_PER_PULL,
            ),
        ),
        runs=3,
        ack_deadline_s=_ACK_DEADLINE_S,
    )


def quick() -> Workload:
    """The same shapes at tiny sizes, one run each: for CI, seconds per peer."""
    return Workload(
        publish=_publish_cases(_QUICK_PUBLISH_MESSAGES),
        pull=tuple(
            PullCase(
                consumers=consumers,
                backlog_messages=4_000,
                max_messages_per_pull=_MAX_MESSAGES_PER_PULL,
            )
            for consumers in _PULL_CONSUMERS
        ),
        latency=(LatencyCase(offered_rate_per_s=500, duration_s=1.0),),
        drain=(
            DrainCase(
                backlog_messages=10_000,
                consumers=1,
                max_messages_per_pull=_MAX_MESSAGES_PER_PULL,
            ),
        ),
        runs=1,
        ack_deadline_s=_ACK_DEADLINE_S,
    )


@dataclass(frozen=True)
class Result:
    """One figure of one case for one system: one value per run."""

    system: str
    case: str
    metric: str
    unit: str
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)


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
        figure(SERVER_CPU_PER_MILLION, CPU_S_PER_MILLION, usage.cpu_s * _MILLION / messages),
        figure(SERVER_PEAK_RSS, MIB, usage.peak_rss_bytes / _BYTES_PER_MIB),
        figure(CLIENT_CPU_PER_MILLION, CPU_S_PER_MILLION, client_cpu_s * _MILLION / messages),
    ]


def run_cases(
    workload: Workload,
    *,
    system: str,
    server: Callable[[], contextlib.AbstractContextManager[Any]],
    publish: Callable[..., list[Result]],
    consume: Callable[..., list[Result]],
    latency: Callable[..., list[Result]],
    progress: Callable[[str], None] | None = None,
    latency_samples: list[float] | None = None,
) -> list[Result]:
    """Every case of the workload on one peer, ``workload.runs`` times each, each run on
    the server ``server()`` enters (a fresh one per run, or a shared one).

    ``latency_samples``, if given, gets every message's latency in ms of the first
    latency case (the one the report charts).
    """
    ack_s = workload.ack_deadline_s
    cases: list[tuple[str, Callable[[Any], list[Result]]]] = [
        *((p.name, partial(publish, case=p)) for p in workload.publish),
        *((c.name, partial(consume, case=c, ack_deadline_s=ack_s)) for c in workload.pull),
        *(
            (c.name, partial(latency, case=c, ack_deadline_s=ack_s, samples=latency_samples))
            for c in workload.latency[:1]
        ),
        *(
            (c.name, partial(latency, case=c, ack_deadline_s=ack_s, samples=None))
            for c in workload.latency[1:]
        ),
        *((c.name, partial(consume, case=c, ack_deadline_s=ack_s)) for c in workload.drain),
    ]
    results: list[Result] = []
    for name, run in cases:
        for i in range(workload.runs):
            if progress:
                progress(f"{system}: {name} (run {i + 1}/{workload.runs})")
            with server() as running:
                results.extend(run(running))
    return merge_runs(results)


def markdown_table(results: Iterable[Result]) -> str:
    """Results as a markdown table: median and min-max per row."""
    lines = [
        "| system | case | metric | unit | median | min-max | runs |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r.system} | {r.case} | {r.metric} | {r.unit} | {fmt(r.median)} "
            f"| {fmt(r.min)}{EN_DASH}{fmt(r.max)} | {len(r.values)} |"
        )
    return "\n".join(lines)


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
