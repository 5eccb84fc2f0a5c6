"""Fault injection: ``python -m tests.chaos [--quick] [--scenario NAME] [--s3] [--json PATH]``.

Scenarios (all by default): crash, storage, concurrency, fuzz. Each prints its
checks, its invariant counts and a summary line ``N passed, N failed``; the run
ends with the same line over all scenarios and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict

from tests.chaos import scenarios
from tests.chaos.verify import Result

NAMES = ("crash", "storage", "concurrency", "fuzz")
INVARIANTS = ("published", "acked", "lost", "duplicated_after_ack")


def run(name: str, *, quick: bool, s3: bool) -> Result:
    sizes = scenarios.QUICK if quick else scenarios.FULL
    runners: dict[str, Callable[[], Result]] = {
        "crash": lambda: scenarios.crash(sizes["crash"], s3=s3),
        "storage": lambda: scenarios.storage(sizes["storage"]),
        "concurrency": lambda: scenarios.concurrency(sizes["concurrency"], s3=s3),
        "fuzz": lambda: _fuzz(quick),
    }
    started = time.monotonic()
    try:
        result = runners[name]()
    except Exception:  # a harness or service failure is a failed check, not a crash
        result = Result(name)
        result.check("completed", False, traceback.format_exc())
    result.seconds = time.monotonic() - started
    return result


def _fuzz(quick: bool) -> Result:
    from tests.chaos.fuzz import run as run_fuzz  # noqa: PLC0415 — schemathesis and hypothesis load only for the fuzz phase

    return run_fuzz(quick=quick)


def report(result: Result) -> None:
    print(f"== {result.scenario} ({result.seconds:.0f} s)")
    for check in result.checks:
        mark = "ok  " if check.ok else "FAIL"
        detail = check.detail if len(check.detail) < 2000 else check.detail[:2000] + "..."
        if check.known:
            mark += f" [known bug: {', '.join(check.known)}]"
        print(f"  {mark} {check.name}" + (f": {detail}" if detail else ""))
    for note in result.notes:
        print(f"  {note}")
    if "published" in result.counts:
        counts = " ".join(f"{k}={result.counts.get(k, 0)}" for k in INVARIANTS)
        extra = " ".join(f"{k}={v}" for k, v in result.counts.items() if k not in INVARIANTS)
        print(f"  invariants: {counts} ({extra})")
    print(f"{result.scenario}: {_summary([result])}", flush=True)


def _summary(results: list[Result]) -> str:
    passed = sum(r.passed for r in results)
    failed = sum(r.failed for r in results)
    known = sum(1 for r in results for c in r.checks if c.known)
    return f"{passed} passed, {failed} failed" + (f" ({known} by known bugs)" if known else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the short CI form")
    parser.add_argument("--scenario", choices=NAMES, action="append", help="repeatable")
    parser.add_argument("--s3", action="store_true", help="crash/concurrency on moto S3")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = []
    for name in args.scenario or NAMES:
        result = run(name, quick=args.quick, s3=args.s3)
        report(result)
        results.append(result)
    print(f"chaos: {_summary(results)}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) for r in results], out, indent=1)
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
