"""The README's two commands (issue 15): ``make run`` installs what running needs and
nothing of the development toolchain; ``make test`` adds it; pip is not silenced."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def planned(target: str, tmp_path: Path) -> list[str]:
    """The commands ``make TARGET`` would run on a fresh clone (no virtualenv yet). Run
    as a make of its own: under ``make test`` (CI) the inherited make variables
    would add "Entering/Leaving directory" lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def installs(commands: list[str]) -> list[str]:
    return [c for c in commands if "pip install" in c]


def test_make_run_installs_only_the_runtime(tmp_path: Path) -> None:
    commands = planned("run", tmp_path)
    assert any(c.endswith("pip install -e .") for c in commands)
    assert not any("[dev]" in c for c in commands)
    assert commands[-1].endswith("/lakepubsub serve")


def test_make_test_adds_the_development_tools(tmp_path: Path) -> None:
    commands = planned("test", tmp_path)
    assert any(c.endswith("pip install -e '.[dev]'") for c in commands)
    assert any(c.endswith("pytest -q ") or "pytest -q" in c for c in commands)


def test_installs_show_progress_or_say_what_they_do(tmp_path: Path) -> None:
    for target in ("run", "test"):
        commands = planned(target, tmp_path)
        assert installs(commands)
        assert not any("--quiet" in c or " -q " in c for c in installs(commands))
        assert any(c.startswith("echo") and "installing" in c for c in commands)


def test_the_development_tools_are_not_runtime_dependencies() -> None:

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = " ".join(project["dependencies"])
    for tool in ("mypy", "ruff", "pytest", "schemathesis", "matplotlib", "moto"):
        assert tool not in runtime
