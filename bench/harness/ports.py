"""Ports for the servers that tests and benchmarks start as subprocesses.

A port asked of the kernel with ``bind(0)`` and released again lies in the
ephemeral range, where any outgoing connection or port-0 bind (every server's
gRPC door binds one) may take it before the child process binds it. CI lost a
whole run to that (``[Errno 98] address already in use``). So ports come from
below the ephemeral range, where the kernel hands out nothing on its own,
picked at random (several test or benchmark runs may share the machine) and
checked free.
"""

from __future__ import annotations

import random
import socket
import subprocess
import time
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000
# Ports below the ephemeral range are used only when there are at least this many.
_ENOUGH_BELOW = 1000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = _RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A free port on 127.0.0.1 that no port-0 bind or outgoing connection will take."""
    low, _ = ephemeral_range()
    if low - _LOWEST >= _ENOUGH_BELOW:
        for _ in range(200):
            port = random.randrange(_LOWEST, low)
            if _bindable(port):
                return port
    # A machine whose ephemeral range starts low: fall back to the kernel's choice.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int,
    timeout_s: float = 60.0,
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    """Until something listens on 127.0.0.1:``port``; fails at once if ``process`` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"the server for port {port} exited with {process.returncode} before listening"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")
