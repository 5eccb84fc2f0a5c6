"""Run maintenance tasks on fixed intervals in one process: the embedded default.

``lakepubsub jobs schedule`` builds one ``Task`` per job (compaction,
truncation, GC, and any configured batch consumers) and hands them to a
``Scheduler``, which runs whichever task is due, one at a time, until stopped.
Production deployments schedule the same entry points with cron, EventBridge
Scheduler or Airflow instead (``lakepubsub jobs run <job>``).

Tasks never overlap, so two runs of one job cannot conflict on a table. A task
that fails is logged and tried again at its next interval; the others go on.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO

log = logging.getLogger(__name__)

# A progress log line at most this often when the output is not a terminal.
PROGRESS_LOG_INTERVAL_S = 10.0


class Progress(Protocol):
    """What a long job reports as it goes: ``begin`` once, ``advance`` per item, ``end``;
    ``phase`` names a step that takes a while between items ("starting Spark")."""

    def begin(self, job: str, total: int) -> None: ...

    def advance(self, item: str) -> None: ...

    def phase(self, text: str) -> None: ...

    def end(self) -> None: ...


class NullProgress:
    def begin(self, job: str, total: int) -> None:
        pass

    def advance(self, item: str) -> None:
        pass

    def phase(self, text: str) -> None:
        pass

    def end(self) -> None:
        pass


class LogProgress:
    """Progress as log lines, at most one per ``interval_s`` (for files and CI logs)."""

    def __init__(self, interval_s: float = PROGRESS_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._job = ""
        self._total = 0
        self._done = 0
        self._started = 0.0
        self._last = 0.0

    def begin(self, job: str, total: int) -> None:
        self._job, self._total, self._done = job, total, 0
        self._started = self._last = time.monotonic()

    def advance(self, item: str) -> None:
        self._done += 1
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            log.info(
                "%s: %d/%d (%s) after %.0f s",
                self._job,
                self._done,
                self._total,
                item,
                now - self._started,
            )

    def phase(self, text: str) -> None:
        log.info("%s: %d/%d, %s", self._job or "lakepubsub", self._done, self._total, text)

    def end(self) -> None:
        log.info(
            "%s: %d/%d done in %.1f s",
            self._job,
            self._done,
            self._total,
            time.monotonic() - self._started,
        )


class ConsoleProgress:
    """A one-line progress bar on a terminal: ``job [#####     ] 12/40 item``."""

    WIDTH = 30

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._job = ""
        self._total = 0
        self._done = 0
        self._started = 0.0
        self._drawn = False  # a bar is on the current line, not yet ended

    def clear(self) -> None:
        """Wipe the bar from its line, so that a log record written next starts on a
        clean line (``keep_logs_apart``); the next item draws the bar again."""
        if self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._drawn = False

    def keep_logs_apart(self) -> None:
        """Make the log handlers writing to this stream clear the bar before each record."""
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is self.stream:
                handler.addFilter(_ClearBar(self))

    def begin(self, job: str, total: int) -> None:
        self._job, self._total, self._done = job, total, 0
        self._started = time.monotonic()
        self._draw("")

    def advance(self, item: str) -> None:
        self._done += 1
        self._draw(item)

    def phase(self, text: str) -> None:
        """Draw ``text`` in the bar and end the line: whatever the step prints (the
        JVM's warnings, say) goes below it, and the next item draws a fresh bar."""
        if self._job:
            self._draw(f"{text}…")
        else:
            self.stream.write(f"{text}…")
        self.stream.write("\n")
        self.stream.flush()
        self._drawn = False

    def end(self) -> None:
        self._draw(f"done in {time.monotonic() - self._started:.1f} s")
        self.stream.write("\n")
        self.stream.flush()
        self._drawn = False

    def _draw(self, item: str) -> None:
        filled = self.WIDTH * self._done // self._total if self._total else self.WIDTH
        bar = "#" * filled + " " * (self.WIDTH - filled)
        line = f"{self._job} [{bar}] {self._done}/{self._total} {item}"[:120]
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()
        self._drawn = True


class _ClearBar(logging.Filter):
    """Clears a console bar before its handler writes a record (a filter runs first)."""

    def __init__(self, progress: ConsoleProgress) -> None:
        super().__init__()
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        self.progress.clear()
        return True


def default_progress(stream: TextIO | None = None) -> Progress:
    """A bar on a terminal, periodic log lines otherwise."""
    stream = stream or sys.stderr
    if not stream.isatty():
        return LogProgress()
    console = ConsoleProgress(stream)
    console.keep_logs_apart()
    return console


@dataclass
class Task:
    """One job on an interval. ``run`` gets a ``Progress`` and returns a report (logged)."""

    name: str
    interval_s: float
    run: Callable[[Progress], object]
    next_due: float = 0.0  # monotonic time; 0 runs it at once
    runs: int = 0
    failures: int = 0
    last_error: str = ""
    last_duration_s: float = 0.0


@dataclass
class Scheduler:
    """Runs due tasks one at a time until ``stop()`` (or ``max_runs`` runs in all)."""

    tasks: list[Task]
    progress: Progress = field(default_factory=NullProgress)
    clock: Callable[[], float] = time.monotonic
    max_runs: int | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        """Finish the running task, then return from ``run``."""
        self._stop.set()

    def run(self) -> None:
        tasks = [t for t in self.tasks if t.interval_s > 0]
        if not tasks:
            log.warning("no task has an interval; nothing to schedule")
            return
        log.info("scheduling %s", ", ".join(f"{t.name} every {t.interval_s:g} s" for t in tasks))
        total = 0
        while not self._stop.is_set():
            task = min(tasks, key=lambda t: t.next_due)
            wait = task.next_due - self.clock()
            if wait > 0:
                self._stop.wait(wait)
                continue
            self.run_once(task)
            total += 1
            if self.max_runs is not None and total >= self.max_runs:
                return

    def run_once(self, task: Task) -> None:
        started = self.clock()
        log.info("%s: starting (run %d)", task.name, task.runs + 1)
        try:
            report = task.run(self.progress)
        except Exception as exc:  # one job's failure must not stop the others
            task.failures += 1
            task.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("%s: failed", task.name)
        else:
            task.last_error = ""
            log.info("%s: %s", task.name, report)
        task.runs += 1
        task.last_duration_s = self.clock() - started
        # The interval counts from the start of a run; a run that overran its
        # interval still leaves a tenth of it before the next, not a burst.
        task.next_due = max(started + task.interval_s, self.clock() + task.interval_s / 10)
        log.info("%s: finished in %.1f s", task.name, task.last_duration_s)
