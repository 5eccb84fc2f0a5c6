"""Floors: what the maintained parts cost before lakepubsub does any work.

Single-message publish to servers that do nothing (uvicorn with an ASGI app; a grpcio
server with the gRPC door's options), batched publish and a StreamingPull drain against
that grpcio server, beside JetStream in the same run with the same clients; and in
process: protobuf, parquet and lakepubsub's own commit. What each figure is:
bench/README.md, "Floors". Writes ``floors.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import os
import platform
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from google.pubsub_v1.types import (
    AcknowledgeRequest,
    ModifyAckDeadlineRequest,
    PublishRequest,
    PublishResponse,
    PubsubMessage,
    ReceivedMessage,
    StreamingPullRequest,
    StreamingPullResponse,
)

from api.grpc.door import SERVER_OPTIONS
from bench import gobuild, grpc_bench, peer_nats, report
from bench import peer_lakepubsub as lps
from bench import workload as w
from bench.clients import span_s
from bench.harness import scratch
from bench.harness.lakepubsub_server import BenchError
from bench.harness.meter import ProcessUsage
from bench.harness.nats_server import NatsServer
from bench.harness.ports import free_port, wait_for_port
from lakepubsub import Engine, PublishMessage, Topic, TopicName
from lakepubsub._lake import table_schemas
from lakepubsub.settings import Settings

FLOOR = "empty server"
TOPIC = "projects/bench/topics/floors"
PAYLOAD_BYTES = 1024
# Messages of one StreamingPull response in the protobuf case (the door sends up to this many).
RESPONSE_MESSAGES = 1000
# Repetitions of the in-process measurements; the best is kept (the floor, not the noise).
REPEATS = 30
SERVER_START_S = 30.0


def _ids(counter: list[int], n: int) -> list[str]:
    first = counter[0]
    counter[0] += n
    return [str(i) for i in range(first, first + n)]


async def empty_rest_app(
    scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[dict[str, Any]], Any]
) -> None:
    """ASGI (served with ``--lifespan off``): answer a POST with an id per message of its
    body, anything else (the clients' health check) with an empty object."""
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["method"] == "POST":
        out = orjson.dumps({"messageIds": _ids(_REST_COUNTER, len(orjson.loads(body)["messages"]))})
    else:
        out = b"{}"
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


_REST_COUNTER = [0]


class _EmptySubscriber:
    """StreamingPull, Acknowledge and ModifyAckDeadline that do nothing but what the
    protocol needs: the stream sends ``backlog`` distinct 1 KiB messages, at most the
    client's ``max_outstanding_messages`` unacked, each response up to
    RESPONSE_MESSAGES; an ack frees room by its count of ids (none is looked at); a
    deadline change is parsed and answered."""

    def __init__(self, backlog: int) -> None:
        self.backlog, self.sent, self.out = backlog, 0, 0
        self.room = asyncio.Event()
        self.types = (
            StreamingPullRequest.pb(), StreamingPullResponse.pb(),
            AcknowledgeRequest.pb(), ModifyAckDeadlineRequest.pb(),
        )  # fmt: skip

    async def streaming_pull(self, raw: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        request_type, response_type = self.types[0], self.types[1]
        first = request_type.FromString(await anext(raw))
        limit = first.max_outstanding_messages or 1000

        async def read() -> None:  # later requests (keepalive pings, acks on the stream)
            async for chunk in raw:
                request_type.FromString(chunk)

        reader = asyncio.ensure_future(read())
        payload = b"x" * PAYLOAD_BYTES
        try:
            while True:
                count = min(limit - self.out, self.backlog - self.sent, RESPONSE_MESSAGES)
                if count <= 0:
                    self.room.clear()
                    await self.room.wait()
                    continue
                start, now_us = self.sent, time.time_ns() // 1000
                self.sent, self.out = start + count, self.out + count
                response = response_type()
                add = response.received_messages.add
                for i in range(start, start + count):
                    message = add(ack_id=f"floor-m{i}-{i}").message
                    message.data = payload
                    message.message_id = str(i)
                    stamp = message.publish_time
                    stamp.seconds, stamp.nanos = divmod(now_us, 1_000_000)
                    stamp.nanos *= 1000
                await context.write(bytes(response.SerializeToString()))
        finally:
            reader.cancel()

    async def acknowledge(self, raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        self.out -= len(self.types[2].FromString(raw).ack_ids)
        self.room.set()
        return b""

    async def modify_ack_deadline(
        self, raw: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> bytes:
        self.types[3].FromString(raw)
        return b""


async def _serve_empty_grpc(port: int, backlog: int) -> None:
    counter = [0]
    request_type, response_type = PublishRequest.pb(), PublishResponse.pb()

    async def publish(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        request = request_type.FromString(raw)
        response = response_type(message_ids=_ids(counter, len(request.messages)))
        return bytes(response.SerializeToString())

    subscriber = _EmptySubscriber(backlog)
    handlers = (
        grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Publisher",
            {"Publish": grpc.unary_unary_rpc_method_handler(publish)},
        ),
        grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Subscriber",
            {
                "StreamingPull": grpc.stream_stream_rpc_method_handler(subscriber.streaming_pull),
                "Acknowledge": grpc.unary_unary_rpc_method_handler(subscriber.acknowledge),
                "ModifyAckDeadline": grpc.unary_unary_rpc_method_handler(
                    subscriber.modify_ack_deadline
                ),
            },
        ),
    )
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers(handlers)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


@contextmanager
def server_process(*command: str) -> Iterator[tuple[int, int]]:
    """A server subprocess, its port appended to ``command``, until it listens: (pid, port)."""
    port = free_port()  # below the ephemeral range: no port-0 bind takes it meanwhile
    process = subprocess.Popen([*command, str(port)], cwd=Path(__file__).resolve().parent.parent)
    try:
        wait_for_port(port, SERVER_START_S, process)
        yield process.pid, port
    finally:
        process.kill()
        process.wait()


# The empty REST server: uvicorn as ``lakepubsub serve`` runs it, with ``empty_rest_app``.
EMPTY_REST = (
    *(sys.executable, "-m", "uvicorn", "bench.floors:empty_rest_app"),
    *("--loop", "uvloop", "--http", "httptools", "--lifespan", "off"),
    *("--no-access-log", "--log-level", "warning", "--port"),
)


def _figures(system: str, case: str, elapsed_s: float, latencies_ms: Sequence[float], n: int,
             server_cpu_s: float, client_cpu_s: float) -> list[w.Result]:  # fmt: skip
    if len(latencies_ms) != n:
        raise BenchError(f"{case}: {len(latencies_ms)} round trips for {n} publishes")
    publish = w.publish_figures(
        system, case, seconds=elapsed_s, messages=n, round_trips_ms=latencies_ms
    )
    return [
        *publish[:3],  # all but the message count
        w.result(
            system, case, w.SERVER_CPU_PER_MILLION, w.CPU_S_PER_MILLION, server_cpu_s / n * 1e6
        ),
        w.result(
            system, case, w.CLIENT_CPU_PER_MILLION, w.CPU_S_PER_MILLION, client_cpu_s / n * 1e6
        ),
    ]


def rest_pair(clients: int, n: int) -> list[w.Result]:
    """JetStream through nats-py, then the empty REST server through the REST clients."""
    per_client, found = n // clients, []
    with NatsServer() as server:
        asyncio.run(peer_nats.create_stream(server.url))
        found.append((peer_nats.SYSTEM, *peer_nats._publish(server, 1, [per_client] * clients)))
    with server_process(*EMPTY_REST) as (pid, port):
        published = lps.publish(
            f"http://127.0.0.1:{port}", pid, TOPIC, batch_size=1, per_client=[per_client] * clients
        )
        found.append((FLOOR, *published))
    case = f"rest publish batch=1 clients={clients}"
    return [
        figure
        for system, reports, usage in found
        for figure in _figures(system, case, span_s(reports),
                               [ms for r in reports for ms in r.latencies_ms], per_client * clients,
                               usage.cpu_s, sum(r.cpu_s for r in reports))
    ]  # fmt: skip


def _empty_grpc(backlog: int = 0) -> AbstractContextManager[tuple[int, int]]:
    """The empty gRPC server; its StreamingPull sends ``backlog`` messages."""
    return server_process(sys.executable, "-m", "bench", "floors", "--backlog", str(backlog),
                   "--serve-grpc")  # fmt: skip


def _publish_both(
    binary: Path, publish: list[str]
) -> list[tuple[str, tuple[grpc_bench.LoadgenReport, ProcessUsage]]]:
    """``bench/loadgen`` publishing with ``publish`` to JetStream (nats.go), then to
    the empty gRPC server (Google's Go client): each system's report and usage."""
    found = []
    with NatsServer() as server:
        asyncio.run(peer_nats.create_stream(server.url))
        nats = ["-system", "nats", "-nats-url", server.url, "-subject", peer_nats.SUBJECT]
        ran = grpc_bench.run_loadgen(binary, nats + publish, server_pid=server.pid)
        found.append((peer_nats.SYSTEM, ran))
    with _empty_grpc() as (pid, port):
        env = {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{port}"}
        args = ["-system", "pubsub", "-topic", TOPIC, *publish]
        found.append((FLOOR, grpc_bench.run_loadgen(binary, args, server_pid=pid, env=env)))
    return found


def grpc_pair(binary: Path, publishers: int, n: int) -> list[w.Result]:
    """JetStream, then the empty gRPC server, each through ``bench/loadgen``."""
    publish = ["-mode", "publish", "-publishers", str(publishers), "-messages", str(n), "-single"]
    results, case = [], f"grpc publish single publishers={publishers}"
    for system, (ran, usage) in _publish_both(binary, publish):
        if ran["published"] != n:
            raise BenchError(f"{ran['published']} of {n} publishes confirmed")
        results += _figures(
            system, case, ran.elapsed_s, ran.latencies_ms, n, usage.cpu_s, ran.cpu_s
        )
    return results


def grpc_batched_pair(binary: Path, publishers: int, n: int) -> list[w.Result]:
    """The gRPC bench's batched publish case (the client's default batching), against
    JetStream and the empty gRPC server: throughput and CPU per message."""
    publish = ["-mode", "publish", "-publishers", str(publishers), "-messages", str(n)]
    results, case = [], f"grpc publish batching=default publishers={publishers}"
    for system, (ran, usage) in _publish_both(binary, publish):
        if ran["published"] != n:
            raise BenchError(f"{ran['published']} of {n} publishes confirmed")
        results += [
            w.result(system, case, w.THROUGHPUT, w.MSGS_PER_S, n / ran.elapsed_s),
            *w.usage_figures(system, case, usage, client_cpu_s=ran.cpu_s, messages=n),
        ]
    return results


def grpc_drain_pair(binary: Path, n: int) -> list[w.Result]:
    """The gRPC bench's drain case: JetStream's push consumer (as ``bench grpc`` runs it),
    then the empty gRPC server's StreamingPull, through the same Go client settings."""
    workload = dataclasses.replace(grpc_bench.full(), drain_messages=n, runs=1)
    with NatsServer() as server:
        side = peer_nats.Side(server, workload.ack_deadline_s, durable=grpc_bench.PUSH_DURABLE)
        results = grpc_bench.run_drain(side, binary, workload)
    with _empty_grpc(n) as (pid, port):
        env = {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{port}"}
        args = ["-system", "pubsub", "-subscription", "projects/bench/subscriptions/floors",
                "-mode", "drain", "-messages", str(n),
                *grpc_bench.receiving_args(workload)]  # fmt: skip
        ran, usage = grpc_bench.run_loadgen(binary, args, server_pid=pid, env=env)
    if ran["distinct"] != n or ran["redelivered"]:
        raise BenchError(f"{ran['distinct']} of {n} messages received")
    case = workload.drain_case
    return [
        *(r for r in results if r.metric in DRAIN_METRICS),
        w.result(FLOOR, case, w.THROUGHPUT, w.MSGS_PER_S, n / ran.elapsed_s),
        *w.usage_figures(FLOOR, case, usage, client_cpu_s=ran.cpu_s, messages=n),
    ]


DRAIN_METRICS = (
    w.THROUGHPUT,
    w.SERVER_CPU_PER_MILLION,
    w.SERVER_PEAK_RSS,
    w.CLIENT_CPU_PER_MILLION,
)


def _best_s(step: Callable[[], object]) -> float:
    # timeit turns the garbage collector off unless its setup turns it back on.
    return min(timeit.repeat(step, "gc.enable()", number=1, repeat=REPEATS))


def protobuf_us_per_message() -> float:
    """Build and serialize a StreamingPull response of RESPONSE_MESSAGES messages, per message."""
    response_type = StreamingPullResponse.pb()
    payloads = [os.urandom(PAYLOAD_BYTES) for _ in range(RESPONSE_MESSAGES)]
    ack_ids = [f"{i:032x}" for i in range(RESPONSE_MESSAGES)]

    def built_by_add() -> bytes:
        response = response_type()
        for ack_id, data in zip(ack_ids, payloads, strict=True):
            received = response.received_messages.add()
            received.ack_id = ack_id
            received.message.data = data
            received.message.message_id = ack_id
        return bytes(response.SerializeToString())

    def built_by_constructors() -> bytes:
        received_type, message_type = ReceivedMessage.pb(), PubsubMessage.pb()
        response = response_type(
            received_messages=[
                received_type(ack_id=a, message=message_type(data=d, message_id=a))
                for a, d in zip(ack_ids, payloads, strict=True)
            ]
        )
        return bytes(response.SerializeToString())

    best = min(_best_s(built_by_add), _best_s(built_by_constructors))
    return best / RESPONSE_MESSAGES * 1e6


def parquet_us() -> float:
    """pyarrow writing one 1 KiB message of the messages schema to memory."""
    row = pa.table(
        {
            "offset": [0],
            "message_id": ["0"],
            "publish_time": pa.array([0], table_schemas.UTC_US),
            "data": [os.urandom(PAYLOAD_BYTES)],
            "attributes": pa.array([[]], table_schemas.MESSAGES.field("attributes").type),
            "ordering_key": [""],
            "size": [PAYLOAD_BYTES],
        },
        schema=table_schemas.MESSAGES,
    )
    return _best_s(lambda: pq.write_table(row, io.BytesIO())) * 1e6


def commit_figures(n: int) -> tuple[float, float]:
    """lakepubsub's single-message publish in a loop: (p50 µs, process CPU µs per publish)."""
    directory = scratch.directory("bench-floors-")
    try:
        with Engine(Settings(lake=str(directory / "lake"))) as engine:
            topic = TopicName("bench", "floors")
            engine.create_topic(Topic(topic))
            message = [PublishMessage(os.urandom(PAYLOAD_BYTES))]
            for _ in range(n // 10):  # warm up: the table handle, the file index
                engine.publish(topic, message)
            took: list[float] = []
            cpu_before = time.process_time()
            for _ in range(n):
                started = time.perf_counter()
                engine.publish(topic, message)
                took.append(time.perf_counter() - started)
            cpu_s = time.process_time() - cpu_before
    finally:
        scratch.release(directory)
    return w.percentile(took, 0.50) * 1e6, cpu_s / n * 1e6


@dataclass(frozen=True)
class Sizes:
    rest_single: int
    rest_eight: int
    grpc_single: int
    grpc_eight: int
    grpc_batched: int
    grpc_drain: int
    commits: int
    runs: int


# The batched publish and drain sizes are the gRPC bench's own (bench/grpc_bench.py).
FULL = Sizes(rest_single=3000, rest_eight=8000, grpc_single=5000, grpc_eight=8000,
             grpc_batched=200_000, grpc_drain=1_000_000, commits=2000, runs=3)  # fmt: skip
QUICK = Sizes(rest_single=200, rest_eight=400, grpc_single=200, grpc_eight=400,
              grpc_batched=16_000, grpc_drain=20_000, commits=200, runs=1)  # fmt: skip


def run(sizes: Sizes, progress: Callable[[str], None] = print) -> list[w.Result]:
    binary = gobuild.build()
    raw: list[w.Result] = []
    steps: list[tuple[str, Callable[[], list[w.Result]]]] = [
        ("rest, 1 client", lambda: rest_pair(1, sizes.rest_single)),
        ("rest, 8 clients", lambda: rest_pair(8, sizes.rest_eight)),
        ("grpc, 1 publisher", lambda: grpc_pair(binary, 1, sizes.grpc_single)),
        ("grpc, 8 publishers", lambda: grpc_pair(binary, 8, sizes.grpc_eight)),
        ("grpc, batched", lambda: grpc_batched_pair(binary, 8, sizes.grpc_batched)),
        ("grpc, drain", lambda: grpc_drain_pair(binary, sizes.grpc_drain)),
        ("in process", lambda: _in_process(sizes.commits)),
    ]
    for i in range(sizes.runs):
        for name, step in steps:
            progress(f"floors: {name} (run {i + 1}/{sizes.runs})")
            raw += step()
    return w.merge_runs(raw)


IN_PROCESS = "in process"
PROTOBUF = "protobuf: build and serialize one ReceivedMessage of 1 KiB (in a response of 1,000)"
PARQUET = "parquet: write one 1 KiB message of the messages schema to memory"
COMMIT_P50 = "commit: Engine.publish of one message, p50"
COMMIT_CPU = "commit: Engine.publish of one message, process CPU"
MICROSECONDS = "µs"


def _in_process(commits: int) -> list[w.Result]:
    p50_us, cpu_us = commit_figures(commits)
    found = [
        (PROTOBUF, protobuf_us_per_message()),
        (PARQUET, parquet_us()),
        (COMMIT_P50, p50_us),
        (COMMIT_CPU, cpu_us),
    ]
    return [w.Result(FLOOR, IN_PROCESS, name, MICROSECONDS, (value,)) for name, value in found]


def write_report(
    results: Sequence[w.Result], *, command: str, minutes: float, load: Sequence[float]
) -> list[str]:
    lines = [
        *report.header(
            "Floors: what the maintained parts cost before lakepubsub does any work",
            command=command,
            about=f"{minutes:.1f} min; {platform.platform()}; load average {report.load(load)} "
            "at the start. What each figure is: `bench/floors.py`. Median [min-max] of the runs.",
        ),
        "## Against a server that does nothing, with the benchmark's own clients",
        "",
        "`empty server`: for `rest` uvicorn (uvloop, httptools) with an ASGI app that parses "
        "the body and answers ids, driven by the REST clients of `bench/peer_lakepubsub.py`; "
        "for `grpc` a grpcio asyncio server with lakepubsub's door options whose Publish "
        "answers ids and whose StreamingPull sends distinct 1 KiB messages within the "
        "client's flow control (acks free room by their count), driven by `bench/loadgen` "
        "(Google's Go client, the gRPC bench's settings). NATS JetStream stores "
        "every message, through nats-py (`rest` rows) and nats.go (`grpc` rows). CPU is user "
        "+ system seconds per million messages (µs per message).",
        "",
        *report.side_by_side(
            results, FLOOR, peer_nats.SYSTEM, ("empty server", "NATS JetStream"),
            lambda key: key[0] != IN_PROCESS,
        ),
    ]  # fmt: skip
    in_process = [(r.metric, r.unit, report.cell(r)) for r in results if r.case == IN_PROCESS]
    return [
        *lines,
        "",
        "## In process",
        "",
        *report.table(["floor", "unit", "value"], in_process, right=2),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.parser(__doc__ or "", quick="tiny sizes, one run (CI)", runs=True)
    parser.add_argument("--serve-grpc", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--backlog", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_grpc is not None:
        asyncio.run(_serve_empty_grpc(args.serve_grpc, args.backlog))
        return
    sizes = QUICK if args.quick else FULL
    if args.runs is not None:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    load = os.getloadavg()
    started = time.monotonic()
    results = run(sizes)
    lines = write_report(
        results,
        command=report.command("floors", argv),
        minutes=(time.monotonic() - started) / 60,
        load=load,
    )
    report.write(args.out, "floors.md", lines)
