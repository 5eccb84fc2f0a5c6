"""The scheduler: due tasks one at a time, failures isolated, progress shown."""

from __future__ import annotations

import io
import logging

import pytest
from pyspark.sql import SparkSession
from support import LakeSpec

from jobs.common import JobContext
from lakepubsub.scheduler import (
    ConsoleProgress,
    LogProgress,
    NullProgress,
    Progress,
    Scheduler,
    Task,
    default_progress,
)
from lakepubsub.settings.schedule import ScheduleSettings


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_runs_due_tasks_in_turn_and_survives_failures() -> None:
    clock = FakeClock()
    ran: list[tuple[str, float]] = []

    def job(name: str, seconds: float, fail: bool = False) -> Task:
        def run(progress: Progress) -> object:
            ran.append((name, clock.now))
            clock.now += seconds
            if fail:
                raise RuntimeError("boom")
            return {"ok": True}

        return Task(name, interval_s={"fast": 10, "slow": 25, "broken": 30}[name], run=run)

    tasks = [job("fast", 1), job("slow", 2), job("broken", 1, fail=True)]
    scheduler = Scheduler(tasks, clock=clock, max_runs=8)
    scheduler._stop.wait = lambda timeout=None: _advance(clock, timeout)  # type: ignore[method-assign]
    scheduler.run()
    assert ran == [
        ("fast", 0.0),
        ("slow", 1.0),
        ("broken", 3.0),
        ("fast", 10.0),
        ("fast", 20.0),
        ("slow", 26.0),
        ("fast", 30.0),
        ("broken", 33.0),
    ]
    broken = tasks[2]
    assert (broken.runs, broken.failures, broken.last_error) == (2, 2, "RuntimeError: boom")
    assert tasks[0].failures == 0 and tasks[0].last_duration_s == 1


def _advance(clock: FakeClock, timeout: float | None) -> bool:
    clock.now += timeout or 0
    return False


def test_zero_interval_disables_and_stop_returns() -> None:
    calls: list[str] = []
    scheduler = Scheduler([Task("off", 0, lambda p: calls.append("off"))])
    scheduler.run()  # nothing enabled: returns at once
    assert calls == []
    scheduler = Scheduler([])
    scheduler.stop()
    scheduler.run()


def test_settings_from_env_and_overrides() -> None:
    env = {"LAKEPUBSUB_COMPACT_INTERVAL_S": "60", "LAKEPUBSUB_GC_INTERVAL_S": "0"}
    settings = ScheduleSettings.from_env(env, truncate_interval_s=30.0, gc_interval_s=None)
    assert settings.intervals() == {"compact": 60.0, "truncate": 30.0, "gc": 0.0}


def test_console_progress_draws_a_bar() -> None:
    stream = io.StringIO()
    progress = ConsoleProgress(stream)
    progress.begin("compact", 4)
    progress.advance("messages orders: ok")
    progress.advance("leases sub: ok")
    progress.end()
    frames = stream.getvalue().split("\r\x1b[2K")
    assert frames[2].startswith("compact [" + "#" * 7 + " " * 23 + "] 1/4 messages orders: ok")
    assert "] 2/4 leases sub: ok" in frames[3]
    assert stream.getvalue().endswith("\n")


def test_log_progress_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    progress = LogProgress(interval_s=3600)
    with caplog.at_level(logging.INFO, logger="lakepubsub.scheduler"):
        progress.begin("gc", 3)
        for item in ("a", "b", "c"):
            progress.advance(item)
        progress.end()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and messages[0].startswith("gc: 3/3 done in")


def test_console_progress_names_a_phase_on_a_line_of_its_own() -> None:
    """A step between items (Spark starting) is named instead of a frozen bar, and what
    it prints lands below the bar, not inside its line."""
    stream = io.StringIO()
    progress = ConsoleProgress(stream)
    progress.begin("compact", 32)
    for i in range(15):
        progress.advance(f"item {i}")
    progress.phase("starting Spark")
    stream.write("WARN NativeCodeLoader: Unable to load native-hadoop library\n")  # the JVM
    progress.advance("item 15")
    progress.end()
    lines = stream.getvalue().split("\n")
    bar_line = next(line for line in lines if "starting Spark" in line)
    assert bar_line.endswith("] 15/32 starting Spark…")
    assert "WARN" not in bar_line
    assert any(line.startswith("WARN NativeCodeLoader") for line in lines)


def test_a_job_names_the_spark_start_in_its_progress(
    spark: SparkSession, local_lake: LakeSpec
) -> None:
    """JobContext starts (here: joins) Spark on first use and says so first."""
    phases: list[str] = []

    class Recorder(NullProgress):
        def phase(self, text: str) -> None:
            phases.append(text)

    with JobContext(local_lake.settings(), progress=Recorder()) as ctx:
        assert ctx.spark is spark
        assert ctx.spark is spark
    assert phases == ["starting Spark"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_records_do_not_print_into_the_bar() -> None:
    terminal = Terminal()
    handler = logging.StreamHandler(terminal)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        progress = default_progress(terminal)
        assert isinstance(progress, ConsoleProgress)
        progress.begin("truncate", 2)
        progress.advance("policies of projects/p/topics/t")
        logging.getLogger("lakepubsub.jobs.truncate").warning("kept every message")
        progress.advance("messages of projects/p/topics/t")
        progress.end()
    finally:
        root.removeHandler(handler)
    lines = [line.split("\x1b[2K")[-1] for line in terminal.getvalue().split("\n")]
    assert "kept every message" in lines
    assert not any("policies of" in line and "kept" in line for line in lines)
