"""Parsed views of terraform/ and docker/, shared by the deployment tests.

python-hcl2 keeps HCL string literals quoted ('"s3:GetObject"') and wraps
expressions in ${...}; `unquote` turns both into the text a reader sees.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hcl2

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "terraform"
DOCKER = REPO / "docker"
TOOLS_BIN = TERRAFORM / ".venv-tools" / "bin"
IGNORED_DIRS = {".venv-tools", ".terraform"}


@functools.cache
def tf_files() -> tuple[Path, ...]:
    return tuple(
        sorted(
            p
            for p in TERRAFORM.rglob("*.tf")
            if not IGNORED_DIRS & set(p.relative_to(TERRAFORM).parts)
        )
    )


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@functools.cache
def parse_tf(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return dict(hcl2.load(f))


def unquote(value: Any) -> Any:
    """'"text"' -> 'text'; '${expr}' -> 'expr' when the whole value is one expression."""
    if not isinstance(value, str):
        return value
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if value.startswith("${") and value.endswith("}") and value.count("${") == 1:
        return value[2:-1]
    return value


def blocks(parsed: dict[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (label, body) of one-label blocks (variable, output, module)."""
    for entry in parsed.get(kind, []):
        for label, body in entry.items():
            yield unquote(label), body


def labelled_blocks(parsed: dict[str, Any], kind: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield (type, name, body) of two-label blocks (resource, data)."""
    for entry in parsed.get(kind, []):
        for type_, named in entry.items():
            for name, body in named.items():
                yield unquote(type_), unquote(name), body


@dataclass(frozen=True)
class PolicyDocument:
    path: Path
    name: str
    statements: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return f"{rel(self.path)}:{self.name}"


def policy_documents() -> list[PolicyDocument]:
    docs = []
    for path in tf_files():
        for type_, name, body in labelled_blocks(parse_tf(path), "data"):
            if type_ == "aws_iam_policy_document":
                docs.append(PolicyDocument(path, name, list(body.get("statement", []))))
    return docs


def tool(name: str) -> str | None:
    """A check tool from terraform/check.sh's venv, else from PATH, else None."""
    local = TOOLS_BIN / name
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


@functools.cache
def root_module() -> dict[str, Any]:
    """The root module's files merged into one parse, as terraform sees them."""
    merged: dict[str, list[Any]] = {}
    for path in sorted(TERRAFORM.glob("*.tf")):
        for kind, entries in parse_tf(path).items():
            if isinstance(entries, list):
                merged.setdefault(kind, []).extend(entries)
    return merged
