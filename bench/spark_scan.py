"""Spark SQL over a messages table: delta-spark (``format("delta")``) vs ``spark.read.parquet``,
and with ``--shell`` the ``lakepubsub sql`` shell's latency. The cases and figures:
bench/README.md, "Spark SQL over history". Writes ``spark_scan*.md``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import pty
import re
import select
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from bench import report as out
from bench.harness.meter import tree_cpu_s
from bench.harness.moto_server import MotoServer
from lakepubsub import Engine, Settings
from lakepubsub._lake.table_schemas import MESSAGES
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.names import TopicName
from lakepubsub.resources.topics import Topic
from lakepubsub.spark import local_session
from lakepubsub.spark.tables import configure_storage, spark_path

DATA_BYTES = 1024
# Distinct values of the grouped attribute: a small, realistic group count.
ATTRIBUTE_VALUES = 16
FULL_ROWS = 1_000_000
FULL_FILES = 100
QUICK_ROWS = 20_000
QUICK_FILES = 5
DEFAULT_RUNS = 5

QUERIES = {
    "full scan": "SELECT * FROM {view}",
    "4-column aggregate": "SELECT attributes['k'] AS k, count(*) AS n, sum(size) AS bytes,"
    " max(publish_time) AS newest, min(offset) AS first FROM {view} GROUP BY 1 ORDER BY 1",
    "count": "SELECT count(*) AS n FROM {view}",
}
# Queries whose every row would flood the driver: run into the noop sink, answer checked by count.
NOOP_QUERIES = {"full scan"}
S3_BUCKET = "lakepubsub-bench"
# The read paths, by label: the data source each view ``v_<source>`` reads with.
PATHS = {"(a) spark.read.parquet": "parquet", '(b) delta-spark format("delta")': "delta"}
BASELINE = "(a) spark.read.parquet"


@dataclass(frozen=True)
class Timing:
    """Seconds of wall clock and of CPU (the Spark JVM and its Python workers) per run."""

    median_s: float
    min_s: float
    max_s: float
    cpu_median_s: float


def build_table(
    path: str, rows: int, files: int, storage_options: dict[str, str] | None = None
) -> None:
    """``rows`` messages in ``files`` appends; random data so parquet cannot shrink it."""
    per_file = rows // files
    for i in range(files):
        first = i * per_file
        count = per_file if i < files - 1 else rows - first
        offsets = list(range(first, first + count))
        batch = pa.table(
            {
                "offset": offsets,
                "message_id": [f"m{o:09d}" for o in offsets],
                "publish_time": pa.array(
                    [1_700_000_000_000_000 + o * 1_000 for o in offsets], pa.int64()
                ).cast(pa.timestamp("us", tz="UTC")),
                "data": [os.urandom(DATA_BYTES) for _ in offsets],
                "attributes": [[("k", f"v{o % ATTRIBUTE_VALUES}")] for o in offsets],
                "ordering_key": [None] * count,
                "size": [DATA_BYTES] * count,
            },
            schema=MESSAGES,
        )
        write_deltalake(path, batch, mode="append", storage_options=storage_options)
    DeltaTable(path, storage_options=storage_options).create_checkpoint()


def action(spark: SparkSession, query: str, text: str) -> Callable[[], object]:
    """Run ``text`` to its end: collected, or into the noop sink for the full scan."""
    if query in NOOP_QUERIES:
        return lambda: spark.sql(text).write.format("noop").mode("overwrite").save()
    return lambda: spark.sql(text).collect()


def answer(spark: SparkSession, query: str, text: str) -> str:
    """What both paths must agree on: the rows, or for the full scan their count and sums."""
    if query in NOOP_QUERIES:
        text = f"SELECT count(*), sum(offset), sum(length(data)), count(attributes) FROM ({text})"
    return repr(spark.sql(text).collect())


def interleaved(
    actions: Mapping[str, Callable[[], object]], runs: int, jvm_pid: int
) -> dict[str, Timing]:
    """Time every action ``runs`` times, round-robin after one warm-up round.

    Round-robin spreads load from anything else on the machine over all
    paths alike, instead of charging it to whichever path ran during it.
    """
    for action in actions.values():
        action()  # warm-up: Python workers, JIT, page cache
    wall: dict[str, list[float]] = {name: [] for name in actions}
    cpu: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(runs):
        for name, action in actions.items():
            cpu_start = tree_cpu_s(jvm_pid)
            start = time.perf_counter()
            action()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(tree_cpu_s(jvm_pid) - cpu_start)
    return {
        name: Timing(statistics.median(w), min(w), max(w), statistics.median(cpu[name]))
        for name, w in wall.items()
    }


def views(spark: SparkSession, path: str) -> dict[str, Callable[[], DataFrame]]:
    """Each read path as a function that creates its view (timed as the pin cost)."""

    def create(source: str) -> DataFrame:
        frame = spark.read.format(source).load(path)
        frame.createOrReplaceTempView(f"v_{source}")
        return frame

    return {label: partial(create, source) for label, source in PATHS.items()}


def run(rows: int, files: int, runs: int, quick: bool, s3: bool) -> str:
    load = os.getloadavg()[0]
    spark = local_session("bench-spark-scan", "local[*]", shuffle_partitions=2)
    lines = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-scan-"))
        storage = stack.enter_context(MotoServer(S3_BUCKET)).storage_options if s3 else None
        uri = f"s3://{S3_BUCKET}/messages" if s3 else os.path.join(tmp, "messages")
        start = time.perf_counter()
        build_table(uri, rows, files, storage)
        configure_storage(spark, uri, storage)
        path = spark_path(uri)
        build_s = time.perf_counter() - start
        print(f"built {rows:,} rows in {files} files in {build_s:.1f} s", file=sys.stderr)
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
        pins = interleaved(views(spark, path), runs, jvm_pid)
        results: dict[tuple[str, str], Timing] = {}
        for query, sql in QUERIES.items():
            texts = {label: sql.format(view=f"v_{source}") for label, source in PATHS.items()}
            answers = {answer(spark, query, text) for text in texts.values()}
            if len(answers) != 1:
                raise SystemExit(f"paths disagree on {query!r}: {answers}")
            actions = {label: action(spark, query, text) for label, text in texts.items()}
            for label, timing in interleaved(actions, runs, jvm_pid).items():
                results[(label, query)] = timing
                print(
                    f"{label:34} {query:18} {timing.median_s:7.3f} s"
                    f" (cpu {timing.cpu_median_s:.2f} s)",
                    file=sys.stderr,
                )
        where = "moto S3 (s3a://, hadoop-aws)" if s3 else "local disk"
        title = f"Spark SQL scan benchmark, {where}" + (" (quick)" if quick else "")
        lines += [
            f"# {title}",
            "",
            f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python"
            f" {platform.python_version()}, Spark {spark.version}, local[*]; table on {where}:"
            f" {rows:,} messages of {DATA_BYTES} B random data in {files} files (delta-rs,"
            f" then a checkpoint); built in {build_s:.0f} s; median of {runs} runs after a"
            " warm-up, paths interleaved. Load average (1 min) before the run:"
            f" {load:.1f}, after: {os.getloadavg()[0]:.1f} (other work on the machine inflates"
            " and scatters wall times; CPU times barely move).",
            "",
            "Wall seconds, median [min-max], then the ratio to (a) of the medians / of the minima:",
            "",
        ]
        walls, cpus = [], []
        for label in PATHS:
            wall, cpu = [label], [label]
            for query in QUERIES:
                t, base = results[label, query], results[BASELINE, query]
                wall.append(
                    f"{t.median_s:.3f} [{t.min_s:.3f}-{t.max_s:.3f}]"
                    f" {t.median_s / base.median_s:.2f}x / {t.min_s / base.min_s:.2f}x"
                )
                cpu.append(f"{t.cpu_median_s:.2f} {t.cpu_median_s / base.cpu_median_s:.2f}x")
            walls.append([*wall, f"{pins[label].median_s:.3f}"])
            cpus.append(cpu)
        lines += [
            *out.table(["path", *QUERIES, "view creation"], walls, right=len(QUERIES) + 2),
            "",
            "CPU seconds of the Spark JVM and its Python workers, median, and the ratio to (a):",
            "",
            *out.table(["path", *QUERIES], cpus, right=len(QUERIES) + 1),
            "",
            "Both paths returned the same answers. (b) is Delta's own Spark connector (the"
            " lake's reader since the home-made Python data source was removed). The target"
            " is (b) <= 1.1x (a) for each query. View creation (pinning the version: a log"
            " replay for (b), a file listing for (a)) is timed apart from the queries.",
        ]
    spark.stop()
    return "\n".join(lines) + "\n"


SHELL_PAYLOAD_BYTES = 100
SHELL_BATCH = 1_000
SHELL_SECTION = "## `lakepubsub sql` shell"
SHELL_START_TIMEOUT_S = 600.0
_ANSWER_TIME = re.compile(rb"\((\d+\.\d+) s\)")


class Pty:
    """A command on a pseudo-terminal: type lines, wait for output."""

    def __init__(self, argv: list[str], env: Mapping[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child
            os.execvpe(argv[0], argv, dict(env))
        self.seen = b""

    def expect(self, pattern: re.Pattern[bytes], timeout_s: float) -> re.Match[bytes]:
        """Wait for ``pattern`` in the output since the last match; return the match."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = pattern.search(self.seen)
            if found:
                self.seen = self.seen[found.end() :]
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {pattern.pattern!r} in {self.seen[-2000:]!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.fd, 65536)
                except OSError as exc:  # the child ended
                    raise TimeoutError(f"shell ended: {self.seen[-2000:]!r}") from exc

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.type(".quit")
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def shell_latency(rows: int, runs: int) -> str:
    """Start-up and ``SELECT count(*)`` latency of the interactive ``lakepubsub sql``."""
    load = os.getloadavg()
    command = str(Path(sys.executable).with_name("lakepubsub"))
    lines = [SHELL_SECTION, ""]
    with tempfile.TemporaryDirectory(prefix="spark-shell-") as tmp:
        lake = os.path.join(tmp, "lake")
        with Engine(Settings(lake=lake)) as engine:
            topic = engine.create_topic(Topic(TopicName("bench", "big")))
            payload = os.urandom(SHELL_PAYLOAD_BYTES)
            started = time.perf_counter()
            for start in range(0, rows, SHELL_BATCH):
                count = min(SHELL_BATCH, rows - start)
                engine.publish(topic.name, [PublishMessage(payload, {"k": "v"})] * count)
            print(f"published {rows:,} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            table = MessagesTable(engine.lake, topic.uid)
            results = []
            for state in ("as published", "after compaction"):
                if state == "after compaction":
                    table.compact(target_bytes=128 * 1024 * 1024, min_small_files=8)
                files = len(engine.lake.open(table.uri).file_uris())
                env = {**os.environ, "LAKEPUBSUB_LAKE": lake, "TERM": "dumb"}
                began = time.perf_counter()
                shell = Pty([command, "sql"], env)
                try:
                    shell.expect(re.compile(rb"sql> "), SHELL_START_TIMEOUT_S)
                    start_s = time.perf_counter() - began
                    walls, said = [], []
                    for _ in range(runs + 1):  # the first is reported apart
                        typed = time.perf_counter()
                        shell.type("SELECT count(*) FROM bench__big;")
                        answer = shell.expect(_ANSWER_TIME, SHELL_START_TIMEOUT_S)
                        walls.append(time.perf_counter() - typed)
                        said.append(float(answer.group(1)))
                        shell.expect(re.compile(rb"sql> "), SHELL_START_TIMEOUT_S)
                finally:
                    shell.close()
                results.append((state, files, start_s, walls, said))
                print(f"{state}: start {start_s:.1f} s, count {walls}", file=sys.stderr)
    lines += [
        f"`lakepubsub sql` on a local lake, a topic of {rows:,} messages of"
        f" {SHELL_PAYLOAD_BYTES} B published through the engine in batches of"
        f" {SHELL_BATCH:,}; the shell runs on a pseudo-terminal as a person runs it."
        f" Start: from launching the command to the first prompt (JVM, Spark session,"
        f" views). `SELECT count(*) FROM bench__big;`: from typing it to the answer, first"
        f" statement apart, then the median [min-max] of {runs}; the shell's own printed"
        f" time in parentheses. Load average (1, 5, 15 min) before: {load[0]:.1f},"
        f" {load[1]:.1f}, {load[2]:.1f}; after: {os.getloadavg()[0]:.1f}.",
        "",
        "| table state | files | start s | first count s | count s, median [min-max] |",
        "|---|---|---|---|---|",
    ]
    for state, files, start_s, walls, said in results:
        rest, shown = walls[1:], said[1:]
        lines.append(
            f"| {state} | {files} | {start_s:.1f} | {walls[0]:.2f} ({said[0]:.2f}) |"
            f" {statistics.median(rest):.2f} [{min(rest):.2f}-{max(rest):.2f}]"
            f" ({statistics.median(shown):.2f}) |"
        )
    return "\n".join(lines) + "\n"


def with_section(report: str, section: str, name: str) -> str:
    """``report`` with the section starting at heading ``name`` replaced by ``section``."""
    before = report.split(name, 1)[0].rstrip("\n")
    return (before + "\n\n" if before else "") + section


def main(argv: Sequence[str] | None = None) -> None:
    parser = out.parser(__doc__ or "", quick="small table, for CI (< 1 min)")
    parser.add_argument("--rows", type=int, default=0, help="messages in the table")
    parser.add_argument("--files", type=int, default=0, help="data files (one per commit)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="timed runs per figure")
    parser.add_argument("--s3", action="store_true", help="the table on a moto S3 server")
    parser.add_argument("--shell", action="store_true", help="`lakepubsub sql` shell latency")
    args = parser.parse_args(argv)
    rows = args.rows or (QUICK_ROWS if args.quick else FULL_ROWS)
    files = args.files or (QUICK_FILES if args.quick else FULL_FILES)
    args.out.mkdir(parents=True, exist_ok=True)
    scan = args.out / ("spark_scan-quick.md" if args.quick else "spark_scan.md")
    kept = scan.read_text() if scan.exists() else ""
    if args.shell:
        section = shell_latency(rows, max(1, args.runs))
        scan.write_text(with_section(kept, section, SHELL_SECTION))
        print(section)
        return
    report = run(rows, files, max(1, args.runs), args.quick, args.s3)
    name = "spark_scan" + ("-s3" if args.s3 else "") + ("-quick" if args.quick else "") + ".md"
    if not args.s3 and SHELL_SECTION in kept:  # keep the shell's figures
        report += "\n" + SHELL_SECTION + kept.split(SHELL_SECTION, 1)[1]
    out.write(args.out, name, report)
