"""checkov passes over terraform/ and docker/ (when terraform/check.sh installed it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from deploytools import DOCKER, TERRAFORM, tool

CHECKOV = tool("checkov")

pytestmark = pytest.mark.skipif(
    CHECKOV is None, reason="checkov not installed; run terraform/check.sh once"
)


def run_checkov(directory: str, framework: str) -> list[dict[str, Any]]:
    assert CHECKOV is not None
    result = subprocess.run(
        [
            CHECKOV,
            "--directory",
            directory,
            "--framework",
            framework,
            "--skip-path",
            ".venv-tools",
            "--skip-download",
            "--quiet",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.stdout.strip(), result.stderr
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    assert result.returncode == 0, [
        (c["check_id"], c["resource"], c["file_path"])
        for r in reports
        for c in r["results"]["failed_checks"]
    ]
    return reports


@pytest.mark.parametrize(
    ("directory", "framework"),
    [(TERRAFORM, "terraform"), (DOCKER, "dockerfile")],
    ids=["terraform", "dockerfile"],
)
def test_checkov_passes(directory: Path, framework: str) -> None:
    reports = run_checkov(str(directory), framework)
    assert sum(r["summary"]["passed"] for r in reports) > 0
    assert all(r["summary"]["failed"] == 0 for r in reports)
