"""Scheduled batch consumers: the Delta-transaction design against Structured Streaming.

The rounds, the two consumers and the figures: bench/README.md, "Scheduled batch
consumers". Writes ``consume.md`` (or ``consume-quick.md``).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench import report as out
from bench.harness.meter import tree_cpu_s
from jobs import batch_consume, stream_consume
from jobs.common import JobContext
from jobs.examples import hourly_counts
from lakepubsub import Engine, Settings, constants, errors
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic
from lakepubsub.spark import local_session

DATA_BYTES = 1024
PUBLISH_BATCH = 1_000
FULL_MESSAGES = 200_000
FULL_INCREMENTAL = 10_000
QUICK_MESSAGES = 5_000
QUICK_INCREMENTAL = 1_000
DEFAULT_RUNS = 3
ATTRIBUTE_VALUES = 16
# Runs that failed Unavailable and were run again (reported).
RETRIES = 2
RETRIED: list[str] = []

WORKLOADS = {
    "copy": "SELECT offset, message_id, publish_time, data, attributes FROM messages",
    "hourly": hourly_counts.SQL,
}
DESIGNS = ("(A) batch-consume, Delta transaction", "(B) stream-consume, availableNow")
PHASES = ("full", "incremental")


@dataclass(frozen=True)
class Sample:
    wall_s: float
    cpu_s: float
    messages: int


def publish(engine: Engine, topic: TopicName, count: int, first: int) -> None:
    payload = os.urandom(DATA_BYTES)
    for start in range(0, count, PUBLISH_BATCH):
        n = min(PUBLISH_BATCH, count - start)
        engine.publish(
            topic,
            [
                PublishMessage(payload, {"k": f"v{(first + start + i) % ATTRIBUTE_VALUES}"})
                for i in range(n)
            ],
        )


def measured(action: Callable[[], int]) -> Sample:
    """One run of ``action``; a run that fails ``Unavailable`` before it wrote (opening
    a local table while a checkpoint's cleanup deletes the old one) is run again and
    counted, as a scheduler's next run would."""
    pid = os.getpid()
    cpu = tree_cpu_s(pid)
    start = time.perf_counter()
    for attempt in range(RETRIES + 1):
        try:
            messages = action()
            break
        except errors.Unavailable as exc:
            if attempt == RETRIES:
                raise
            RETRIED.append(str(exc))
            print(f"retried: {exc}", file=sys.stderr)
    return Sample(time.perf_counter() - start, tree_cpu_s(pid) - cpu, messages)


def one_round(
    ctx: JobContext, root: str, index: int, messages: int, incremental: int
) -> dict[tuple[str, str, str], Sample]:
    engine = ctx.engine
    topic = engine.create_topic(Topic(TopicName("bench", f"consume-{index}"))).name
    subs = {
        w: engine.create_subscription(
            Subscription(SubscriptionName("bench", f"consume-{index}-{w}"), topic)
        ).name
        for w in WORKLOADS
    }
    publish(engine, topic, messages, 0)
    out: dict[tuple[str, str, str], Sample] = {}
    for phase in PHASES:
        if phase == "incremental":
            publish(engine, topic, incremental, messages)
        for w, sql in WORKLOADS.items():
            base = os.path.join(root, f"r{index}-{w}")
            batch = batch_consume.BatchOptions(subs[w].path, base + "-a", sql=sql)
            stream = stream_consume.StreamOptions(
                topic.path, base + "-b", base + "-b-checkpoint", sql=sql
            )

            def a(options: batch_consume.BatchOptions = batch) -> int:
                report = batch_consume.run(ctx, options)
                return report.end_offset - report.start_offset

            def b(options: stream_consume.StreamOptions = stream) -> int:
                return stream_consume.run(ctx, options).messages

            order = [(DESIGNS[0], a), (DESIGNS[1], b)]
            if index % 2:
                order.reverse()
            for design, action in order:
                sample = measured(action)
                out[(design, w, phase)] = sample
                print(
                    f"round {index} {design[:3]} {w:6} {phase:11}"
                    f" {sample.messages:7,} msgs {sample.wall_s:6.2f} s cpu {sample.cpu_s:6.2f} s",
                    file=sys.stderr,
                )
    return out


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def run(messages: int, incremental: int, runs: int, quick: bool) -> str:
    # A local lake's tables keep 30 s of log (constants.py); a stream resuming
    # after longer finds its next version gone. This lake keeps an S3 lake's 7 days.
    constants.LOCAL_LOG_RETENTION = constants.LOG_RETENTION
    load = os.getloadavg()
    spark = local_session("bench-consume", "local[*]", shuffle_partitions=2)
    rounds: list[dict[tuple[str, str, str], Sample]] = []
    with tempfile.TemporaryDirectory(prefix="consume-bench-") as root:
        settings = Settings(lake=os.path.join(root, "lake"))
        with JobContext(settings, spark=spark) as ctx:
            # Warm-up: Python workers, JIT, both code paths, on a small topic.
            one_round(ctx, root, 1000, 2_000, 500)
            for index in range(runs):
                rounds.append(one_round(ctx, root, index, messages, incremental))
    load_after = os.getloadavg()
    spark.stop()
    lines = [
        "# Scheduled batch consumers: Delta transaction vs Structured Streaming"
        + (" (quick)" if quick else ""),
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python"
        f" {platform.python_version()}, Spark {spark.version}, local[*], local lake."
        f" Each round: a new topic, {messages:,} messages of {DATA_BYTES} B in commits of"
        f" {PUBLISH_BATCH:,} ({messages // PUBLISH_BATCH} files), consumed whole (`full`), then"
        f" {incremental:,} more published and consumed (`incremental`). Median of {runs}"
        " rounds after a warm-up round; (A) and (B) alternate which runs first. Load average"
        f" (1, 5, 15 min) before: {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}; after:"
        f" {load_after[0]:.1f}, {load_after[1]:.1f}, {load_after[2]:.1f}. CPU: this process"
        " and its descendants (Spark JVM, Python workers, those that ended included). The"
        " lake's tables keep 7 days of log, as on S3: with a local lake's 30 seconds, (B)'s"
        " incremental run failed (`DELTA_LOG_FILE_NOT_FOUND_FOR_STREAMING_SOURCE`, the"
        " commits after its checkpoint's version were cleaned up).",
        "",
    ]
    rows = []
    for w in WORKLOADS:
        for phase in PHASES:
            medians = {}
            for design in DESIGNS:
                samples = [r[(design, w, phase)] for r in rounds]
                walls, cpus = [s.wall_s for s in samples], [s.cpu_s for s in samples]
                medians[design] = (statistics.median(walls), statistics.median(cpus))
                (wa, ca), (wb, cb) = medians[DESIGNS[0]], medians[design]
                ratio = f"{wb / wa:.2f}x, {cb / ca:.2f}x" if design == DESIGNS[1] else ""
                consumed = f"{samples[0].messages:,}"
                rows.append((design, w, phase, consumed, _spread(walls), _spread(cpus), ratio))
    header = ["design", "transform", "phase", "messages", "wall s, median [min-max]"]
    header += ["CPU s, median [min-max]", "B / A (wall, CPU)"]
    lines += out.table(header, rows, right=len(header))
    if RETRIED:
        lines += [
            "",
            f"{len(RETRIED)} run(s) failed `Unavailable` before writing and were run again"
            " (timed with the retry): " + "; ".join(sorted(set(RETRIED)))[:600],
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = out.parser(__doc__ or "", quick="small sizes, one round (CI)")
    parser.add_argument("--messages", type=int, default=0, help="backlog per round")
    parser.add_argument("--incremental", type=int, default=0, help="published after it")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="rounds")
    args = parser.parse_args(argv)
    messages = args.messages or (QUICK_MESSAGES if args.quick else FULL_MESSAGES)
    incremental = args.incremental or (QUICK_INCREMENTAL if args.quick else FULL_INCREMENTAL)
    runs = 1 if args.quick else max(1, args.runs)
    report = run(messages, incremental, runs, args.quick)
    out.write(args.out, "consume-quick.md" if args.quick else "consume.md", report)
