"""Push delivery against a real server: throughput, latency, seed 003's back-off, auth cost.

Every server is ``lakepubsub serve`` on a fresh lake; the push endpoints are one
HTTP/1.1 server on an asyncio loop in a thread of this process, answering each path
as its scenario says and recording every request. The sections: bench/README.md,
"Push delivery". Writes ``push.md`` and prints it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus

import httpx
import orjson

from bench import peer_lakepubsub as lps
from bench import report
from bench import workload as w
from bench.clients import run_clients
from bench.harness.lakepubsub_server import BenchError, LakePubSubServer
from bench.harness.meter import ProcessMeter

PROJECT = "bench"
ACK, NACK = 204, 500
# The back-off case's first endpoint nacks one request in this many.
NACK_ONE_IN = 5
# Long enough that no lease expires while a large backlog waits in the window.
ACK_DEADLINE_S = 60
# How often waits look at what the endpoint has seen.
POLL_S = 0.05
# A run fails when no new message arrives at its endpoint for this long.
STALL_TIMEOUT_S = 120.0
# Seed 003's figures, printed next to the measured ones.
SEED_ONE_IN_FIVE_S = 0.5
SEED_BACKED_OFF_S = (30.0, 60.0)
# The API key of the authenticated server, sent as ``Authorization: Bearer``.
API_KEY = "push-bench-key"

_SENT = lps.SENT_NS_ATTRIBUTE
# All-nack deliveries closer than this were sent together, not after a pause.
BURST_GAP_S = 0.01
# Fewer deliveries than these give no interval to measure (after the first, unmeasured one).
MIN_ONE_IN_FIVE_DELIVERIES, MIN_ALL_NACK_DELIVERIES = 3, 2


@dataclass(frozen=True)
class Sizes:
    backlog_messages: int
    latency_rate_per_s: int
    latency_duration_s: float
    one_in_five_rate_per_s: int
    one_in_five_duration_s: float
    one_in_five_warmup_s: float  # intervals before this (from the first delivery) are not counted
    all_nack_messages: int
    all_nack_duration_s: float
    auth_publishes: int  # per server
    auth_warmup_publishes: int


FULL = Sizes(20_000, 50, 20.0, 5, 60.0, 5.0, 20, 240.0, 500, 20)
QUICK = Sizes(1_000, 50, 2.0, 5, 10.0, 3.0, 20, 12.0, 50, 10)


def Server(env: Mapping[str, str] | None = None) -> LakePubSubServer:  # noqa: N802 (a launcher)
    """``lakepubsub serve`` on a fresh local lake with ``env``, the default push settings."""
    return LakePubSubServer(serve=True, env=dict(env or {}))


@dataclass(frozen=True)
class Arrival:
    at_ns: int  # time.monotonic_ns() when the request was read
    message_id: str
    sent_ns: int | None  # the publisher's stamp, if the message has one
    status: int


# The status to answer the n-th request (from 0) to a path with.
Behaviour = Callable[[int], int]


class Endpoint:
    """An HTTP/1.1 server on 127.0.0.1 answering push requests by path; records each one."""

    def __init__(self, behaviours: Mapping[str, Behaviour]) -> None:
        self._behaviours = dict(behaviours)
        self._arrivals: dict[str, list[Arrival]] = {path: [] for path in behaviours}
        self._ids: dict[str, set[str]] = {path: set() for path in behaviours}
        self._lock = threading.Lock()
        self._connections = self.peak_connections = 0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def __enter__(self) -> Endpoint:
        ready: Future[int] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="push-endpoint", daemon=True
        )
        self._thread.start()
        self.port = ready.result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def arrivals(self, path: str) -> list[Arrival]:
        with self._lock:
            return list(self._arrivals[path])

    def unique(self, path: str) -> int:
        """How many distinct message ids have arrived at ``path``."""
        with self._lock:
            return len(self._ids[path])

    def _run(self, ready: Future[int]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(ready))
        finally:
            self._loop.close()

    async def _main(self, ready: Future[int]) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        ready.set_result(int(server.sockets[0].getsockname()[1]))
        async with server:
            await self._stop.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        self.peak_connections = max(self.peak_connections, self._connections)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                at_ns = time.monotonic_ns()
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                fields = (h.partition(":") for h in header_lines)
                headers = {name.strip().lower(): value for name, _, value in fields}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                status = self._record(request_line.split(" ")[1], at_ns, body)
                phrase = HTTPStatus(status).phrase
                length_header = b"" if status == ACK else b"content-length: 0\r\n"
                writer.write(b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, phrase.encode(), length_header))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the dispatcher closed the connection
        finally:
            self._connections -= 1
            writer.close()

    def _record(self, path: str, at_ns: int, body: bytes) -> int:
        message = orjson.loads(body)["message"]
        sent = (message.get("attributes") or {}).get(_SENT)
        with self._lock:
            seen = self._arrivals.setdefault(path, [])
            self._ids.setdefault(path, set()).add(message["messageId"])
            behaviour = self._behaviours.get(path)
            status = behaviour(len(seen)) if behaviour else HTTPStatus.NOT_FOUND
            seen.append(Arrival(at_ns, message["messageId"], int(sent) if sent else None, status))
        return status


def _topic_and_subscription(server: LakePubSubServer, push_endpoint: str | None) -> tuple[str, str]:
    """A fresh topic and subscription (push to ``push_endpoint`` unless None)."""
    push = {} if push_endpoint is None else {"pushConfig": {"pushEndpoint": push_endpoint}}
    return server.topic_and_subscription(ack_deadline_s=ACK_DEADLINE_S, **push)


def _wait_for_messages(endpoint: Endpoint, path: str, count: int) -> None:
    """Until ``count`` message ids have arrived at ``path``; fails when progress stalls."""
    seen, progress_s = 0, time.monotonic()
    while (now_seen := endpoint.unique(path)) < count:
        if now_seen > seen:
            seen, progress_s = now_seen, time.monotonic()
        elif time.monotonic() - progress_s > STALL_TIMEOUT_S:
            raise BenchError(
                f"{path}: {seen} of {count} messages arrived, then none for {STALL_TIMEOUT_S} s"
            )
        time.sleep(POLL_S)


def _publish_at_rate(server: LakePubSubServer, topic: str, rate_per_s: int, messages: int) -> float:
    """The peer's latency publisher (its own process): one message per request, stamped
    with its send time. Returns the rate it achieved."""
    job = partial(lps.latency_publisher, server.url, topic, rate_per_s, messages)
    [done], _ = run_clients([job], server_pid=server.pid, preload=lps.__name__)
    return messages / (done.end_s - done.start_s)


def _metrics(*rows: tuple[str, object]) -> list[str]:
    return report.table(["metric", "value"], rows)


def _ms(values_ns: Sequence[int], fraction: float) -> str:
    return f"{w.percentile(values_ns, fraction) / w.NS_PER_MS:.1f}"


def run_throughput(
    server: LakePubSubServer, endpoint: Endpoint, sizes: Sizes, path: str
) -> list[str]:
    total = sizes.backlog_messages
    topic, subscription = _topic_and_subscription(server, None)
    lps.publish_backlog(server, topic, total)
    with lps._client(server.url) as client:
        config = orjson.dumps({"pushConfig": {"pushEndpoint": endpoint.url(path)}})
        before = server.counters()
        with ProcessMeter(server.pid) as meter:
            started_ns = time.monotonic_ns()
            lps._post(client, f"/v1/{subscription}:modifyPushConfig", config)
            _wait_for_messages(endpoint, path, total)
        commits = server.counters().commits - before.commits
    server.check_all_acked(topic, subscription, total)
    arrivals = endpoint.arrivals(path)
    unique = endpoint.unique(path)
    pickup_s = (arrivals[0].at_ns - started_ns) / w.NS_PER_S
    span_s = (arrivals[-1].at_ns - arrivals[0].at_ns) / w.NS_PER_S
    usage = meter.usage
    return _metrics(
        ("backlog", f"{total:,} messages"),
        ("delivered, unique message ids", f"{unique:,}"),
        ("duplicates", f"{len(arrivals) - unique:,}"),
        ("`:modifyPushConfig` → first delivery", f"{pickup_s:.2f} s"),
        ("first → last delivery", f"{span_s:.2f} s"),
        ("**throughput, first → last delivery**", f"**{total / span_s:,.0f} msgs/s**"),
        ("throughput from `:modifyPushConfig`", f"{total / (pickup_s + span_s):,.0f} msgs/s"),
        ("peak open connections to the endpoint", endpoint.peak_connections),
        ("server CPU per 1,000 messages", f"{usage.cpu_s * 1000 / total:.2f} s"),
        ("Delta commits per 1,000 messages (all tables)", f"{commits * 1000 / total:,.0f}"),
        ("server peak RSS", f"{usage.peak_rss_bytes / 2**20:,.0f} MiB"),
    )


def run_latency(server: LakePubSubServer, endpoint: Endpoint, sizes: Sizes, path: str) -> list[str]:
    total = round(sizes.latency_rate_per_s * sizes.latency_duration_s)
    with lps._client(server.url) as client:
        topic, subscription = _topic_and_subscription(server, endpoint.url(path))
        # One unstamped message first: the dispatcher has picked the subscription up.
        lps._post(client, f"/v1/{topic}:publish", lps._publish_body(-1, 0))
        _wait_for_messages(endpoint, path, 1)
    achieved = _publish_at_rate(server, topic, sizes.latency_rate_per_s, total)
    _wait_for_messages(endpoint, path, total + 1)
    server.check_all_acked(topic, subscription, total + 1)
    arrivals = endpoint.arrivals(path)
    firsts: dict[str, int] = {}
    for a in arrivals:
        if a.sent_ns is not None:
            firsts.setdefault(a.message_id, a.at_ns - a.sent_ns)
    latencies = list(firsts.values())
    return _metrics(
        ("offered rate", f"{sizes.latency_rate_per_s}/s for {sizes.latency_duration_s:g} s"),
        ("rate the publisher achieved", f"{achieved:.1f}/s"),
        ("messages", f"{len(latencies):,}"),
        ("duplicates", f"{len(arrivals) - len(firsts) - 1:,}"),
        ("**publish → push p50**", f"**{_ms(latencies, 0.50)} ms**"),
        ("**publish → push p99**", f"**{_ms(latencies, 0.99)} ms**"),
        ("publish → push max", f"{max(latencies) / w.NS_PER_MS:.1f} ms"),
    )


def run_backoff(
    server: LakePubSubServer, endpoint: Endpoint, sizes: Sizes, paths: tuple[str, str]
) -> list[str]:
    """Both of seed 003's cases at once, on two subscriptions of the same server."""
    some_nacked, all_nacked = paths
    with lps._client(server.url) as client:
        topic_a, sub_a = _topic_and_subscription(server, endpoint.url(some_nacked))
        topic_b, sub_b = _topic_and_subscription(server, endpoint.url(all_nacked))
        b_started = time.monotonic()
        lps._post(client, f"/v1/{topic_b}:publish", lps._publish_body(0, sizes.all_nack_messages))
        a_messages = round(sizes.one_in_five_rate_per_s * sizes.one_in_five_duration_s)
        _publish_at_rate(server, topic_a, sizes.one_in_five_rate_per_s, a_messages)
        a_ended_ns = time.monotonic_ns()
        time.sleep(max(0.0, b_started + sizes.all_nack_duration_s - time.monotonic()))
        for subscription in (sub_a, sub_b):  # the server stops pushing them
            client.delete(f"/v1/{subscription}").raise_for_status()
    return [
        f"### (a) One request in five nacked, {sizes.one_in_five_rate_per_s} msgs/s published",
        "",
        *_one_in_five(endpoint.arrivals(some_nacked), a_ended_ns, sizes),
        "",
        f"### (b) Every request nacked ({sizes.all_nack_messages} messages, "
        f"{sizes.all_nack_duration_s:g} s)",
        "",
        *_all_nacked(endpoint.arrivals(all_nacked)),
    ]


def _one_in_five(arrivals: Sequence[Arrival], ended_ns: int, sizes: Sizes) -> list[str]:
    if len(arrivals) < MIN_ONE_IN_FIVE_DELIVERIES:
        raise BenchError(f"one-in-five: only {len(arrivals)} deliveries")
    from_ns = arrivals[0].at_ns + round(sizes.one_in_five_warmup_s * w.NS_PER_S)
    times = [a.at_ns for a in arrivals if from_ns <= a.at_ns <= ended_ns]
    gaps = [(b - a) / w.NS_PER_S for a, b in itertools.pairwise(times)]
    if not gaps:
        raise BenchError("one-in-five: no delivery after the warm-up")
    nacked = sum(a.status == NACK for a in arrivals)
    p10, p90 = (w.percentile(gaps, f) for f in (0.1, 0.9))
    window = f"from {sizes.one_in_five_warmup_s:g} s after the first delivery to the last publish"
    return _metrics(
        ("deliveries (all / in the measured window)", f"{len(arrivals)} / {len(times)}"),
        ("measured window", window),
        ("nacked", f"{nacked} ({nacked / len(arrivals):.0%})"),
        ("**mean interval between deliveries**", f"**{statistics.mean(gaps):.3f} s**"),
        ("seed 003", f"about every {SEED_ONE_IN_FIVE_S} s"),
        ("median interval", f"{statistics.median(gaps):.3f} s"),
        ("p10 / p90 interval", f"{p10:.3f} / {p90:.3f} s"),
        ("deliveries per second", f"{len(gaps) / sum(gaps):.2f}"),
    )


def _all_nacked(arrivals: Sequence[Arrival]) -> list[str]:
    if len(arrivals) < MIN_ALL_NACK_DELIVERIES:
        raise BenchError(f"all-nack: only {len(arrivals)} deliveries")
    at_s = [(a.at_ns - arrivals[0].at_ns) / w.NS_PER_S for a in arrivals]
    gaps = [b - a for a, b in itertools.pairwise(at_s)]
    rows: list[tuple[object, ...]] = [(1, "0.00", "", "")]
    for i, gap in enumerate(gaps):
        # Requests sent together (the window before the first nack) have no ratio.
        ratio = f"{gap / gaps[i - 1]:.1f} x" if i and gaps[i - 1] > BURST_GAP_S else ""
        rows.append((i + 2, f"{at_s[i + 1]:.2f}", f"{gap:.2f}", ratio))
    low, high = SEED_BACKED_OFF_S
    reached = next((i for i, gap in enumerate(gaps) if gap >= low), None)
    summary: list[tuple[str, object]] = [
        ("deliveries", len(arrivals)),
        ("longest interval", f"{max(gaps):.2f} s"),
        ("seed 003 once backed off", f"every {low:.0f}-{high:.0f} s"),
    ]
    if reached is None:
        summary.append((f"first interval ≥ {low:.0f} s", "not reached"))
    else:
        ends = f"ends delivery {reached + 2}, {at_s[reached + 1]:.0f} s in"
        summary.append((f"first interval ≥ {low:.0f} s", ends))
        if steady := gaps[reached + 1 :]:
            spread = f"{min(steady):.1f}-{max(steady):.1f} s, n={len(steady)}"
            mean = f"**mean {statistics.mean(steady):.1f} s**"
            summary.append(("**intervals after it**", f"{mean}, {spread}"))
    return [
        *_metrics(*summary),
        "",
        *report.table(["delivery", "at (s from the first)", "interval (s)", "÷ previous"], rows),
    ]


def run_auth(sizes: Sizes) -> list[str]:
    """Publish latency on a server without identities and on one with an API key."""
    digest = hashlib.sha256(API_KEY.encode()).hexdigest()
    keys = {"bench": {"sha256": digest, "roles": {"*": ["roles/pubsub.editor"]}}}
    servers = [Server(), Server({"LAKEPUBSUB_API_KEYS": orjson.dumps(keys).decode()})]
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.push(server)
        with ThreadPoolExecutor(len(servers)) as pool:  # start both at once
            list(pool.map(LakePubSubServer.__enter__, servers))
        clients = [stack.enter_context(lps._client(s.url)) for s in servers]
        unauthenticated = clients[1].post(f"/v1/projects/{PROJECT}/topics/t:publish", json={})
        clients[1].headers["authorization"] = f"Bearer {API_KEY}"
        topics = [f"projects/{PROJECT}/topics/auth-{uuid.uuid4().hex[:8]}" for _ in clients]
        for client, topic in zip(clients, topics, strict=True):
            client.put(f"/v1/{topic}", content=b"{}").raise_for_status()
        samples: list[list[int]] = [[], []]
        for i in range(sizes.auth_warmup_publishes + sizes.auth_publishes):
            body = lps._publish_body(i, i + 1)
            # Each server goes first every other round: neither gains from the order.
            for k in (0, 1) if i % 2 else (1, 0):
                client, topic = clients[k], topics[k]
                sent = time.monotonic_ns()
                lps._post(client, f"/v1/{topic}:publish", body)
                if i >= sizes.auth_warmup_publishes:
                    samples[k].append(time.monotonic_ns() - sent)
    if unauthenticated.status_code != httpx.codes.UNAUTHORIZED:
        raise BenchError(f"the keyed server answered {unauthenticated.status_code} without a key")
    plain, keyed = samples
    rows: list[tuple[object, ...]] = [
        (name, f"{len(s):,}", _ms(s, 0.5), _ms(s, 0.99), f"{statistics.mean(s) / w.NS_PER_MS:.1f}")
        for name, s in (("no identities", plain), ("API key, bearer token", keyed))
    ]
    diff = [(w.percentile(keyed, f) - w.percentile(plain, f)) / w.NS_PER_MS for f in (0.5, 0.99)]
    mean_diff = (statistics.mean(keyed) - statistics.mean(plain)) / w.NS_PER_MS
    rows.append(
        ("**difference**", "", f"**{diff[0]:+.1f}**", f"**{diff[1]:+.1f}**", f"{mean_diff:+.1f}")
    )
    return [
        *report.table(["server", "publishes", "p50 (ms)", "p99 (ms)", "mean (ms)"], rows),
        "",
        f"Without a key the keyed server answered HTTP {unauthenticated.status_code}.",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    args = report.parser(__doc__ or "", quick="small sizes, short back-off run").parse_args(argv)
    sizes = QUICK if args.quick else FULL
    started = time.monotonic()
    load_start = os.getloadavg()

    progress = report.progress(started)
    sections: list[tuple[str, list[str]]] = []
    backoff_paths = ("/one-in-five", "/all-nack")
    behaviours: dict[str, Behaviour] = {
        "/throughput": lambda _: ACK,
        "/latency": lambda _: ACK,
        "/one-in-five": lambda i: NACK if i % NACK_ONE_IN == NACK_ONE_IN - 1 else ACK,
        "/all-nack": lambda _: NACK,
    }
    with Endpoint(behaviours) as endpoint, Server() as server:
        for title, step, about in (
            ("Push throughput", partial(run_throughput, path="/throughput"),
             f"push throughput: {sizes.backlog_messages:,} messages"),
            ("Publish → push latency", partial(run_latency, path="/latency"),
             "publish → push latency"),
            ("Back-off (seed 003)", partial(run_backoff, paths=backoff_paths),
             f"back-off (seed 003): {sizes.all_nack_duration_s:g} s"),
        ):  # fmt: skip
            progress(about)
            sections.append((title, step(server, endpoint, sizes)))
    progress("authentication cost on publish latency")
    sections.append(("Authentication cost on publish latency", run_auth(sizes)))
    load_end = os.getloadavg()

    lines = [
        f"# Push benchmark{' (quick)' if args.quick else ''}",
        "",
        "## Machine",
        "",
        f"{report.now()} · {report.machine()} · `python -m bench push"
        f"{' --quick' if args.quick else ''}` · {time.monotonic() - started:.0f} s in all. "
        f"Load average (1/5/15 min) {report.load(load_start)} at the start, "
        f"{report.load(load_end)} at the end. Server, endpoint and clients share the cores.",
        "",
        "## Sizes",
        "",
        ", ".join(
            f"{k}={v:,}" if isinstance(v, int) else f"{k}={v:g}" for k, v in vars(sizes).items()
        )
        + f". Messages of {w.MESSAGE_BYTES} B; ack deadline {ACK_DEADLINE_S} s; "
        "the server's default push settings.",
    ]
    for title, body in sections:
        lines += ["", f"## {title}", "", *body]
    report.write(args.out, "push-quick.md" if args.quick else "push.md", lines)
