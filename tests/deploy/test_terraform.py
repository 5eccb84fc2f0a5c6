"""terraform/ parses, documents its interface, and composes its small modules."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from deploytools import (
    DOCKER,
    REPO,
    TERRAFORM,
    blocks,
    parse_tf,
    rel,
    root_module,
    tf_files,
    unquote,
)

MODULES = sorted(p for p in (TERRAFORM / "modules").iterdir() if p.is_dir())
EXAMPLES = sorted(p for p in (TERRAFORM / "examples").iterdir() if p.is_dir())
SKIP = re.compile(r"#\s*checkov:skip=(?P<check>[A-Z0-9_]+)(?::(?P<reason>.*))?")
SKIP_REASON_MIN_CHARS = 30


def test_there_is_terraform_to_check() -> None:
    assert len(tf_files()) > 20
    assert {m.name for m in MODULES} >= {"lake_bucket", "iam", "api_service", "monitoring"}
    assert {e.name for e in EXAMPLES} == {"minimal", "production"}


@pytest.mark.parametrize("path", tf_files(), ids=rel)
def test_file_parses_as_hcl2(path: Path) -> None:
    assert isinstance(parse_tf(path), dict)


@pytest.mark.parametrize("path", tf_files(), ids=rel)
def test_every_variable_has_a_description_and_a_type(path: Path) -> None:
    for name, body in blocks(parse_tf(path), "variable"):
        description = unquote(body.get("description", ""))
        assert isinstance(description, str), f"{name}: description must be a string"
        assert len(description.strip()) >= 10, f"{rel(path)}: variable {name} has no description"
        assert "type" in body, f"{rel(path)}: variable {name} has no type"


@pytest.mark.parametrize("path", tf_files(), ids=rel)
def test_every_output_has_a_description(path: Path) -> None:
    for name, body in blocks(parse_tf(path), "output"):
        assert unquote(body.get("description", "")).strip(), f"{rel(path)}: output {name}"


@pytest.mark.parametrize("module", [TERRAFORM, *MODULES, *EXAMPLES], ids=rel)
def test_every_module_pins_the_aws_provider(module: Path) -> None:
    versions = parse_tf(module / "versions.tf")
    (terraform,) = versions["terraform"]
    assert "required_version" in terraform
    (providers,) = terraform["required_providers"]
    aws = providers["aws"]
    assert unquote(aws["source"]) == "hashicorp/aws"
    assert "<" in unquote(aws["version"]), "the provider needs an upper bound"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_every_module_has_variables_main_and_outputs(module: Path) -> None:
    names = {p.name for p in module.glob("*.tf")}
    assert {"variables.tf", "outputs.tf", "versions.tf"} <= names
    assert len(names) >= 4


def test_root_module_composes_every_module() -> None:
    sources = {unquote(body["source"]) for _, body in blocks(root_module(), "module")}
    assert sources == {f"./modules/{m.name}" for m in MODULES}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_call_the_root_module(example: Path) -> None:
    module = dict(blocks(parse_tf(example / "main.tf"), "module"))
    assert unquote(module["lakepubsub"]["source"]) == "../.."


def test_modules_leave_provider_configuration_to_the_caller() -> None:
    for path in tf_files():
        if "examples" in path.parts:
            continue
        assert "provider" not in parse_tf(path), f"{rel(path)} configures a provider"


def _skips() -> list[tuple[str, str, str | None]]:
    found = []
    files = [*tf_files(), *sorted(DOCKER.glob("*.Dockerfile"))]
    for path in files:
        for line in path.read_text().splitlines():
            match = SKIP.search(line)
            if match:
                found.append((rel(path), match["check"], match["reason"]))
    return found


def test_every_checkov_skip_is_justified_inline() -> None:
    skips = _skips()
    assert skips, "expected the documented skips"
    for path, check, reason in skips:
        assert re.fullmatch(r"CKV2?_[A-Z]+_\d+", check), f"{path}: malformed check id {check}"
        assert reason and len(reason.strip()) >= SKIP_REASON_MIN_CHARS, (
            f"{path}: skip of {check} needs a reason"
        )


def test_readme_lists_every_checkov_skip() -> None:
    readme = (TERRAFORM / "README.md").read_text()
    for path, check, _ in _skips():
        assert check in readme, f"{check} (skipped in {path}) is not explained in README"


def _validate_tooling() -> tuple[str, Path] | None:
    terraform = shutil.which("terraform")
    mirror = Path("/opt/tf-plugins")
    if terraform and (mirror / "registry.terraform.io" / "hashicorp" / "aws").is_dir():
        return terraform, mirror
    return None


@pytest.mark.skipif(
    _validate_tooling() is None,
    reason="needs terraform and a local AWS provider mirror (terraform/README.md)",
)
@pytest.mark.parametrize("directory", [TERRAFORM, *EXAMPLES], ids=rel)
def test_terraform_validate(directory: Path) -> None:
    tooling = _validate_tooling()
    assert tooling is not None
    terraform, mirror = tooling
    lock_file = directory / ".terraform.lock.hcl"
    had_lock_file = lock_file.exists()
    with tempfile.TemporaryDirectory() as data:
        env = {"TF_DATA_DIR": data, "PATH": "/usr/bin:/bin", "HOME": data}
        try:
            init = subprocess.run(
                [terraform, "init", "-backend=false", "-input=false", f"-plugin-dir={mirror}"],
                cwd=directory,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert init.returncode == 0, init.stdout + init.stderr
            validate = subprocess.run(
                [terraform, "validate", "-no-color"],
                cwd=directory,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert validate.returncode == 0, validate.stdout + validate.stderr
        finally:
            if not had_lock_file:
                lock_file.unlink(missing_ok=True)


def _anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).strip().replace(" ", "-")


def test_alarm_runbook_links_resolve() -> None:
    operations = REPO / "docs" / "operations.md"
    anchors = {
        _anchor(line.lstrip("#"))
        for line in operations.read_text().splitlines()
        if line.startswith("#")
    }
    alarms = parse_tf(TERRAFORM / "modules" / "monitoring" / "alarms.tf")
    links = [
        match
        for entry in alarms["resource"]
        for named in entry.values()
        for body in named.values()
        for match in re.findall(r"docs/operations\.md#([\w-]+)", body["alarm_description"])
    ]
    assert len(links) == 5
    assert set(links) <= anchors, set(links) - anchors
