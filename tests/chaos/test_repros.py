"""Service bugs the chaos runs found, each pinned by its deterministic reproduction.

A bug that is found and not yet fixed gets a strict xfail here and an entry in
``tests.chaos.known``; a fixed one keeps its repro as a regression test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.servers import REPO

REPRO_TIMEOUT_S = 300
Repros = dict[str, dict[str, object]]


@pytest.fixture(scope="module")
def repros(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, object]]]:
    """Every repro, run once in one process: moto, the fault proxy and one API server."""
    out = tmp_path_factory.mktemp("repro") / "repro.json"
    subprocess.run(
        [sys.executable, "-m", "tests.chaos.repro", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        timeout=REPRO_TIMEOUT_S,
        check=False,
    )
    yield {r["name"]: r for r in json.loads(Path(out).read_text())}


def _assert_ok(repros: dict[str, dict[str, object]], name: str) -> None:
    repro = repros[name]
    assert repro["ok"], f"expected {repro['expected']}; observed {repro['observed']}"


@pytest.mark.s3
def test_topic_create_with_lost_commit_answer_leaves_a_usable_topic(
    repros: dict[str, dict[str, object]],
) -> None:
    _assert_ok(repros, "catalog-answer-lost-topic")


@pytest.mark.s3
def test_subscription_create_with_lost_commit_answer_leaves_a_usable_subscription(
    repros: dict[str, dict[str, object]],
) -> None:
    _assert_ok(repros, "catalog-answer-lost-subscription")


@pytest.mark.s3
def test_table_create_with_lost_commit_answers_is_not_a_500(
    repros: dict[str, dict[str, object]],
) -> None:
    _assert_ok(repros, "table-create-answer-lost")


def test_publish_with_non_ascii_data_is_a_400(repros: Repros) -> None:
    _assert_ok(repros, "publish-non-ascii-data")
