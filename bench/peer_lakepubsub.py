"""The lakepubsub peer: the shared workload over Pub/Sub REST against a local server.

Every run has a fresh server (``bench/harness/lakepubsub_server.py``) on a fresh lake,
local or in moto S3, unless the run shares one (CI), and a fresh topic and
subscription. How each workload step maps onto Pub/Sub REST: bench/README.md, "How
each system is driven". After every run the lake itself is checked; Delta commits and
conflicts come from ``/metrics``, S3 requests from moto's request log, over the timed
part.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import httpx
import orjson

from bench import workload as w
from bench.clients import Context, Report, run_clients
from bench.harness.lakepubsub_server import (
    REQUEST_TIMEOUT_S,
    S3_KINDS,
    BenchError,
    Counters,
    LakePubSubServer,
    servers,
)
from bench.harness.meter import ProcessUsage

SYSTEM = "lakepubsub"
SYSTEM_S3 = "lakepubsub-s3"
# Carries the publisher's send time (time.monotonic_ns: one clock for all
# processes on a Linux machine) to the latency consumer.
SENT_NS_ATTRIBUTE = "bench-sent-ns"
# The latency consumer gives up when nothing new arrives for this long.
STALL_TIMEOUT_S = 60.0
# Backlogs are published, untimed, by this many processes in batches of this
# size, as on the NATS side.
PREFILL_CLIENTS = 2
PREFILL_BATCH = 1000
# Enough for 1,000 msgs/s at up to 64 ms per publish round trip.
LATENCY_MAX_IN_FLIGHT = 64

# Storage figures this peer adds to the shared ones (NATS has no counterpart).
DELTA_COMMITS_PER_MILLION = "delta_commits_per_million_msgs"
COMMIT_CONFLICTS_PER_MILLION = "commit_conflicts_per_million_msgs"
COMMITS_PER_MILLION = "commits/1M msgs"
REQUESTS_PER_MILLION = "requests/1M msgs"

_JSON = {"content-type": "application/json"}
_SENT_KEY = SENT_NS_ATTRIBUTE.encode()


@contextlib.contextmanager
def _client(url: str, *, connections: int = 1) -> Iterator[httpx.Client]:
    """A keep-alive client, connected before the clock starts."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    with httpx.Client(
        base_url=url, headers=_JSON, timeout=REQUEST_TIMEOUT_S, limits=limits
    ) as client:
        client.get("/healthz").raise_for_status()
        yield client


def _post(client: httpx.Client, path: str, body: bytes) -> dict[str, Any]:
    """POST a prebuilt JSON body; anything but 200 fails the run, with the answer."""
    response = client.post(path, content=body)
    if response.status_code != httpx.codes.OK:
        raise BenchError(f"POST {path}: HTTP {response.status_code}: {response.text[:1000]}")
    doc: dict[str, Any] = orjson.loads(response.content) if response.content else {}
    return doc


def _data(i: int) -> str:
    return base64.b64encode(w.payload(i)).decode()


def _publish_body(first: int, end: int) -> bytes:
    return orjson.dumps({"messages": [{"data": _data(i)} for i in range(first, end)]})


def publisher(
    url: str, topic: str, batch_size: int, first: int, end: int, prebuild: bool, ctx: Context
) -> Report:
    """Publish messages ``first`` to ``end`` in batches, each once the last is answered;
    without ``prebuild`` (prefill publishers, untimed) each body is built when it is sent."""
    path = f"/v1/{topic}:publish"
    spans = [(a, min(a + batch_size, end)) for a in range(first, end, batch_size)]
    bodies = [_publish_body(a, b) for a, b in spans] if prebuild else []
    with _client(url) as client:
        batch_ms: list[float] = []
        clock = ctx.start()
        for k, (a, b) in enumerate(spans):
            body = bodies[k] if bodies else _publish_body(a, b)
            sent = time.monotonic()
            ids = _post(client, path, body).get("messageIds", [])
            batch_ms.append((time.monotonic() - sent) * 1000)
            if len(ids) != b - a:
                raise BenchError(f"published {b - a} messages, got {len(ids)} ids")
        return clock.report(end - first, latencies_ms=tuple(batch_ms))


def _pull_body(max_messages: int) -> bytes:
    return orjson.dumps({"maxMessages": max_messages, "returnImmediately": False})


def _ack_body(items: Sequence[dict[str, Any]]) -> bytes:
    return orjson.dumps({"ackIds": [item["ackId"] for item in items]})


def _first_delivery(item: dict[str, Any]) -> bool:
    return int(item.get("deliveryAttempt", 1)) <= 1


def _check_attribute(items: Sequence[dict[str, Any]], key: str, value: str) -> None:
    for item in items:
        if item["message"].get("attributes", {}).get(key) != value:
            message_id = item["message"].get("messageId")
            raise BenchError(f"delivered message {message_id} without {key}={value!r}")


def consumer(
    url: str,
    subscription: str,
    max_messages_per_pull: int,
    total: int,
    required_attribute: tuple[str, str] | None,
    ctx: Context,
) -> Report:
    """Pull and ack until the run's consumers together acked ``total`` messages; with
    ``required_attribute`` (key, value) every delivery must carry it (a filter's check)."""
    pull_path, ack_path = f"/v1/{subscription}:pull", f"/v1/{subscription}:acknowledge"
    pull_body = _pull_body(max_messages_per_pull)
    with _client(url) as client:
        received = redelivered = 0
        clock = ctx.start()
        last_acked_s = clock.start_s
        while ctx.acked.value < total:
            items = _post(client, pull_path, pull_body).get("receivedMessages", [])
            if not items:
                continue
            if required_attribute is not None:
                _check_attribute(items, *required_attribute)
            _post(client, ack_path, _ack_body(items))
            last_acked_s = time.monotonic()
            firsts = sum(1 for item in items if _first_delivery(item))
            received, redelivered = received + len(items), redelivered + len(items) - firsts
            ctx.add_acked(firsts)
        # Not the time of leaving the loop: that can be an idle pull later.
        return clock.report(received, end_s=last_acked_s, redelivered=redelivered)


def latency_publisher(url: str, topic: str, rate_per_s: int, messages: int, ctx: Context) -> Report:
    """One message per publish at ``rate_per_s`` (several in flight), stamped with its send time."""
    path = f"/v1/{topic}:publish"
    # Each body is built but for its send time: head + time + tail.
    heads = [
        b'{"messages":[{"data":"%s","attributes":{"%s":"' % (_data(i).encode(), _SENT_KEY)
        for i in range(messages)
    ]
    tail = b'"}}]}'
    with (
        _client(url, connections=LATENCY_MAX_IN_FLIGHT) as client,
        ThreadPoolExecutor(LATENCY_MAX_IN_FLIGHT) as senders,
    ):
        clock = ctx.start()
        start_ns = time.monotonic_ns()
        sent = []
        for i in range(messages):
            time.sleep(w.due_s(start_ns, i, rate_per_s))
            body = heads[i] + str(time.monotonic_ns()).encode() + tail
            sent.append(senders.submit(_post, client, path, body))
        for request in sent:
            request.result()
        return clock.report(messages)


def _latency_consumer(
    url: str, subscription: str, max_messages_per_pull: int, messages: int, ctx: Context
) -> Report:
    """Pull until ``messages`` first deliveries arrived, each timed from its send stamp.

    Fails if nothing new arrives for ``STALL_TIMEOUT_S``: a server that falls
    behind the offered rate only makes the run longer, a lost message fails it.
    """
    pull_path, ack_path = f"/v1/{subscription}:pull", f"/v1/{subscription}:acknowledge"
    pull_body = _pull_body(max_messages_per_pull)
    # Acks go from a thread of their own, so the next pull need not wait for one.
    with _client(url, connections=2) as client, ThreadPoolExecutor(1) as acker:
        acks = []
        latencies_ms: list[float] = []
        redelivered = 0
        clock = ctx.start()
        last_progress_s = clock.start_s
        while len(latencies_ms) < messages:
            if time.monotonic() - last_progress_s > STALL_TIMEOUT_S:
                raise BenchError(
                    f"received {len(latencies_ms)} of {messages} messages, "
                    f"then nothing for {STALL_TIMEOUT_S} s"
                )
            items = _post(client, pull_path, pull_body).get("receivedMessages", [])
            received_ns = time.monotonic_ns()
            for item in items:
                if not _first_delivery(item):
                    redelivered += 1
                    continue
                sent_ns = int(item["message"]["attributes"][SENT_NS_ATTRIBUTE])
                latencies_ms.append((received_ns - sent_ns) / w.NS_PER_MS)
            if items:
                acks.append(acker.submit(_post, client, ack_path, _ack_body(items)))
                last_progress_s = time.monotonic()
        for ack in acks:
            ack.result()
        return clock.report(
            len(latencies_ms), latencies_ms=tuple(latencies_ms), redelivered=redelivered
        )


def publish(
    url: str,
    server_pid: int,
    topic: str,
    *,
    batch_size: int,
    per_client: Sequence[int],
    prebuild: bool = True,
) -> tuple[list[Report], ProcessUsage]:
    """Publish from one process per ``per_client`` entry, in batches of ``batch_size``."""
    firsts = [sum(per_client[:c]) for c in range(len(per_client) + 1)]
    jobs = [
        partial(publisher, url, topic, batch_size, a, b, prebuild)
        for a, b in itertools.pairwise(firsts)
    ]
    return run_clients(jobs, server_pid=server_pid, preload=__name__)


def publish_backlog(server: LakePubSubServer, topic: str, messages: int) -> None:
    per_client = [len(range(c, messages, PREFILL_CLIENTS)) for c in range(PREFILL_CLIENTS)]
    publish(
        server.url,
        server.pid,
        topic,
        batch_size=PREFILL_BATCH,
        per_client=per_client,
        prebuild=False,
    )


def consume(
    server: LakePubSubServer,
    subscription: str,
    *,
    total: int,
    consumers: int = 1,
    max_messages_per_pull: int = 1000,
    required_attribute: tuple[str, str] | None = None,
) -> tuple[list[Report], ProcessUsage]:
    """Pull + ack from ``consumers`` processes until ``total`` messages are acked."""
    job = partial(
        consumer, server.url, subscription, max_messages_per_pull, total, required_attribute
    )
    return run_clients([job] * consumers, server_pid=server.pid, preload=__name__)


class Side:
    """lakepubsub on a running server: a fresh topic (and subscription) per run, what the
    lake holds afterwards, and the figures a run adds (CPU, memory, Delta commits, S3
    requests). The REST runs drive it with this module's clients, the gRPC runs with
    ``bench/loadgen``."""

    def __init__(self, server: LakePubSubServer, ack_deadline_s: int) -> None:
        self.server, self.system = server, server.system
        self._ack_deadline_s = ack_deadline_s
        self.topic = self.subscription = ""
        self._before = self._after = Counters(0, 0, 0)

    def prepare(self, *, receive: bool, backlog: int = 0) -> None:
        """A fresh topic, with ``receive`` a subscription, with ``backlog`` messages."""
        self.topic = self.server.create_topic()
        if receive:
            self.subscription = self.server.create_subscription(
                self.topic, ack_deadline_s=self._ack_deadline_s
            )
        if backlog:
            publish_backlog(self.server, self.topic, backlog)
        self._before = self.server.counters()

    def ran(self) -> None:
        """The timed part is over: what it cost the lake so far."""
        self._after = self.server.counters()

    def check_stored(self, n: int) -> None:
        self.server.check_stored(self.topic, n)

    def check_acked(self, n: int) -> None:
        self.server.check_all_acked(self.topic, self.subscription, n)

    def figures(
        self, case: str, usage: ProcessUsage, client_cpu_s: float, messages: int
    ) -> list[w.Result]:
        """CPU and memory, Delta commits and conflicts, and on S3 requests, per million messages."""
        system, before, after = self.system, self._before, self._after
        per_million = w.MILLION / messages
        figure = partial(w.result, system, case)
        found = [
            *w.usage_figures(system, case, usage, client_cpu_s=client_cpu_s, messages=messages),
            figure(DELTA_COMMITS_PER_MILLION, COMMITS_PER_MILLION,
                   (after.commits - before.commits) * per_million),
            figure(COMMIT_CONFLICTS_PER_MILLION, COMMITS_PER_MILLION,
                   (after.conflicts - before.conflicts) * per_million),
        ]  # fmt: skip
        if self.server.moto is not None:
            requests = self.server.moto.requests_since(before.moto_log_offset)
            found += [
                figure(s3_metric(kind), REQUESTS_PER_MILLION, requests[kind] * per_million)
                for kind in S3_KINDS
            ]
        return found

    def loadgen_args(self) -> tuple[list[str], dict[str, str]]:
        """``bench/loadgen``'s arguments and environment for this topic and subscription."""
        args = ["-system", "pubsub", "-topic", self.topic, "-subscription", self.subscription]
        return args, {"PUBSUB_EMULATOR_HOST": self.server.emulator_host}

    def publish(self, case: w.PublishCase) -> tuple[list[Report], ProcessUsage]:
        per_client = [case.messages_per_client] * case.clients
        found = publish(
            self.server.url,
            self.server.pid,
            self.topic,
            batch_size=case.batch_size,
            per_client=per_client,
        )
        self.ran()
        return found

    def consume(self, case: w.PullCase) -> tuple[list[Report], ProcessUsage]:
        found = consume(
            self.server,
            self.subscription,
            total=case.backlog_messages,
            consumers=case.consumers,
            max_messages_per_pull=case.max_messages_per_pull,
        )
        self.ran()
        return found

    def latency(self, case: w.LatencyCase) -> tuple[list[Report], ProcessUsage]:
        total, url = case.total_messages, self.server.url
        pulls = case.max_messages_per_pull
        receiver = partial(_latency_consumer, url, self.subscription, pulls, total)
        sender = partial(latency_publisher, url, self.topic, case.offered_rate_per_s, total)
        found = run_clients([receiver, sender], server_pid=self.server.pid, preload=__name__)
        self.ran()
        return found


def run_all(
    workload: w.Workload,
    *,
    s3: bool = False,
    fresh_server: bool = True,
    progress: Callable[[str], None] | None = None,
    latency_samples: list[float] | None = None,
) -> list[w.Result]:
    """Every case of the workload, ``workload.runs`` times each, a fresh server per run.

    Without ``fresh_server`` one server serves every run (each still on a
    fresh topic and subscription): seconds less per run, for CI.
    """
    with servers(fresh=fresh_server, s3=s3) as server:
        return w.run_cases(
            workload,
            system=SYSTEM_S3 if s3 else SYSTEM,
            server=server,
            side=Side,
            progress=progress,
            latency_samples=latency_samples,
        )


def s3_metric(kind: str) -> str:
    """The metric name of S3 ``kind`` requests per million messages."""
    return f"s3_{kind}_per_million_msgs"
