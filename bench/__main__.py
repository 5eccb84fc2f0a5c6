"""``python -m bench [CASE] [--quick] [--out DIR] ...``: the one entry point of the benchmarks.

Without a case (or with options only) it runs the side-by-side comparison
(``bench/compare.py``), as it always has. ``python -m bench quick`` runs the CI
form of every case ``make bench-quick`` lists, each in a process of its own,
and fails if any failed. ``python -m bench CASE --help`` lists a case's options.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Sequence

# The cases, by name: the module whose ``main(argv)`` runs each, and what it measures.
CASES = {
    "compare": ("bench.compare", "lakepubsub (REST, gRPC) beside NATS JetStream: report.md"),
    "core": ("bench.core", "the engine without HTTP: core.md"),
    "flood": ("bench.flood_bench", "overload past capacity: flood.md"),
    "cost": ("bench.cost_bench", "S3 cost per million messages: cost.md"),
    "scaleout": ("bench.scaleout_bench", "one topic, several processes: scaleout.md"),
    "floors": ("bench.floors", "the libraries alone: floors.md"),
    "relay": ("bench.relay_floor", "the many-topic load on an in-memory grpc.aio relay: relay.md"),
    "s3": ("bench.s3.__main__", "S3 requests at a counting proxy: s3-*.md"),
    "push": ("bench.push_bench", "push delivery: push.md"),
    "jobs": ("bench.jobs_bench", "maintenance jobs beside the API: jobs.md"),
    "schema": ("bench.schema_bench", "schema validation and typed views: schema.md"),
    "semantics": ("bench.semantics_bench", "plain, exactly-once, filter: semantics.md"),
    "ordering": ("bench.ordering_bench", "ordered delivery: ordering.md"),
    "consume": ("bench.consume_bench", "Spark reading subscriptions: consume.md"),
    "spark": ("bench.spark_scan", "Spark SQL over history: spark_scan.md"),
    "filters": ("bench.filters_bench", "filter evaluation"),
    "ab": ("bench.ab", "gRPC drain, publish and latency, two revisions in turn: ab-*.md"),
    "leases": ("bench.leases_bench", "a drain's lease bookkeeping, no door: leases.md"),
}
# ``make bench-quick``: every case's CI form, reports in bench/results/tmp (not committed).
TMP = "bench/results/tmp"
QUICK = (
    *("compare", "core", "flood", "cost", "scaleout", "floors", "relay"),
    "s3 --cases idle,load,backlog",
)


def quick() -> int:
    """Every case of ``QUICK`` with ``--quick --out TMP``, each in its own process; 1 if any
    failed."""
    outcomes = []
    for line in QUICK:
        case, *args = [*line.split(), "--quick", "--out", TMP]
        command = [sys.executable, "-m", "bench", case, *args]
        print(f"\n=== python -m bench {case} {' '.join(args)}", flush=True)
        started = time.monotonic()
        rc = subprocess.run(command, check=False).returncode
        outcomes.append((case, rc, time.monotonic() - started))
    print("\n| case | rc | seconds |\n| --- | ---: | ---: |")
    for case, rc, seconds in outcomes:
        print(f"| {case} | {rc} | {seconds:.0f} |")
    return 1 if any(rc for _, rc, _ in outcomes) else 0


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "quick":
        raise SystemExit(quick())
    if args and args[0] in ("-l", "--list"):
        for name, (_, what) in CASES.items():
            print(f"{name:10} {what}")
        return
    case = args.pop(0) if args and not args[0].startswith("-") else "compare"
    if case not in CASES:
        raise SystemExit(f"no case {case!r}; the cases: {', '.join(CASES)}, quick")
    sys.argv[0] = f"python -m bench {case}"
    importlib.import_module(CASES[case][0]).main(args)


if __name__ == "__main__":
    main()
