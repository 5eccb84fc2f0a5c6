"""The semantics benchmark's short form, end to end, and its ratios.

``python -m bench semantics --quick`` runs as a subprocess against a
real server; the test checks that it counted every message and wrote its
report, and asserts nothing about speed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import semantics_bench as sb
from bench import workload as w
from bench.harness.lakepubsub_server import REPO

# The quick form takes 10-20 s on 2 busy cores; this only catches a hang.
QUICK_TIMEOUT_S = 120


def test_quick_run_writes_a_row_per_subscription(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "semantics", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT_S,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    text = (tmp_path / "semantics-quick.md").read_text()
    backlog = sb.QUICK.backlog
    # the filtered case publishes ten times the backlog to deliver as many messages
    delivered = {sb.PLAIN: backlog, sb.EXACTLY_ONCE: backlog, sb.FILTERED: backlog}
    for name, count in delivered.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        assert row.split(" | ")[1] == f"{count:,}", row
        assert row in completed.stdout
    for ratio in sb.RATIO_ROWS:
        assert f"| {ratio.label} |" in text
    assert "cores" in text and "Load average" in text


def result(case: str, metric: str, value: float) -> w.Result:
    return w.Result("lakepubsub", case, metric, "", (value,))


def test_ratios_compare_each_case_with_plain_in_the_same_round() -> None:
    round_results = [
        result(sb.PLAIN, sb.THROUGHPUT, 10_000),
        result(sb.PLAIN, sb.SERVER_CPU_PER_MILLION, 50),
        result(sb.EXACTLY_ONCE, sb.THROUGHPUT, 4_000),
        result(sb.EXACTLY_ONCE, sb.SERVER_CPU_PER_MILLION, 100),
        result(sb.FILTERED, sb.THROUGHPUT, 8_000),
        result(sb.FILTERED, sb.SERVER_CPU_PER_MILLION, 75),
    ]

    ratios = {r.metric: r.median for r in sb.ratios(round_results)}

    assert ratios == {
        sb.EXACTLY_ONCE_RATIO: pytest.approx(0.4),
        sb.FILTER_COST_RATIO: pytest.approx(1.25),
        sb.EXACTLY_ONCE_CPU_RATIO: pytest.approx(2.0),
        sb.FILTER_CPU_RATIO: pytest.approx(1.5),
    }
    table = sb.targets_table(sb.ratios(round_results))
    assert "| exactly-once throughput / plain's | 0.4 | ≥ 0.5 | **no** |" in table
    assert "| filter: time per delivered message / plain's | 1.25 | ≤ 1.5 | yes |" in table
