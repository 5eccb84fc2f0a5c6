"""Library-level benchmark of the core engine (no HTTP): publish and pull+ack.

The workloads: bench/README.md, "The engine without HTTP". Writes ``core.md`` (or
``core-quick.md``).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from bench import report
from bench.harness.moto_server import MotoServer
from lakepubsub import (
    Engine,
    PublishMessage,
    Settings,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
    metrics,
)

MESSAGE_BYTES = 1024


@dataclass(frozen=True)
class Sizes:
    publish_batches_per_thread: int
    latency_messages_per_thread: int
    backlog: int
    runs: int


FULL = Sizes(
    publish_batches_per_thread=25, latency_messages_per_thread=100, backlog=200_000, runs=3
)
QUICK = Sizes(publish_batches_per_thread=2, latency_messages_per_thread=10, backlog=4_000, runs=1)
S3_SCALE = 0.25  # moto on loopback is ~10x slower per commit; keep runs to minutes


def payloads(n: int) -> list[bytes]:
    return [os.urandom(MESSAGE_BYTES) for _ in range(n)]


def commits(table: str) -> float:
    """Delta commits this process made so far to ``table`` ("messages", "leases"...)."""
    return float(metrics.COMMITS.labels(table)._value.get())


def run_threads(n: int, target: Callable[[int], None]) -> float:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


@contextmanager
def moto_lake() -> Iterator[tuple[str, dict[str, str]]]:
    with MotoServer("bench") as moto:
        yield f"s3://{moto.bucket}/{uuid.uuid4().hex}", moto.storage_options


def bench_publish(engine: Engine, sizes: Sizes, data: list[bytes]) -> dict[str, float]:
    topic = TopicName("bench", f"pub-{uuid.uuid4().hex[:8]}")
    engine.create_topic(Topic(topic))
    batch = [PublishMessage(d) for d in data[:1000]]
    threads = 8
    commits_before = commits("messages")

    def work(_: int) -> None:
        for _ in range(sizes.publish_batches_per_thread):
            engine.publish(topic, batch)

    elapsed = run_threads(threads, work)
    total = threads * sizes.publish_batches_per_thread * 1000
    made = commits("messages") - commits_before
    return {"msgs_per_s": total / elapsed, "rows_per_commit": total / max(made, 1)}


def bench_latency(engine: Engine, sizes: Sizes, data: list[bytes]) -> dict[str, float]:
    topic = TopicName("bench", f"lat-{uuid.uuid4().hex[:8]}")
    engine.create_topic(Topic(topic))
    latencies: list[float] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        mine = []
        for j in range(sizes.latency_messages_per_thread):
            started = time.perf_counter()
            engine.publish(topic, [PublishMessage(data[(i * 97 + j) % len(data)])])
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    run_threads(8, work)
    return {
        "p50_ms": 1000 * report.quantile(latencies, 0.5),
        "p99_ms": 1000 * report.quantile(latencies, 0.99),
    }


def bench_pull(engine: Engine, sizes: Sizes, data: list[bytes]) -> dict[str, float]:
    topic = TopicName("bench", f"pull-{uuid.uuid4().hex[:8]}")
    sub = SubscriptionName("bench", f"pull-{uuid.uuid4().hex[:8]}")
    engine.create_topic(Topic(topic))
    engine.create_subscription(Subscription(sub, topic, ack_deadline_s=60))
    batch = [PublishMessage(d) for d in data[:1000]]
    for _ in range(sizes.backlog // 1000):
        engine.publish(topic, batch)
    commits_before = commits("leases")
    done = threading.Event()
    received = [0] * 4

    def work(i: int) -> None:
        while not done.is_set():
            got = engine.pull(sub, max_messages=1000, return_immediately=True)
            if not got:
                if sum(received) >= sizes.backlog:
                    done.set()
                continue
            engine.acknowledge(sub, [r.ack_id for r in got])
            received[i] += len(got)
            if sum(received) >= sizes.backlog:
                done.set()

    elapsed = run_threads(4, work)
    made = commits("leases") - commits_before
    delivered = sum(received)
    return {"msgs_per_s": delivered / elapsed, "commits_per_msg": made / max(delivered, 1)}


# Figures from this size on are shown whole; smaller ones to three significant figures.
_WHOLE_FROM = 10


def fmt(values: list[float]) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:,.3g}" if med < _WHOLE_FROM else f"{med:,.0f}"
    return (
        f"{med:,.3g} [{min(values):,.3g}-{max(values):,.3g}]"
        if med < _WHOLE_FROM
        else f"{med:,.0f} [{min(values):,.0f}-{max(values):,.0f}]"
    )


def run(where: str, uri: str, options: dict[str, str], sizes: Sizes) -> list[tuple[str, str]]:
    data = payloads(1000)
    collected: dict[str, list[float]] = {}
    for _ in range(sizes.runs):
        with Engine(Settings(lake=uri, storage_options=options)) as engine:
            for name, fn in (
                ("publish", bench_publish),
                ("latency", bench_latency),
                ("pull", bench_pull),
            ):
                for key, value in fn(engine, sizes, data).items():
                    collected.setdefault(f"{name}.{key}", []).append(value)
    labels = {
        "publish.msgs_per_s": "publish, 8 threads x batches of 1,000 (msgs/s)",
        "publish.rows_per_commit": "publish rows per Delta commit",
        "latency.p50_ms": "single-message publish p50, 8 publishers (ms)",
        "latency.p99_ms": "single-message publish p99, 8 publishers (ms)",
        "pull.msgs_per_s": "pull + ack, 4 consumers (msgs/s)",
        "pull.commits_per_msg": "lease commits per delivered message",
    }
    return [(f"{labels[k]} [{where}]", fmt(v)) for k, v in collected.items()]


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.parser(__doc__ or "", quick="tiny sizes, for CI", runs=True)
    parser.add_argument("--s3", action="store_true", help="also run on a moto S3 server")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += run("local", tmp, {}, sizes)
    if args.s3 or args.quick:
        s3_sizes = Sizes(
            max(1, int(sizes.publish_batches_per_thread * S3_SCALE)),
            max(5, int(sizes.latency_messages_per_thread * S3_SCALE)),
            max(2000, int(sizes.backlog * S3_SCALE)),
            sizes.runs,
        )
        with moto_lake() as (uri, options):
            rows += run("moto S3", uri, options, s3_sizes)
    lines = [
        *report.header(
            f"Core engine benchmark{' (quick)' if args.quick else ''}",
            command=report.command("core", argv),
            about=f"local lake on the working disk; 1 KiB messages; median of {sizes.runs} "
            "run(s) [min-max]",
        ),
        *report.table(["workload", "result"], rows, right=2),
    ]
    report.write(args.out, "core-quick.md" if args.quick else "core.md", lines)
