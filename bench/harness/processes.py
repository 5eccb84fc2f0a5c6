"""Stopping the servers that tests and benchmarks start as subprocesses."""

from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if ``process`` has not exited within ``timeout_s``."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
