"""The Dockerfiles have what a platform team checks first, and agree with terraform/.

No Docker engine runs here, so the files are parsed rather than built; hadolint
runs too when terraform/check.sh has installed it.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deploytools import DOCKER, REPO, TERRAFORM, blocks, parse_tf, tool, unquote

API = DOCKER / "api.Dockerfile"
JOBS = DOCKER / "jobs.Dockerfile"
API_PORT = 8085
ROOT_USERS = {"root", "0", "root:root", "0:0"}
# A tag that names a version: digits in it, not latest.
VERSION_TAG = re.compile(r":[^:/@]*\d[^:/@]*$")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)
    ignored_rules: set[str] = field(default_factory=set)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse_dockerfile(path: Path) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments dropped, but
    `# hadolint ignore=` pragmas in front of FROM kept with their stage."""
    stages: list[Stage] = []
    pending_ignores: set[str] = set()
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not logical and line.startswith("#"):
            pragma = re.match(r"#\s*hadolint ignore=([\w,]+)", line)
            if pragma:
                pending_ignores |= set(pragma[1].split(","))
            continue
        if not line and not logical:
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, args = logical.partition(" ")
        keyword, args, logical = keyword.upper(), args.strip(), ""
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name, ignored_rules=pending_ignores))
        elif stages:
            stages[-1].instructions.append((keyword, args))
        pending_ignores = set()
    return stages


def exec_form(args: str | None) -> list[str]:
    assert args is not None
    value = json.loads(args)
    assert isinstance(value, list), f"use the exec (JSON) form: {args}"
    return [str(v) for v in value]


def final_stages() -> list[tuple[str, Stage]]:
    """Stages that are shipped: the API's last stage and the jobs' named targets."""
    api = parse_dockerfile(API)
    jobs = {s.name: s for s in parse_dockerfile(JOBS)}
    return [
        ("api", api[-1]),
        ("jobs:emr-serverless", jobs["emr-serverless"]),
        ("jobs:standalone", jobs["standalone"]),
    ]


SHIPPED = final_stages()


@pytest.mark.parametrize(("label", "stage"), SHIPPED, ids=[s[0] for s in SHIPPED])
def test_shipped_images_run_as_a_non_root_user(label: str, stage: Stage) -> None:
    user = stage.last("USER")
    assert user is not None, f"{label}: no USER"
    assert user not in ROOT_USERS, f"{label}: runs as {user}"


@pytest.mark.parametrize("path", [API, JOBS], ids=lambda p: p.name)
def test_every_base_image_is_pinned(path: Path) -> None:
    for stage in parse_dockerfile(path):
        if "@sha256:" in stage.base:
            continue
        if "DL3007" in stage.ignored_rules:
            # Allowed only with a written reason right above the pragma.
            assert ":latest" in stage.base
            assert "release label" in path.read_text(), "explain why latest is acceptable"
            continue
        assert VERSION_TAG.search(stage.base), f"{path.name}: unpinned base {stage.base}"


def test_api_image_serves_on_8085() -> None:
    stage = parse_dockerfile(API)[-1]
    command = exec_form(stage.last("ENTRYPOINT")) + exec_form(stage.last("CMD"))
    assert command[:2] == ["lakepubsub", "serve"]
    assert command[command.index("--port") + 1] == str(API_PORT)
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert str(API_PORT) in stage.all("EXPOSE")


def test_api_image_checks_liveness_without_storage() -> None:
    stage = parse_dockerfile(API)[-1]
    healthcheck = stage.last("HEALTHCHECK")
    assert healthcheck and healthcheck.upper() != "NONE"
    assert f"127.0.0.1:{API_PORT}/healthz" in healthcheck
    assert "--timeout=" in healthcheck and "--interval=" in healthcheck


def test_api_image_defaults_to_authenticated_requests() -> None:
    env = " ".join(parse_dockerfile(API)[-1].all("ENV"))
    assert "LAKEPUBSUB_ALLOW_ANONYMOUS=false" in env


def test_images_leave_out_what_they_cannot_run() -> None:
    # The API image has no JVM and EMR brings its own Spark: neither installs pyspark.
    for path, stage in ((API, parse_dockerfile(API)[-1]), (JOBS, SHIPPED[1][1])):
        installs = " ".join(stage.all("RUN"))
        assert "--no-deps" in installs, path.name
        assert "pyspark" not in installs, path.name


def test_standalone_jobs_image_runs_the_jobs_cli() -> None:
    stage = dict(SHIPPED)["jobs:standalone"]
    assert exec_form(stage.last("ENTRYPOINT")) == ["lakepubsub", "jobs", "run"]
    assert exec_form(stage.last("CMD"))[0] in {"compact", "truncate", "gc", "batch-consume"}
    assert "openjdk-17-jre-headless" in " ".join(stage.all("RUN"))


def test_emr_image_matches_what_terraform_submits() -> None:
    stage = dict(SHIPPED)["jobs:emr-serverless"]
    assert "emr-serverless/spark/emr-spark-" in stage.base
    assert stage.last("USER") == "hadoop:hadoop", "EMR Serverless requires hadoop:hadoop"
    assert stage.last("ENTRYPOINT") is None, "EMR Serverless needs the base entrypoint"
    module = TERRAFORM / "modules" / "jobs_emr_serverless"
    (main_locals,) = parse_tf(module / "main.tf")["locals"]
    jobs_dir, python = unquote(main_locals["jobs_dir"]), unquote(main_locals["python"])
    assert any(args.split()[-1].rstrip("/") == jobs_dir for args in stage.all("COPY"))
    assert f"PYSPARK_PYTHON={python}" in stage.all("ENV")
    release = dict(blocks(parse_tf(module / "variables.tf"), "variable"))["release_label"]
    assert stage.base.split("/")[-1].split(":")[0] == unquote(release["default"])


def test_terraform_runs_the_api_on_the_image_port() -> None:
    variables = dict(blocks(parse_tf(TERRAFORM / "modules/api_service/variables.tf"), "variable"))
    assert variables["container_port"]["default"] == API_PORT


def test_dockerignore_keeps_the_context_to_the_package() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "start from an allow-list"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert {"pyproject.toml", "lakepubsub", "jobs", "api"} <= allowed
    assert not {".venv", ".git", "terraform", "tests"} & allowed


@pytest.mark.skipif(tool("hadolint") is None, reason="hadolint not installed (terraform/check.sh)")
@pytest.mark.parametrize("path", [API, JOBS], ids=lambda p: p.name)
def test_hadolint_finds_nothing(path: Path) -> None:
    hadolint = tool("hadolint")
    assert hadolint is not None
    result = subprocess.run(
        [hadolint, "--no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
