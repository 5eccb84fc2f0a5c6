"""Build and run the cross-language client checks (Node, Go, Java).

Each program publishes COUNT messages with its language's unmodified Google
client, receives them back through StreamingPull, and prints one JSON line
(``published``, ``received``, ``distinct``, ``ordered_ok``, ``errors``).

Builds happen once per machine: dependencies land in each toolchain's standard
cache (``~/.npm``, the Go module cache, ``~/.m2``), outputs in gitignored places
beside the sources, and a stamp holding a hash of the inputs skips a rebuild
until they change. ``python tests/clients/clientkit.py [node] [go] [java]``
builds from the command line and prints how long each build took.

Versions: Node uses @google-cloud/pubsub 5.3.1, the newest that installs here
(6.x wants Node 22 and a @google-cloud/pubsub-api release the registry does not
serve); Go cloud.google.com/go/pubsub/v2; Java google-cloud-pubsub pinned in the
pom (libraries-bom imports BOMs the registry does not serve).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# A fresh machine's first Maven build downloads ~50 MB of jars and plugins: minutes.
# Kept under pytest-timeout's 600 s so a stuck build fails with its own message.
BUILD_TIMEOUT_S = 540.0
# Child processes never look for a cloud metadata server (the Node auth library
# would otherwise probe the link-local metadata address): point them at loopback.
NO_METADATA_ENV = {
    "METADATA_SERVER_DETECTION": "none",
    "GCE_METADATA_HOST": "127.0.0.1:9",
    "GCE_METADATA_IP": "127.0.0.1:9",
}
# Where toolchains install outside PATH (Go's tarball), searched after PATH.
EXTRA_TOOL_DIRS = ("/usr/local/go/bin",)
# How much of a failed command's output goes into the error message.
OUTPUT_TAIL_CHARS = 4000


class ClientError(RuntimeError):
    """A client program could not be built or run."""


class ToolchainMissing(ClientError):
    """A tool the client needs is not on PATH."""


@dataclass(frozen=True)
class Client:
    """One language's program: how to build it and how to start it."""

    name: str
    tools: tuple[str, ...]  # executables that must be on PATH
    inputs: tuple[str, ...]  # files whose content decides a rebuild
    build: tuple[tuple[str, ...], ...]  # commands, run in the client's directory
    stamp: str  # written after a successful build, inside the build output
    run: tuple[str, ...]  # the command that starts the program

    @property
    def directory(self) -> Path:
        return HERE / self.name

    def fingerprint(self) -> str:
        digest = hashlib.sha256(repr(self.build).encode())
        for name in self.inputs:
            digest.update(name.encode() + b"\0" + (self.directory / name).read_bytes())
        return digest.hexdigest()


CLIENTS = {
    "node": Client(
        name="node",
        tools=("node", "npm"),
        inputs=("package.json", "package-lock.json"),
        build=(("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"),),
        stamp="node_modules/.clientkit-stamp",
        run=("node", "receive.mjs"),
    ),
    "go": Client(
        name="go",
        tools=("go",),
        inputs=("go.mod", "go.sum", "main.go"),
        build=(("go", "build", "-buildvcs=false", "-o", "bin/receive", "."),),
        stamp="bin/.clientkit-stamp",
        run=("bin/receive",),
    ),
    "java": Client(
        name="java",
        tools=("mvn", "java"),
        inputs=("pom.xml", "src/main/java/lakepubsub/clients/Receive.java"),
        build=(("mvn", "-q", "-B", "package"),),
        stamp="target/.clientkit-stamp",
        run=("java", "-jar", "target/receive.jar"),
    ),
}


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL_CHARS:]


def _tool_env() -> dict[str, str]:
    path = os.pathsep.join([os.environ.get("PATH", ""), *EXTRA_TOOL_DIRS])
    return {**os.environ, **NO_METADATA_ENV, "PATH": path}


def check_tools(client: Client) -> None:
    path = _tool_env()["PATH"]
    missing = [tool for tool in client.tools if shutil.which(tool, path=path) is None]
    if missing:
        raise ToolchainMissing(
            f"the {client.name} client check needs {', '.join(missing)} on PATH "
            f"(CI machines have Node 20+npm, Go 1.26, JDK 17+Maven)"
        )


def build(name: str, *, timeout_s: float = BUILD_TIMEOUT_S) -> float:
    """Build one client unless its stamp says it is current; return the seconds spent."""
    client = CLIENTS[name]
    check_tools(client)
    stamp = client.directory / client.stamp
    fingerprint = client.fingerprint()
    if stamp.exists() and stamp.read_text() == fingerprint:
        return 0.0
    started = time.monotonic()
    deadline = started + timeout_s
    for command in client.build:
        try:
            done = subprocess.run(
                command,
                cwd=client.directory,
                env=_tool_env(),
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            message = f"{client.name}: {' '.join(command)} took over {timeout_s} s"
            raise ClientError(message) from exc
        if done.returncode != 0:
            raise ClientError(
                f"{client.name}: {' '.join(command)} exited {done.returncode}\n"
                f"{_tail(done.stdout)}\n{_tail(done.stderr)}"
            )
    stamp.write_text(fingerprint)
    return time.monotonic() - started


@dataclass(frozen=True)
class Outcome:
    """One run of a client program: its exit code, its JSON report, and its output."""

    returncode: int
    report: dict[str, Any]
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exit {self.returncode}\nstdout: {_tail(self.stdout)}\nstderr: {_tail(self.stderr)}"


def run(
    name: str,
    *,
    emulator_host: str,
    project: str,
    topic: str,
    subscription: str,
    count: int,
    ordered: bool = False,
    timeout_s: float = 60.0,
    rounds: int = 0,
    idle_s: float = 0.0,
) -> Outcome:
    """Run one built client against ``emulator_host`` and parse the JSON line it prints.
    ``rounds`` and ``idle_s``: the Go and Java programs' close-publish-reopen rounds
    and idle window (their header comments say more)."""
    client = CLIENTS[name]
    check_tools(client)
    args = [
        "--project", project, "--topic", topic, "--subscription", subscription,
        "--count", str(count), "--timeout", str(timeout_s),
    ]  # fmt: skip
    if ordered:
        args.append("--ordered")
    if rounds:
        args += ["--rounds", str(rounds)]
    if idle_s:
        args += ["--idle", str(idle_s)]
    env = {**_tool_env(), "PUBSUB_EMULATOR_HOST": emulator_host}
    try:
        done = subprocess.run(
            [*client.run, *args],
            cwd=client.directory,
            env=env,
            capture_output=True,
            text=True,
            # The programs keep their own deadline; this only catches one that hangs.
            timeout=timeout_s + 30,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClientError(f"{name} client hung past {timeout_s + 30} s") from exc
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ClientError(
            f"{name} client printed no JSON line; exit {done.returncode}\n"
            f"stdout: {_tail(done.stdout)}\nstderr: {_tail(done.stderr)}"
        )
    return Outcome(done.returncode, json.loads(lines[-1]), done.stdout, done.stderr)


def main(argv: list[str]) -> int:
    for name in argv or list(CLIENTS):
        try:
            spent = build(name)
        except ClientError as exc:
            print(f"{name}: FAILED\n{exc}", file=sys.stderr)
            return 1
        print(f"{name}: {'up to date' if spent == 0 else f'built in {spent:.1f} s'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
