"""Build the Go load generator (``bench/loadgen``) once per machine.

The binary lands in ``bench/loadgen/bin/`` (gitignored) beside a stamp that
holds a hash of the sources (``go.mod``, ``go.sum``, ``*.go``) and of ``go
version``; a later call with the same hash builds nothing. Modules come from
the Go toolchain's own module cache (``go env GOMODCACHE``), so only the first
build on a machine downloads them, and compiled packages from its build cache.

    python -m bench.gobuild        # build (or check) and print the binary's path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

LOADGEN = Path(__file__).resolve().parent / "loadgen"
BINARY = LOADGEN / "bin" / "loadgen"
STAMP = LOADGEN / "bin" / ".build-stamp"
# A cold build compiles grpc, protobuf and the Pub/Sub client: a few minutes on 2 busy cores.
BUILD_TIMEOUT_S = 540.0
# How much of a failed build's output goes into the error.
OUTPUT_TAIL_CHARS = 4000
MISSING_GO = (
    "the gRPC benchmark cases need Go (1.26 or newer) on PATH to build their load "
    "generator, bench/loadgen (Google's Pub/Sub Go client and the NATS Go client): "
    "install Go and run the benchmark again"
)


class BuildError(RuntimeError):
    """The load generator could not be built (no Go, or the build failed)."""


def _fingerprint(go: str) -> str:
    version = subprocess.run(
        [go, "version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    digest = hashlib.sha256(version.encode())
    for path in sorted([LOADGEN / "go.mod", LOADGEN / "go.sum", *LOADGEN.glob("*.go")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build() -> Path:
    """The load generator's binary, built first unless its stamp says it is current."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(MISSING_GO)
    fingerprint = _fingerprint(go)
    if BINARY.is_file() and STAMP.is_file() and STAMP.read_text() == fingerprint:
        return BINARY
    BINARY.parent.mkdir(exist_ok=True)
    # Built under a name of its own, then moved into place: a concurrent build
    # (the test suite and a benchmark) never runs a half-written binary.
    partial = BINARY.with_name(f".loadgen-{os.getpid()}")
    try:
        done = subprocess.run(
            [go, "build", "-buildvcs=false", "-o", str(partial), "."],
            cwd=LOADGEN,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        partial.unlink(missing_ok=True)
        raise BuildError(f"go build in {LOADGEN} took over {BUILD_TIMEOUT_S:g} s") from exc
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(
            f"go build in {LOADGEN} exited {done.returncode}:\n"
            f"{done.stdout[-OUTPUT_TAIL_CHARS:]}{done.stderr[-OUTPUT_TAIL_CHARS:]}"
        )
    partial.replace(BINARY)
    STAMP.write_text(fingerprint)
    return BINARY


def main() -> int:
    started = time.monotonic()
    try:
        binary = build()
    except BuildError as exc:
        print(f"bench/loadgen: {exc}", file=sys.stderr)
        return 1
    print(f"{binary} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
