"""The NATS JetStream peer: the shared workload against a local nats-server.

Every run has a fresh ``nats-server`` (``bench/harness/nats_server.py``) and stream;
consumers share one durable pull consumer with explicit acks. How each workload step
maps onto JetStream, which has no batch calls: bench/README.md, "How each system is
driven". After every run: every message acked, none pending, none redelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from bench import workload as w
from bench.clients import RUN_TIMEOUT_S, Context, Report, run_clients
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


@contextlib.asynccontextmanager
async def _connect(url: str) -> AsyncIterator[tuple[NatsClient, JetStreamContext]]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        yield nc, nc.jetstream()
    finally:
        await nc.close()


@contextlib.asynccontextmanager
async def _pull_consumer(
    url: str,
) -> AsyncIterator[tuple[NatsClient, JetStreamContext.PullSubscription]]:
    """A connection, and a subscription bound to the run's durable pull consumer."""
    async with _connect(url) as (nc, js):
        yield nc, await js.pull_subscribe_bind(durable=DURABLE, stream=STREAM)


async def _publisher(url: str, batch_size: int, first: int, end: int, ctx: Context) -> Report:
    """Publish messages ``first`` to ``end`` in batches, each once the last is stored."""
    async with _connect(url) as (_, js):
        batch_ms: list[float] = []
        clock = await ctx.start_async()
        for a in range(first, end, batch_size):
            sent = time.monotonic()
            b = min(a + batch_size, end)
            await asyncio.gather(
                *[await js.publish_async(SUBJECT, w.payload(i)) for i in range(a, b)]
            )
            batch_ms.append((time.monotonic() - sent) * 1000)
        return clock.report(end - first, latencies_ms=tuple(batch_ms))


async def _consumer(url: str, max_messages_per_pull: int, total: int, ctx: Context) -> Report:
    """Pull and ack until the run's consumers together acked ``total`` messages."""
    async with _pull_consumer(url) as (nc, sub):
        received = redelivered = 0
        clock = await ctx.start_async()
        last_acked_s = clock.start_s
        while ctx.acked.value < total:
            try:
                msgs = await sub.fetch(max_messages_per_pull, timeout=FETCH_TIMEOUT_S)
            except TimeoutError:  # nats-py raises its own subclass or the builtin
                continue
            for msg in msgs:
                await msg.ack()
            # A round trip: the server has read this batch's acks.
            await nc.flush()
            last_acked_s = time.monotonic()
            again = sum(1 for msg in msgs if msg.metadata.num_delivered > 1)
            received, redelivered = received + len(msgs), redelivered + again
            ctx.add_acked(len(msgs) - again)
        # Not the time of leaving the loop: that can be an idle fetch later.
        return clock.report(received, end_s=last_acked_s, redelivered=redelivered)


async def _latency_publisher(url: str, rate_per_s: int, messages: int, ctx: Context) -> Report:
    """One message per publish at ``rate_per_s``, each stamped with its send time."""
    async with _connect(url) as (_, js):
        acks = []
        clock = await ctx.start_async()
        start_ns = time.monotonic_ns()
        for i in range(messages):
            await asyncio.sleep(w.due_s(start_ns, i, rate_per_s))
            headers = {SENT_NS_HEADER: str(time.monotonic_ns())}
            acks.append(await js.publish_async(SUBJECT, w.payload(i), headers=headers))
        await asyncio.gather(*acks)
        return clock.report(messages)


async def _latency_consumer(
    url: str, max_messages_per_pull: int, messages: int, deadline_s: float, ctx: Context
) -> Report:
    """Receive and ack ``messages``, each timed from its send stamp."""
    async with _pull_consumer(url) as (nc, sub):
        latencies_ms: list[float] = []
        clock = await ctx.start_async()
        while len(latencies_ms) < messages:
            if time.monotonic() - clock.start_s > deadline_s:
                raise BenchError(f"received {len(latencies_ms)} of {messages}")
            msgs = await _pull_available(sub, max_messages_per_pull)
            received_ns = time.monotonic_ns()
            for msg in msgs:
                sent_ns = int((msg.headers or {})[SENT_NS_HEADER])
                latencies_ms.append((received_ns - sent_ns) / w.NS_PER_MS)
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


def publish_backlog(server: NatsServer, messages: int) -> None:
    """``messages`` published (untimed) by ``PREFILL_CLIENTS`` processes; all stored."""
    per_client = [len(range(c, messages, PREFILL_CLIENTS)) for c in range(PREFILL_CLIENTS)]
    _publish(server, PREFILL_BATCH, per_client)
    check_stored(server, messages)


def check_stored(server: NatsServer, n: int) -> None:
    if (stored := asyncio.run(stream_messages(server.url))) != n:
        raise BenchError(f"stream holds {stored} messages, {n} were published")


def _publish(
    server: NatsServer, batch_size: int, per_client: Sequence[int]
) -> tuple[list[Report], ProcessUsage]:
    firsts = [sum(per_client[:c]) for c in range(len(per_client) + 1)]
    jobs = [
        partial(_publisher, server.url, batch_size, a, b) for a, b in itertools.pairwise(firsts)
    ]
    return run_clients(jobs, server_pid=server.pid)


class Side:
    """JetStream on a running server: a fresh stream per run (and for the REST runs a
    durable pull consumer), what the server holds afterwards, the figures a run adds."""

    system = SYSTEM

    def __init__(self, server: NatsServer, ack_deadline_s: int, *, durable: str = DURABLE) -> None:
        # ``durable``: the pull consumer this side creates, or the push consumer
        # ``bench/loadgen`` creates (any other name).
        self.server, self._ack_deadline_s, self._durable = server, ack_deadline_s, durable

    def prepare(self, *, receive: bool, backlog: int = 0) -> None:
        asyncio.run(create_stream(self.server.url))
        if backlog:
            publish_backlog(self.server, backlog)
        if receive and self._durable == DURABLE:
            asyncio.run(_create_consumer(self.server.url, ack_deadline_s=self._ack_deadline_s))

    def ran(self) -> None:
        pass

    def check_stored(self, n: int) -> None:
        check_stored(self.server, n)

    def check_acked(self, n: int) -> None:
        asyncio.run(check_all_acked(self.server.url, n, durable=self._durable))

    def figures(
        self, case: str, usage: ProcessUsage, client_cpu_s: float, messages: int
    ) -> list[w.Result]:
        return w.usage_figures(SYSTEM, case, usage, client_cpu_s=client_cpu_s, messages=messages)

    def loadgen_args(self) -> tuple[list[str], dict[str, str] | None]:
        """``bench/loadgen``'s arguments for this stream and its push consumer."""
        return ["-system", "nats", "-nats-url", self.server.url, "-stream", STREAM,
                "-subject", SUBJECT, "-consumer", self._durable,
                "-ack-wait", str(self._ack_deadline_s)], None  # fmt: skip

    def publish(self, case: w.PublishCase) -> tuple[list[Report], ProcessUsage]:
        return _publish(self.server, case.batch_size, [case.messages_per_client] * case.clients)

    def consume(self, case: w.PullCase) -> tuple[list[Report], ProcessUsage]:
        job = partial(_consumer, self.server.url, case.max_messages_per_pull, case.backlog_messages)
        return run_clients([job] * case.consumers, server_pid=self.server.pid)

    def latency(self, case: w.LatencyCase) -> tuple[list[Report], ProcessUsage]:
        total, url = case.total_messages, self.server.url
        deadline_s = case.duration_s + RUN_TIMEOUT_S / 10
        consumer = partial(_latency_consumer, url, case.max_messages_per_pull, total, deadline_s)
        publisher = partial(_latency_publisher, url, case.offered_rate_per_s, total)
        return run_clients([consumer, publisher], server_pid=self.server.pid)


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
        side=Side,
        progress=progress,
        latency_samples=latency_samples,
    )
