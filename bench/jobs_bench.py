"""The maintenance jobs at scale: compaction of many small files, truncation of a large backlog.

The steps and figures: bench/README.md, "Maintenance jobs at scale". Writes ``jobs.md``
(``jobs-quick.md`` with ``--quick``).
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from bench import report as report_
from bench.harness.lakepubsub_server import LakePubSubServer
from jobs import compact, truncate
from jobs.common import FileStats, JobContext
from lakepubsub import Engine, Settings
from lakepubsub._lake import table_schemas
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription, TruncationPolicy
from lakepubsub.resources.topics import Topic
from lakepubsub.spark import local_session
from lakepubsub.spark._stats import FileStats as SparkFileStats

DATA_BYTES = 1024
ATTRIBUTE_VALUES = 16
FULL_MESSAGES = 1_000_000
FULL_FILES = 10_000
QUICK_MESSAGES = 50_000
QUICK_FILES = 500
ADDS_PER_COMMIT = 1_000
PUBLISHES = 200
PROJECT = "bench"


@dataclass
class Latency:
    samples_ms: list[float] = field(default_factory=list)
    errors: int = 0

    def line(self) -> str:
        if not self.samples_ms:
            return f"no samples ({self.errors} errors)"
        samples = self.samples_ms
        return (
            f"p50 {statistics.median(samples):.1f} ms, "
            f"p99 {report_.quantile(samples, 0.99):.1f} ms, "
            f"max {max(samples):.1f} ms, n={len(samples)}, errors={self.errors}"
        )


def build(lake: str, messages: int, files: int) -> tuple[TopicName, SubscriptionName]:
    """The topic, its policed subscription, and ``messages`` rows in ``files`` files.

    delta-rs's writer will not cut files this small, so the files are written
    with pyarrow and committed, 1,000 add actions per commit, with statistics
    computed as the ``lakedelta`` writer computes them.
    """
    topic = TopicName(PROJECT, "orders")
    sub = SubscriptionName(PROJECT, "orders-capped")
    with Engine(Settings(lake=lake)) as engine:
        created = engine.create_topic(Topic(topic))
        cap = messages * (DATA_BYTES + 4) // 10
        engine.create_subscription(
            Subscription(sub, topic, truncation_policy=TruncationPolicy(max_bytes=cap))
        )
        uri = engine.lake.messages_uri(created.uid)
    table = DeltaTable(uri)
    per_file = max(1, messages // files)
    start_us = time.time_ns() // 1000 - messages  # one message per microsecond, just past
    actions: list[AddAction] = []
    for number, first in enumerate(range(0, messages, per_file)):
        rows = _rows(first, min(per_file, messages - first), start_us)
        name = f"part-{number:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        pq.write_table(rows, os.path.join(uri, name), compression="snappy")
        stats = SparkFileStats(rows.schema)
        for batch in rows.to_batches():
            stats.update(batch)
        size = os.path.getsize(os.path.join(uri, name))
        actions.append(AddAction(name, size, {}, int(time.time() * 1000), True, stats.to_json()))
        if len(actions) == ADDS_PER_COMMIT:
            table.create_write_transaction(actions, mode="append", schema=table.schema())
            actions = []
    if actions:
        table.create_write_transaction(actions, mode="append", schema=table.schema())
    return topic, sub


def _rows(first: int, count: int, start_us: int) -> pa.Table:
    offsets = pa.array(range(first, first + count), pa.int64())
    data = pa.Array.from_buffers(
        pa.binary(),
        count,
        [
            None,
            pa.array(range(0, (count + 1) * DATA_BYTES, DATA_BYTES), pa.int32()).buffers()[1],
            pa.py_buffer(os.urandom(count * DATA_BYTES)),
        ],
    )
    values = [f"v{o % ATTRIBUTE_VALUES}" for o in range(first, first + count)]
    return pa.table(
        {
            "offset": offsets,
            "message_id": offsets.cast(pa.string()),
            "publish_time": pa.array(
                range(start_us + first, start_us + first + count), pa.int64()
            ).cast(table_schemas.UTC_US),
            "data": data,
            "attributes": pa.array([[("k", v)] for v in values], table_schemas.ATTRIBUTES),
            "ordering_key": pa.nulls(count, pa.string()),
            "size": pa.array([DATA_BYTES + 1 + len(v) for v in values], pa.int64()),
        },
        schema=table_schemas.MESSAGES,
    )


def publish(client: httpx.Client, topic: TopicName, latency: Latency) -> None:
    """One single-message publish to the REST API, timed into ``latency``."""
    body = {"messages": [{"data": "aGVsbG8=", "attributes": {"k": "bench"}}]}
    started = time.perf_counter()
    try:
        client.post(f"/v1/{topic.path}:publish", json=body).raise_for_status()
    except httpx.HTTPError:
        latency.errors += 1
        return
    latency.samples_ms.append((time.perf_counter() - started) * 1000)


def measure(client: httpx.Client, topic: TopicName, count: int) -> Latency:
    latency = Latency()
    for _ in range(count):
        publish(client, topic, latency)
    return latency


def main(argv: Sequence[str] | None = None) -> None:
    parser = report_.parser(__doc__ or "")
    parser.add_argument("--messages", type=int, default=FULL_MESSAGES)
    parser.add_argument("--files", type=int, default=FULL_FILES)
    parser.add_argument("--publishes", type=int, default=PUBLISHES)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.files = QUICK_MESSAGES, QUICK_FILES
    lines = [f"# Jobs benchmark{' (quick)' if args.quick else ''}", ""]

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    say(
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at start, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    with tempfile.TemporaryDirectory(prefix="lakepubsub-jobs-bench-") as lake:
        started = time.perf_counter()
        topic, _ = build(lake, args.messages, args.files)
        settings = Settings(lake=lake)
        with Engine(settings) as engine:
            uri = engine.lake.messages_uri(engine.get_topic(topic).uid)
        before = FileStats.of(DeltaTable(uri))
        say(
            f"\nData: {before.rows:,} messages of {DATA_BYTES} B in {before.files:,} files, "
            f"{before.bytes / 2**20:.0f} MiB, table version {before.version} "
            f"(built in {time.perf_counter() - started:.0f} s)"
        )
        # The REST API on the lake, in its own process.
        with (
            LakePubSubServer(lake=lake, env={"LAKEPUBSUB_PUSH": "false"}) as server,
            httpx.Client(base_url=server.url, timeout=60) as api,
        ):
            measure(api, topic, 20)  # warm-up: the server loads the table once
            latency_before = measure(api, topic, args.publishes)
            say(f"\nPublish latency before compaction: {latency_before.line()}")

            during = Latency()
            stop = threading.Event()

            def keep_publishing() -> None:
                while not stop.is_set():
                    publish(api, topic, during)

            thread = threading.Thread(target=keep_publishing)
            thread.start()
            with JobContext(settings) as ctx:
                report = compact.run(ctx, compact.CompactOptions(parallelism=2))
            stop.set()
            thread.join()
            [result] = [t for t in report.tables if t.kind == "messages"]
            say(
                f"\n## Compaction\n\n`compact.run` (delta-rs optimize, 128 MiB target, "
                f"checkpoint, vacuum at 168 h): {report.seconds:.1f} s for the whole lake, "
                f"{result.seconds:.1f} s for the messages table: files {result.files_before:,} -> "
                f"{result.files_after:,}, rows {result.rows_before:,} -> {result.rows_after:,} "
                f"(status {result.status})"
            )
            say(f"Publish latency during compaction: {during.line()}")
            latency_after = measure(api, topic, args.publishes)
            say(f"Publish latency after compaction: {latency_after.line()}")
            offsets = DeltaTable(uri).to_pyarrow_table(columns=["offset"])["offset"]
            expected = args.messages + 20 + len(during.samples_ms) + 2 * args.publishes
            dense = sorted(offsets.to_pylist()) == list(range(expected))
            say(f"Offsets after: {len(offsets):,} rows, dense and unique: {dense}")

        session_started = time.perf_counter()
        spark = local_session("bench-jobs", "local[*]")
        session_s = time.perf_counter() - session_started
        with JobContext(settings, spark=spark) as ctx:
            report_t = truncate.run(ctx)
        [cut] = report_t.truncations
        [cleanup] = report_t.topics
        say(
            f"\n## Truncation\n\nSpark session start (local[*]): {session_s:.1f} s\n"
            f"`truncate.run` on {expected:,} messages: {report_t.seconds:.1f} s — "
            f"truncated {cut.subscription} [{cut.first_offset:,}, {cut.end_offset:,}) "
            f"by {cut.reason}: {cut.messages_dropped:,} messages, "
            f"{cut.bytes_dropped / 2**20:.0f} MiB; then deleted {cleanup.rows_deleted:,} rows "
            f"below offset {cleanup.kept_from:,} ({cleanup.status})"
        )
        with JobContext(settings, spark=spark) as ctx:
            again = truncate.run(ctx)
        say(f"A second run (nothing to do): {again.seconds:.1f} s")
        spark.stop()
    report_.write(args.out, "jobs-quick.md" if args.quick else "jobs.md", lines, echo=False)
