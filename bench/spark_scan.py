"""Spark SQL over a messages table: delta-spark (``format("delta")``) vs ``spark.read.parquet``.

    python -m bench.spark_scan [--rows N] [--files N] [--runs N] [--quick]

Builds a messages table in a temp dir with delta-rs (``--rows`` messages of
1 KiB incompressible data in ``--files`` commits, one file each), then times
two queries on a temporary view over each read path:

- ``group by``: ``SELECT attributes['k'], count(*), sum(size) ... GROUP BY 1``
- ``count``: ``SELECT count(*) ...``

Paths: (a) ``spark.read.parquet`` on the table directory, the baseline;
(b) ``spark.read.format("delta")``, Delta's own connector, which is how the
views read the lake. Each figure is the median of ``--runs``
timed runs after one warm-up, in seconds, with min-max and the ratios of
median and of minimum to the baseline's, and the median CPU seconds of the
Spark JVM and its Python workers (which other load on the machine, recorded
in the report, hardly disturbs). The time to pin the version and create each
view is reported separately. Writes
bench/results/spark_scan.md (or spark_scan-quick.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from lakepubsub.schemas import MESSAGES
from lakepubsub.spark import local_session

RESULTS = Path(__file__).parent / "results"
DATA_BYTES = 1024
# Distinct values of the grouped attribute: a small, realistic group count.
ATTRIBUTE_VALUES = 16
FULL_ROWS = 1_000_000
FULL_FILES = 100
QUICK_ROWS = 20_000
QUICK_FILES = 5
DEFAULT_RUNS = 5

QUERIES = {
    "group by": "SELECT attributes['k'] AS k, count(*) AS n, sum(size) AS bytes"
    " FROM {view} GROUP BY 1 ORDER BY 1",
    "count": "SELECT count(*) AS n FROM {view}",
}


@dataclass(frozen=True)
class Timing:
    """Seconds of wall clock and of CPU (the Spark JVM and its Python workers) per run."""

    median_s: float
    min_s: float
    max_s: float
    cpu_median_s: float


def tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by process ``root`` and every live descendant (Linux /proc).

    CPU time is what a path costs the machine; unlike wall time it barely moves
    when other work shares the cores. Python workers are long-lived children of
    the JVM (forked by pyspark's daemon), so they are counted while they run.
    """
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total = 0.0
    for pid, cpu in used.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            total += cpu
    return total


def build_table(path: str, rows: int, files: int) -> None:
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
        write_deltalake(path, batch, mode="append")
    DeltaTable(path).create_checkpoint()


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

    def parquet() -> DataFrame:
        frame = spark.read.parquet(path)
        frame.createOrReplaceTempView("v_parquet")
        return frame

    def delta() -> DataFrame:
        frame = spark.read.format("delta").load(path)
        frame.createOrReplaceTempView("v_delta")
        return frame

    return {
        "(a) spark.read.parquet": parquet,
        '(b) delta-spark format("delta")': delta,
    }


def run(rows: int, files: int, runs: int, quick: bool) -> str:
    load = os.getloadavg()[0]
    spark = local_session("bench-spark-scan", "local[*]", shuffle_partitions=2)
    lines = []
    with tempfile.TemporaryDirectory(prefix="spark-scan-") as tmp:
        path = os.path.join(tmp, "messages")
        start = time.perf_counter()
        build_table(path, rows, files)
        build_s = time.perf_counter() - start
        print(f"built {rows:,} rows in {files} files in {build_s:.1f} s", file=sys.stderr)
        view_names = {
            "(a) spark.read.parquet": "v_parquet",
            '(b) delta-spark format("delta")': "v_delta",
        }
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
        pins = interleaved(views(spark, path), runs, jvm_pid)
        results: dict[tuple[str, str], Timing] = {}
        for query, sql in QUERIES.items():
            texts = {label: sql.format(view=view) for label, view in view_names.items()}
            answers = {repr(spark.sql(text).collect()) for text in texts.values()}
            if len(answers) != 1:
                raise SystemExit(f"paths disagree on {query!r}: {answers}")
            actions = {
                label: (lambda text=text: spark.sql(text).collect())
                for label, text in texts.items()
            }
            for label, timing in interleaved(actions, runs, jvm_pid).items():
                results[(label, query)] = timing
                print(
                    f"{label:34} {query:9} {timing.median_s:7.3f} s"
                    f" (cpu {timing.cpu_median_s:.2f} s)",
                    file=sys.stderr,
                )
        baseline = "(a) spark.read.parquet"
        title = "Spark SQL scan benchmark" + (" (quick)" if quick else "")
        lines += [
            f"# {title}",
            "",
            f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python"
            f" {platform.python_version()}, Spark {spark.version}, local[*]; table: {rows:,}"
            f" messages of {DATA_BYTES} B random data in {files} files (delta-rs); median of"
            f" {runs} runs after a warm-up, paths interleaved. Load average before the run:"
            f" {load:.1f} (other work on the machine inflates and scatters wall times; CPU"
            " times barely move).",
            "",
            "Wall seconds, median [min-max], then the ratio to (a) of the medians / of the minima:",
            "",
            "| path | " + " | ".join(QUERIES) + " | view creation |",
            "|---|" + "---|" * (len(QUERIES) + 1),
        ]
        for label in view_names:
            cells = []
            for query in QUERIES:
                t = results[(label, query)]
                base = results[(baseline, query)]
                cells.append(
                    f"{t.median_s:.3f} [{t.min_s:.3f}-{t.max_s:.3f}]"
                    f" {t.median_s / base.median_s:.2f}x / {t.min_s / base.min_s:.2f}x"
                )
            cells.append(f"{pins[label].median_s:.3f}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "CPU seconds of the Spark JVM and its Python workers, median, and the ratio to (a):",
            "",
            "| path | " + " | ".join(QUERIES) + " |",
            "|---|" + "---|" * len(QUERIES),
        ]
        for label in view_names:
            cells = []
            for query in QUERIES:
                t = results[(label, query)]
                base = results[(baseline, query)]
                cells.append(f"{t.cpu_median_s:.2f} {t.cpu_median_s / base.cpu_median_s:.2f}x")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "Both paths returned the same answers. (b) is Delta's own Spark connector (the"
            " lake's reader since the home-made Python data source was removed); it plans"
            " from the Delta log, so it runs one more Spark job per query than (a).",
        ]
    spark.stop()
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else "")
    parser.add_argument("--rows", type=int, default=0, help="messages in the table")
    parser.add_argument("--files", type=int, default=0, help="data files (one per commit)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="timed runs per figure")
    parser.add_argument("--quick", action="store_true", help="small table, for CI (< 1 min)")
    args = parser.parse_args()
    rows = args.rows or (QUICK_ROWS if args.quick else FULL_ROWS)
    files = args.files or (QUICK_FILES if args.quick else FULL_FILES)
    report = run(rows, files, max(1, args.runs), args.quick)
    RESULTS.mkdir(exist_ok=True)
    name = "spark_scan-quick.md" if args.quick else "spark_scan.md"
    (RESULTS / name).write_text(report)
    print(report)


if __name__ == "__main__":
    main()
