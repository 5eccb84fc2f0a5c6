"""The short form of ``python -m tests.chaos``: each scenario's invariants, in CI.

Each scenario runs in its own process (``python -m tests.chaos --quick``) and
reports its checks as JSON. A check may fail only because of an open bug
listed in ``tests.chaos.known`` (and pinned by a strict xfail in
test_repros.py); any other failure fails the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.servers import REPO

# A quick scenario takes 20-70 s on 2 busy cores; this only catches a hang.
SCENARIO_TIMEOUT_S = 600
INVARIANTS = ("lost", "duplicated_after_ack", "acked_twice", "live_lease_overlaps")


def run_scenario(name: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    completed = subprocess.run(
        [sys.executable, "-m", "tests.chaos", "--quick", "--scenario", name, "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
        check=False,
    )
    print(completed.stdout)  # the scenario's report, shown when the test fails
    assert out.exists(), completed.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    assert result["checks"], completed.stdout
    return dict(result)


def unexplained(result: dict[str, Any]) -> list[str]:
    return [
        f"{c['name']}: {c['detail'][:500]}"
        for c in result["checks"]
        if not c["ok"] and not c["known"]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["crash", "storage", "concurrency"])
def test_load_scenario_keeps_the_invariants(scenario: str, tmp_path: Path) -> None:
    result = run_scenario(scenario, tmp_path)
    counts = result["counts"]
    assert counts["published"] > 0 and counts["acked"] > 0
    assert {k: counts[k] for k in INVARIANTS} == dict.fromkeys(INVARIANTS, 0)
    assert unexplained(result) == []


@pytest.mark.slow
def test_fuzz_finds_no_new_server_errors(tmp_path: Path) -> None:
    result = run_scenario("fuzz", tmp_path)
    assert unexplained(result) == []
