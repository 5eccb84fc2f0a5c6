"""The one report writer: the markdown every case writes to ``bench/results/``.

A report is a title, a line saying when, where and by which command it was
written, and sections of prose and tables; ``write`` puts it in the results
directory and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

RESULTS = Path(__file__).resolve().parent / "results"
EN_DASH = "\u2013"  # between the ends of a range
NONE = "\u2014"  # no figure
_GIB = 1024**3
# Figures from this size on are shown whole.
_WHOLE_FROM = 100


@dataclass(frozen=True)
class Result:
    """One figure of one case for one system: one value per run."""

    system: str
    case: str
    metric: str
    unit: str
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def load(average: Sequence[float] | None = None) -> str:
    """The load average (1/5/15 min), now or as read before."""
    return " / ".join(f"{v:.1f}" for v in (average or os.getloadavg()))


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> str:
    """Cores, architecture, Python and the load average now, in one line."""
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"load average {load()}"
    )


def fmt(value: float) -> str:
    """Three significant figures or so; thousands separated."""
    if value == 0:
        return "0"
    if abs(value) >= _WHOLE_FROM:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def quantile(values: Sequence[float], q: float) -> float:
    """The value ``q`` of the way up the sorted values (index ``int(q * n)``); NaN if none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cell(result: Result | None, divisor: float = 1.0, show: Callable[[float], str] = fmt) -> str:
    """A figure's median, with [min-max] when it has several runs, each as ``show`` puts it."""
    if result is None:
        return NONE
    median = show(result.median / divisor)
    if len(result.values) == 1:
        return median
    return f"{median} [{show(result.min / divisor)}{EN_DASH}{show(result.max / divisor)}]"


def ratio(ours: Result | None, peer: Result | None) -> str:
    """``ours`` ÷ ``peer`` of the medians."""
    if ours is None or peer is None or peer.median == 0:
        return NONE
    return f"{ours.median / peer.median:.3g}\u00d7"


class Target(NamedTuple):
    """A row of a targets table: one figure (case, metric), its bound (``None``: the figure
    is shown without one), the passing side, and the divisor it is compared after (commits
    per 1M messages -> per message)."""

    label: str
    case: str
    metric: str
    unit: str = ""
    bound: float | None = None
    at_least: bool = True
    divisor: float = 1.0

    def cells(self, result: Result) -> list[str]:
        """The figure (``cell``), the target (``≥ bound`` or ``≤ bound``) and whether the
        median meets it."""
        if self.bound is None:
            return [cell(result, self.divisor), "", ""]
        value = result.median / self.divisor
        met = value >= self.bound if self.at_least else value <= self.bound
        return [
            cell(result, self.divisor),
            f"{'≥' if self.at_least else '≤'} {self.bound:,g}",
            "yes" if met else "**no**",
        ]


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    right: int = 1,
    centred: Sequence[int] = (),
    left: Sequence[int] = (),
) -> list[str]:
    """A markdown table; columns from ``right`` on are right-aligned, but ``centred`` and
    ``left`` ones."""
    align = [
        ":---:" if i in centred else "---" if i < right or i in left else "---:"
        for i in range(len(header))
    ]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def side_by_side(
    results: Iterable[Result],
    ours: str,
    peer: str,
    labels: Sequence[str],
    keep: Callable[[tuple[str, str, str]], bool] = lambda _: True,
) -> list[str]:
    """Two systems' figures per (case, metric, unit) that ``keep`` keeps, with ours ÷ peer."""
    found: dict[tuple[str, str, str, str], Result] = {}
    for r in results:
        found[r.system, r.case, r.metric, r.unit] = r
    keys = [k[1:] for s in (ours, peer) for k in found if k[0] == s and keep(k[1:])]
    rows = []
    for key in dict.fromkeys(keys):
        mine, theirs = found.get((ours, *key)), found.get((peer, *key))
        rows.append((*key, cell(mine), cell(theirs), ratio(mine, theirs)))
    return table(["case", "metric", "unit", *labels, "ratio"], rows, right=3)


def machine_lines(
    load_before: Sequence[float],
    load_after: Sequence[float],
    *,
    stores: str,
    note: str,
    software: str,
) -> list[str]:
    """The lines of a report's "Machine" section: CPU, disk, load average at both ends,
    ``software`` (after Python's version)."""
    temp = tempfile.gettempdir()
    return [
        f"- **CPU:** {os.cpu_count()} cores ({cpu_model()}); "
        f"{psutil.virtual_memory().total / _GIB:.1f} GiB RAM; {platform.platform()}",
        f"- **Disk:** {stores} in `{temp}` on {disk(temp)}",
        f"- **Load average** (1/5/15 min): {load(load_before)} at the start, "
        f"{load(load_after)} at the end. {note}",
        f"- **Software:** Python {platform.python_version()}; {software}",
    ]


def header(title: str, *, command: str, about: str = "") -> list[str]:
    """The title, and when, on what machine and by which command the report was written."""
    line = f"{now()} · {machine()} · `{command}`" + (f" · {about}" if about else "")
    return [f"# {title}", "", line, ""]


def command(module: str, argv: Sequence[str] | None) -> str:
    """The command line that ran ``module`` (``python -m bench <case> ...``)."""
    return " ".join(["python -m bench", module, *(sys.argv[1:] if argv is None else argv)])


def parser(
    description: str, *, quick: str = "small sizes (CI)", runs: bool = False
) -> argparse.ArgumentParser:
    """A case's command line, with the ``--quick`` and ``--out`` every case takes (and
    ``--runs`` with ``runs``)."""
    found = argparse.ArgumentParser(description=description.split("\n", maxsplit=1)[0])
    found.add_argument("--quick", action="store_true", help=quick)
    found.add_argument("--out", type=Path, default=RESULTS, help="report directory")
    if runs:
        found.add_argument("--runs", type=int, default=None, help="runs of every case")
    return found


def write(out: Path, name: str, lines: Sequence[str] | str, *, echo: bool = True) -> Path:
    """Write a report as ``out/name`` (and print it)."""
    text = lines if isinstance(lines, str) else "\n".join(lines) + "\n"
    if echo:
        print(text)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)
    return path


def progress(started: float | None = None) -> Callable[[str], None]:
    """Prints a line to stderr with the seconds since the run started (default: now)."""
    began = time.monotonic() if started is None else started

    def say(line: str) -> None:
        print(f"[{time.monotonic() - began:7.1f} s] {line}", file=sys.stderr, flush=True)

    return say


def _run(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def disk(path: str) -> str:
    """The device, file system and size under ``path`` (where the lakes and stores live)."""
    parts = [p for p in psutil.disk_partitions(all=True) if path.startswith(p.mountpoint)]
    if not parts:
        return "unknown disk"
    part = max(parts, key=lambda p: len(p.mountpoint))
    usage = psutil.disk_usage(part.mountpoint)
    device = Path(part.device).name
    rotational = Path(f"/sys/block/{device}/queue/rotational")
    kind = ""
    if rotational.is_file():
        kind = f", kernel-reported rotational={rotational.read_text().strip()}"
    model = _run("lsblk", "-dno", "MODEL,TRAN", part.device)
    return (
        f"{part.device} ({part.fstype}, {usage.total / _GIB:.0f} GiB, "
        f"{usage.free / _GIB:.0f} GiB free{kind}{', ' + model if model else ''}) "
        f"mounted at {part.mountpoint}"
    )


def software(*packages: str) -> str:
    return ", ".join(f"{p} {version(p)}" for p in packages)


def executable_version(*argv: str) -> str:
    return _run(*argv) or "unknown"
