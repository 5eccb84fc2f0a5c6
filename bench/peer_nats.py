"""The NATS JetStream peer: the shared workload against a local nats-server.

Every run has a fresh ``nats-server`` (``bench/harness/nats_server.py``) and a
fresh stream with the default limits retention; consumers share one durable
pull consumer with explicit acks and ``ack_wait`` the workload's ack deadline.
Every client is its own (spawned) process with one asyncio loop and one
connection. JetStream has no batch calls:

- "publish a batch of N": N ``publish_async`` calls pipelined, then wait for
  all N stream acks before the next batch.
- "pull up to N": ``fetch(batch=N)``; the latency consumer, whose stream is
  mostly empty, fetches one message (waiting for it), then what the server
  reports pending, up to N (``fetch(N)`` on an empty stream waits for all N).
- "acknowledge": one ``ack()`` per message, then one ``flush()`` per pulled
  batch, a round trip after which the server has read its acks. After every
  run: every message acked, none pending, none redelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from bench import workload as w
from bench.clients import RUN_TIMEOUT_S, Context, Report, run_clients, span_s
from bench.harness.lakepubsub_server import BenchError
from bench.harness.meter import ProcessUsage
from bench.harness.nats_server import NatsServer

SYSTEM = "nats-jetstream"
STREAM = "BENCH"
SUBJECT = "bench.messages"
DURABLE = "bench-pull"
# Carries the publisher's send time (time.monotonic_ns: one clock for all
# processes on a Linux machine) to the latency consumer.
SENT_NS_HEADER = "Bench-Sent-Ns"
# How long an idle fetch waits before a client checks whether it is done.
FETCH_TIMEOUT_S = 1.0
# Time allowed for the server to show every ack after the clients finish.
ACKS_SETTLE_TIMEOUT_S = 10.0
# Backlogs are published by this many processes, in batches of this size.
PREFILL_CLIENTS = 2
PREFILL_BATCH = 1000
_NS_PER_MS = 1_000_000


# --- client processes ---------------------------------------------------------


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

    async def run(self, ctx: Context) -> Report:
        async with _connect(self.url) as (_, js):
            batch_ms: list[float] = []
            clock = await ctx.start_async()
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

    async def run(self, ctx: Context) -> Report:
        async with _connect(self.url) as (nc, js):
            sub = await js.pull_subscribe_bind(durable=DURABLE, stream=STREAM)
            received = redelivered = 0
            clock = await ctx.start_async()
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

    async def run(self, ctx: Context) -> Report:
        async with _connect(self.url) as (_, js):
            interval_ns = 1_000_000_000 / self.rate_per_s
            acks = []
            clock = await ctx.start_async()
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

    async def run(self, ctx: Context) -> Report:
        async with _connect(self.url) as (nc, js):
            sub = await js.pull_subscribe_bind(durable=DURABLE, stream=STREAM)
            latencies_ms: list[float] = []
            clock = await ctx.start_async()
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


# --- stream and consumer setup ------------------------------------------------


async def create_stream(url: str) -> None:
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


async def stream_messages(url: str) -> int:
    async with _connect(url) as (_, js):
        info = await js.stream_info(STREAM)
        return info.state.messages


async def check_all_acked(url: str, total: int, *, durable: str = DURABLE) -> None:
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
) -> tuple[list[Report], ProcessUsage]:
    """Publish from one process per ``per_client`` entry; check the stream stored them all."""
    jobs = [
        _PublishJob(
            url=server.url,
            batch_size=batch_size,
            messages=messages,
            first_index=sum(per_client[:c]),
        )
        for c, messages in enumerate(per_client)
    ]
    reports, usage = run_clients(jobs, server_pid=server.pid)
    stored = asyncio.run(stream_messages(server.url))
    if stored != sum(per_client):
        raise BenchError(f"stream holds {stored} messages, {sum(per_client)} were published")
    return reports, usage


def publish_backlog(server: NatsServer, messages: int) -> None:
    per_client = [len(range(c, messages, PREFILL_CLIENTS)) for c in range(PREFILL_CLIENTS)]
    _publish(server, batch_size=PREFILL_BATCH, per_client=per_client)


# --- the cases ----------------------------------------------------------------


def run_publish(server: NatsServer, case: w.PublishCase) -> list[w.Result]:
    """One run of a publish case on a fresh stream."""
    asyncio.run(create_stream(server.url))
    reports, usage = _publish(
        server, batch_size=case.batch_size, per_client=[case.messages_per_client] * case.clients
    )
    total = case.total_messages
    return [
        *w.publish_figures(
            SYSTEM,
            case.name,
            seconds=span_s(reports),
            messages=total,
            round_trips_ms=[ms for r in reports for ms in r.latencies_ms],
        ),
        *_usage(case.name, usage, reports, total),
    ]


def run_consume(
    server: NatsServer, case: w.PullCase | w.DrainCase, ack_deadline_s: int
) -> list[w.Result]:
    """One run of a pull + ack or drain case: publish the backlog (untimed), then drain it."""
    backlog = case.backlog_messages
    asyncio.run(create_stream(server.url))
    publish_backlog(server, backlog)
    asyncio.run(_create_consumer(server.url, ack_deadline_s=ack_deadline_s))
    job = _ConsumeJob(
        url=server.url, max_messages_per_pull=case.max_messages_per_pull, total=backlog
    )
    reports, usage = run_clients([job] * case.consumers, server_pid=server.pid)
    asyncio.run(check_all_acked(server.url, backlog))
    received = sum(r.messages for r in reports)
    if received != backlog:
        raise BenchError(f"consumers received {received} of {backlog} messages")
    drain = isinstance(case, w.DrainCase)
    return [
        *w.consume_figures(
            SYSTEM, case.name, seconds=span_s(reports), messages=received, drain=drain
        ),
        *_usage(case.name, usage, reports, received),
    ]


def run_latency(
    server: NatsServer,
    case: w.LatencyCase,
    ack_deadline_s: int,
    *,
    samples: list[float] | None = None,
) -> list[w.Result]:
    """One run of the latency case: publish at a fixed rate, measure publish → receive."""
    asyncio.run(create_stream(server.url))
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
    reports, usage = run_clients([consumer, publisher], server_pid=server.pid)
    received, sent = reports if reports[0].latencies_ms else reversed(reports)
    asyncio.run(check_all_acked(server.url, total))
    if samples is not None:
        samples.extend(received.latencies_ms)
    return [
        *w.latency_figures(
            SYSTEM,
            case.name,
            received.latencies_ms,
            achieved_rate=total / (sent.end_s - sent.start_s),
        ),
        *_usage(case.name, usage, reports, total),
    ]


def run_all(
    workload: w.Workload,
    *,
    progress: Callable[[str], None] | None = None,
    latency_samples: list[float] | None = None,
) -> list[w.Result]:
    """Every case of the workload, ``workload.runs`` times each, a fresh server per run."""
    return w.run_cases(
        workload,
        system=SYSTEM,
        server=NatsServer,
        publish=run_publish,
        consume=run_consume,
        latency=run_latency,
        progress=progress,
        latency_samples=latency_samples,
    )


def _usage(
    case: str, usage: ProcessUsage, reports: Sequence[Report], messages: int
) -> list[w.Result]:
    client_cpu_s = sum(r.cpu_s for r in reports)
    return w.usage_figures(SYSTEM, case, usage, client_cpu_s=client_cpu_s, messages=messages)
