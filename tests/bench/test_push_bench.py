"""The quick form of bench/push_bench.py, end to end: a real server and real endpoints.

Checks that every section is measured and written, and that the throughput
run delivered the whole backlog; asserts nothing about speed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import push_bench
from bench.harness.lakepubsub_server import REPO

# The quick run takes 45 s on 2 busy cores; this only catches a hang.
QUICK_TIMEOUT_S = 110
SECTIONS = (
    "## Machine",
    "## Sizes",
    "## Push throughput",
    "## Publish → push latency",
    "## Back-off (seed 003)",
    "### (a) One request in five nacked",
    "### (b) Every request nacked",
    "## Authentication cost on publish latency",
)


@pytest.mark.slow
def test_quick_run_reports_every_section(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "push", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = (tmp_path / "push-quick.md").read_text()

    assert report.strip() in completed.stdout, "the report is printed too"
    for heading in SECTIONS:
        assert heading in report
    assert re.search(r"\d+ cores", report) and "Load average" in report
    backlog = push_bench.QUICK.backlog_messages
    assert f"| delivered, unique message ids | {backlog:,} |" in report
    for row in ("publish → push p50", "mean interval between deliveries", "**difference**"):
        assert re.search(rf"\| \**{re.escape(row)}\**.*\| .*\d", report), row
    assert "Without a key the keyed server answered HTTP 401." in report
