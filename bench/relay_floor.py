"""``python -m bench relay``: the S3 bench's many-topic load (Google's Go client,
one single-message Publish per message, one StreamingPull subscriber per topic)
against an in-memory Pub/Sub written on grpc.aio: the floor under
``lakepubsub serve`` for that load.

The relay keeps what is published in memory and streams it to the topic's
subscriber at once: no storage, no leases, no redelivery; acks and deadline
changes are parsed and answered. Its CPU is what grpcio and protobuf cost for
the calls the client makes (a Publish per message, the acks and receipt
deadline changes it sends per subscription, the stream's responses), which any
Python server on grpcio pays before it stores anything. With the clients' own
CPU it says how much of the machine is left for lakepubsub's work at a given
rate (docs/operations.md, "100 topics, through the Go client").
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.pubsub_v1.types import (
    AcknowledgeRequest,
    ModifyAckDeadlineRequest,
    PublishRequest,
    PublishResponse,
    StreamingPullRequest,
    StreamingPullResponse,
)

from api.grpc.door import SERVER_OPTIONS
from bench import report
from bench.floors import server_process
from bench.harness.meter import ProcessMeter
from bench.s3.__main__ import go_roles, json_line

# (topics, msgs/s per topic, seconds) of the full run and of the CI form.
FULL = ((20, 10.0, 60.0), (100, 5.0, 60.0), (100, 10.0, 60.0))
QUICK = ((5, 5.0, 3.0),)
# The subscribers' streams are open this long before the first publish.
SETTLE_S = 2.0
# How long past its seconds the subscriber waits for every message.
OVERRUN_S = 120.0


class Relay:
    """Publisher.Publish, Subscriber.StreamingPull, Acknowledge and ModifyAckDeadline
    over in-memory queues: a subscription takes what its topic of the same id gets."""

    def __init__(self) -> None:
        self.queues: dict[str, list[tuple[str, bytes, dict[str, str], int]]] = {}
        self.ready: dict[str, asyncio.Event] = {}
        self.ids = itertools.count()

    def _queue(self, name: str) -> str:
        key = name.rsplit("/", 1)[-1]
        if key not in self.queues:
            self.queues[key], self.ready[key] = [], asyncio.Event()
        return key

    async def publish(self, raw: bytes, context: Any) -> bytes:
        request = PublishRequest.pb().FromString(raw)
        key, now_us = self._queue(request.topic), time.time_ns() // 1000
        ids = []
        for message in request.messages:
            ids.append(str(next(self.ids)))
            self.queues[key].append((ids[-1], message.data, dict(message.attributes), now_us))
        self.ready[key].set()
        return bytes(PublishResponse.pb()(message_ids=ids).SerializeToString())

    async def streaming_pull(self, requests: Any, context: Any) -> None:
        first = StreamingPullRequest.pb().FromString(await anext(requests))
        key = self._queue(first.subscription)

        async def read() -> None:  # acks, deadline changes and pings on the stream
            async for chunk in requests:
                StreamingPullRequest.pb().FromString(chunk)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                await self.ready[key].wait()
                self.ready[key].clear()
                taken, self.queues[key] = self.queues[key], []
                if taken:
                    await context.write(_response(key, taken))
        finally:
            reader.cancel()

    async def acknowledge(self, raw: bytes, context: Any) -> bytes:
        AcknowledgeRequest.pb().FromString(raw)
        return b""

    async def modify_ack_deadline(self, raw: bytes, context: Any) -> bytes:
        ModifyAckDeadlineRequest.pb().FromString(raw)
        return b""


def _response(key: str, taken: list[tuple[str, bytes, dict[str, str], int]]) -> bytes:
    response = StreamingPullResponse.pb()()
    add = response.received_messages.add
    for message_id, data, attributes, published_us in taken:
        message = add(ack_id=f"{key}-{message_id}").message
        message.data, message.message_id = data, message_id
        message.attributes.update(attributes)
        seconds, micros = divmod(published_us, 1_000_000)
        message.publish_time.seconds, message.publish_time.nanos = seconds, micros * 1000
    return bytes(response.SerializeToString())


async def serve(port: int) -> None:
    relay = Relay()
    handlers = (
        grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Publisher",
            {"Publish": grpc.unary_unary_rpc_method_handler(relay.publish)},
        ),
        grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Subscriber",
            {
                "StreamingPull": grpc.stream_stream_rpc_method_handler(relay.streaming_pull),
                "Acknowledge": grpc.unary_unary_rpc_method_handler(relay.acknowledge),
                "ModifyAckDeadline": grpc.unary_unary_rpc_method_handler(relay.modify_ack_deadline),
            },
        ),
    )
    server = grpc.aio.server(options=SERVER_OPTIONS)  # the door's options
    server.add_generic_rpc_handlers(handlers)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


@dataclass(frozen=True)
class Run:
    """One load against the relay: what the clients printed and the relay's CPU."""

    topics: int
    rate_each: float
    seconds: float
    wall_s: float
    server_cpu_s: float
    published: dict[str, Any]
    received: dict[str, Any]

    @property
    def messages(self) -> int:
        return int(self.topics * self.rate_each * self.seconds)

    def row(self) -> list[object]:
        ack, e2e = self.published["ack_ms"], self.received["e2e_ms"]
        return [
            f"{self.topics} topics x {self.rate_each:g} msgs/s",
            f"{self.topics * self.rate_each:,.0f}",
            f"{self.server_cpu_s:.1f}",
            f"{self.server_cpu_s / self.wall_s:.2f}",
            f"{self.server_cpu_s / self.messages * 1e6:,.0f}",
            f"{self.published['cpu_s']:.1f} / {self.received['cpu_s']:.1f}",
            f"{ack['p50']:.1f} / {ack['p99']:.1f}",
            f"{e2e['p50']:.1f} / {e2e['p99']:.1f}",
            self.published["failures"],
            f"{self.received['distinct']:,} of {self.messages:,}",
            self.received["duplicates"],
        ]


def load(topics: int, rate_each: float, seconds: float) -> Run:
    """The S3 bench's Go load (``s3publish -single``, ``s3subscribe``) against the relay."""
    ids = [f"relay-{i}" for i in range(topics)]
    rate, total = topics * rate_each, int(topics * rate_each * seconds)
    command = (sys.executable, "-m", "bench", "relay", "--serve")
    with server_process(*command) as (pid, port):
        roles = go_roles(f"127.0.0.1:{port}")
        subscribe = roles.subscribe(ids, total, seconds + OVERRUN_S)
        subscriber = subprocess.Popen(subscribe, stdout=subprocess.PIPE, env=roles.env)
        assert subscriber.stdout is not None
        subscriber.stdout.readline()  # "ready"
        time.sleep(SETTLE_S)
        with ProcessMeter(pid) as meter:
            started = time.monotonic()
            publish = roles.publish(ids, rate, seconds, True)
            publisher = subprocess.Popen(publish, stdout=subprocess.PIPE, env=roles.env)
            published, received = json_line(publisher), json_line(subscriber)
            wall_s = time.monotonic() - started
    return Run(topics, rate_each, seconds, wall_s, meter.usage.cpu_s, published, received)


HEADER = [
    "load", "msgs/s", "relay CPU s", "relay cores", "relay µs/msg",
    "client CPU s publish / subscribe", "publish p50 / p99 ms", "e2e p50 / p99 ms",
    "failures", "received", "duplicates",
]  # fmt: skip


def write_report(runs: Sequence[Run], *, command: str, out: Any) -> None:
    lines = [
        *report.header(
            "The many-topic load against an in-memory relay on grpc.aio",
            command=command,
            about="what the relay is: `bench/relay_floor.py`",
        ),
        "Google's Go client (`bench/loadgen`, modes s3publish with `-single` and "
        "s3subscribe, as `python -m bench s3 --client go` runs them): one Publish per "
        "message, open loop, one StreamingPull subscriber per topic. The relay stores "
        "nothing and leases nothing; its CPU is grpcio's and protobuf's for those calls. "
        "CPU is user + system seconds over the run, from the first publish until the "
        "subscriber had every message.",
        "",
        *report.table(HEADER, [run.row() for run in runs]),
    ]
    report.write(out, "relay.md", lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.parser(__doc__ or "", quick="5 topics for 3 s (CI)")
    parser.add_argument("--serve", action="store_true", help="run the relay (internal)")
    parser.add_argument("port", nargs="?", type=int, help="the relay's port (with --serve)")
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(serve(args.port))
        return
    runs = [load(*case) for case in (QUICK if args.quick else FULL)]
    write_report(runs, command=report.command("relay", argv), out=args.out)
