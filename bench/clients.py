"""Client processes for the side-by-side cases, the same for both peers.

Every client is its own process; all clients of a run wait at one barrier and
start together, and the server is metered from the common start until the last
client reports. A job is a module's function whose last argument is the run's
``Context``, the others bound with ``functools.partial`` (so that it pickles):
``job(ctx)`` returns a ``Report`` (or a coroutine of one, run on its own event loop).
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing as mp
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from typing import Any, TypeAlias

from bench.harness.lakepubsub_server import BenchError
from bench.harness.meter import ProcessMeter, ProcessUsage

# Building the request bodies of 200,000 messages takes a few seconds.
READY_TIMEOUT_S = 120.0
# Bounds one run of one case, however large; a hung run fails instead.
RUN_TIMEOUT_S = 900.0
JOIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Report:
    """What one client process did: its timed span and what it saw."""

    start_s: float
    end_s: float
    messages: int
    # This process's CPU time (user + system) over the timed span.
    cpu_s: float
    redelivered: int = 0
    latencies_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class _Failure:
    traceback: str


# What each client process sends back: its job's index, and its report or failure.
_Reports: TypeAlias = "Queue[tuple[int, Report | _Failure]]"


@dataclass(frozen=True)
class Context:
    """What every client process shares with the parent."""

    barrier: Barrier
    # Messages acked so far by all consumers of the run.
    acked: Synchronized[int]

    def start(self) -> Clock:
        """Wait until every client is ready; all start together."""
        self.barrier.wait(READY_TIMEOUT_S)
        return Clock(start_s=time.monotonic(), start_cpu_s=time.process_time())

    async def start_async(self) -> Clock:
        return await asyncio.to_thread(self.start)

    def add_acked(self, n: int) -> None:
        with self.acked.get_lock():
            self.acked.value += n


@dataclass(frozen=True)
class Clock:
    start_s: float
    start_cpu_s: float

    def report(self, messages: int, *, end_s: float | None = None, **details: Any) -> Report:
        """What this client did from its start until ``end_s`` (default: now)."""
        return Report(
            start_s=self.start_s,
            end_s=time.monotonic() if end_s is None else end_s,
            messages=messages,
            cpu_s=time.process_time() - self.start_cpu_s,
            **details,
        )


def span_s(reports: Sequence[Report]) -> float:
    return max(r.end_s for r in reports) - min(r.start_s for r in reports)


def _client_main(
    index: int, job: Callable[[Context], Any], ctx: Context, reports: _Reports
) -> None:
    try:
        done = job(ctx)
        reports.put((index, asyncio.run(done) if inspect.iscoroutine(done) else done))
    except BaseException:
        ctx.barrier.abort()
        reports.put((index, _Failure(traceback.format_exc())))


def run_clients(
    jobs: Sequence[Callable[[Context], Any]], *, server_pid: int, preload: str | None = None
) -> tuple[list[Report], ProcessUsage]:
    """Run each job in its own process; start them together; meter the server. The
    reports are in the jobs' order.

    With ``preload`` (a module), processes fork from a clean forkserver that has
    it imported: starting eight takes a fraction of a second instead of
    seconds. Without it they are spawned.
    """
    if preload:
        context = mp.get_context("forkserver")
        context.set_forkserver_preload([preload])
    else:
        context = mp.get_context("spawn")  # type: ignore[assignment]
    ctx = Context(barrier=context.Barrier(len(jobs) + 1), acked=context.Value("q", 0))
    reports: _Reports = context.Queue()
    processes = [
        context.Process(target=_client_main, args=(i, job, ctx, reports), daemon=True)
        for i, job in enumerate(jobs)
    ]
    for process in processes:
        process.start()
    try:
        done: dict[int, Report] = {}
        try:
            ctx.barrier.wait(READY_TIMEOUT_S)
        except threading.BrokenBarrierError:
            # A client that failed to start says why; otherwise one is stuck.
            _collect(reports, processes, done, expected=1, timeout_s=READY_TIMEOUT_S)
            raise BenchError("client processes did not start") from None
        with ProcessMeter(server_pid) as meter:
            _collect(reports, processes, done, expected=len(jobs))
        return [done[i] for i in range(len(jobs))], meter.usage
    except BaseException:
        # The others would wait for messages that will never come.
        for process in processes:
            process.kill()
        raise
    finally:
        for process in processes:
            process.join(timeout=JOIN_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()


def _collect(
    reports: _Reports,
    processes: Sequence[mp.process.BaseProcess],
    done: dict[int, Report],
    *,
    expected: int,
    timeout_s: float = RUN_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while len(done) < expected:
        try:
            index, report = reports.get(timeout=1.0)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in processes):
                raise BenchError("a client process died without a report") from None
            if time.monotonic() > deadline:
                raise BenchError(f"clients did not finish in {timeout_s} s") from None
            continue
        if isinstance(report, _Failure):
            raise BenchError(f"a client process failed:\n{report.traceback}")
        done[index] = report
