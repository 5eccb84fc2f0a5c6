"""The one meter: CPU time and peak memory of a process over a measured interval, and
the CPU time of a process tree (Spark's JVM and its Python workers).

Used for both peers (the nats-server binary and our uvicorn process), so the
two sides are measured the same way: CPU seconds are user + system time from
the kernel, peak RSS is the larger of the kernel's high-water mark (reset at
the start of the interval where Linux allows it) and a background sampler.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

# How often the sampler reads RSS; short enough to catch a drain's peak, cheap
# enough (one /proc read) not to show in the measured CPU.
SAMPLE_INTERVAL_S = 0.05

# Writing this to /proc/<pid>/clear_refs resets the VmHWM (peak RSS) counter.
_CLEAR_PEAK_RSS = "5"

_KIB = 1024


@dataclass(frozen=True)
class ProcessUsage:
    """What a process used over one interval."""

    cpu_s: float
    peak_rss_bytes: int
    wall_s: float


class ProcessMeter:
    """Measures a running process by pid between ``__enter__`` and ``__exit__``.

    ``with ProcessMeter(pid) as meter: ...`` then read ``meter.usage``.
    """

    def __init__(self, pid: int, *, sample_interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._process = psutil.Process(pid)
        self._sample_interval_s = sample_interval_s
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_loop, daemon=True)
        self._peak_rss_bytes = 0
        self._start_cpu_s = 0.0
        self._start_wall_s = 0.0
        self._hwm_reset = False
        self._usage: ProcessUsage | None = None

    @property
    def usage(self) -> ProcessUsage:
        if self._usage is None:
            raise RuntimeError("ProcessMeter.usage is available after the with block")
        return self._usage

    def __enter__(self) -> ProcessMeter:
        self._hwm_reset = _reset_peak_rss(self._process.pid)
        self._start_cpu_s = self._cpu_s()
        self._start_wall_s = time.monotonic()
        self._peak_rss_bytes = self._rss_bytes()
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join()
        wall_s = time.monotonic() - self._start_wall_s
        cpu_s = self._cpu_s() - self._start_cpu_s
        peak = max(self._peak_rss_bytes, self._rss_bytes())
        if self._hwm_reset:
            peak = max(peak, _peak_rss_bytes(self._process.pid))
        self._usage = ProcessUsage(cpu_s=cpu_s, peak_rss_bytes=peak, wall_s=wall_s)

    def _read(self, read: Callable[[psutil.Process], float]) -> float:
        """``read`` of the process; 0 once it has ended."""
        try:
            return read(self._process)
        except psutil.NoSuchProcess:
            return 0.0

    def _cpu_s(self) -> float:
        return self._read(lambda p: sum(p.cpu_times()[:2]))

    def _rss_bytes(self) -> int:
        return int(self._read(lambda p: p.memory_info().rss))

    def _sample_loop(self) -> None:
        while not self._stop.wait(self._sample_interval_s):
            self._peak_rss_bytes = max(self._peak_rss_bytes, self._rss_bytes())


def _reset_peak_rss(pid: int) -> bool:
    """Reset the kernel's peak-RSS counter; False where that is not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text(_CLEAR_PEAK_RSS)
    except OSError:
        return False
    return True


def _peak_rss_bytes(pid: int) -> int:
    """VmHWM from /proc/<pid>/status, or 0 where it cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * _KIB
    return 0


def tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by process ``root`` and all its descendants (Linux /proc).

    CPU time is what a path costs the machine; unlike wall time it barely moves
    when other work shares the cores. Each live process counts its own time and
    that of its children that ended and were waited for (``cutime``/``cstime``),
    so a Python worker that exits between two readings keeps its share.
    """
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        used[int(entry)] = sum(int(f) for f in fields[11:15]) / tick
    total = 0.0
    for pid, cpu in used.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            total += cpu
    return total
