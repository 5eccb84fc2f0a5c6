"""S3 requests of lakepubsub, counted at a proxy in front of moto: the idle, load,
flush and backlog cases (bench/README.md, "Counted at a proxy"). Writes ``s3*.md``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import orjson

from bench import gobuild
from bench import report as out
from bench.grpc_bench import NO_METADATA_ENV
from bench.harness.lakepubsub_server import REPO, LakePubSubServer
from bench.harness.meter import ProcessMeter, tree_cpu_s
from bench.harness.s3_proxy import S3Proxy
from bench.s3 import backlog
from bench.s3.prices import PROFILES, usd
from lakepubsub.constants import DEFAULT_ACK_DEADLINE_S

IDLE_RESOURCES = 20
WARMUP_S = 15.0
# Long enough for a change check (300 s on S3) and several peer heartbeats (60 s).
WINDOW_S = 330.0
QUICK_WINDOW_S = 20.0
MINUTES_PER_MONTH = 60 * 24 * 30
TOP_KEYS = 8
STEADY_TOP_KEYS = 14
TIERS = ("standard", "express")
MILLION = 1_000_000
# Streams open and the first cycles run before the counts are zeroed.
LOAD_SETTLE_S = 5.0
LOAD_TIMEOUT_S = 900.0
CLIENTS = {"python": "Python client", "go": "Go client (`bench/loadgen`)"}
SECONDS_PER_MONTH = 30 * 24 * 3600
# The steady window of a load case starts this share of its seconds after the first
# publish, once every table is open, and ends with the offered load.
STEADY_FROM = 1 / 3


@dataclass
class LoadResult:
    label: str
    messages: int
    kinds: dict[str, int]
    commits: dict[str, float]
    publish: dict[str, object]
    delivery: dict[str, object]
    cpu_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    # Of ``kinds``, the requests to a directory bucket (the intake on Express).
    directory_kinds: dict[str, int] = field(default_factory=dict)
    # Of ``kinds``, those of the steady window (``SteadyWindow``), and its length.
    steady_kinds: dict[str, int] = field(default_factory=dict)
    steady_s: float = 0.0
    # The steady window's requests by kind and key pattern, most first.
    steady_keys: dict[str, int] = field(default_factory=dict)
    # Unary gRPC calls the server answered during the case, by method.
    calls: dict[str, float] = field(default_factory=dict)

    def per_million(self, kind: str) -> float:
        return self.kinds.get(kind, 0) * MILLION / max(1, self.messages)

    def usd_per_million(self, tier: str) -> float:
        """Every request at ``tier``'s prices; "placed": a directory bucket's at
        Express prices and the others' at Standard."""
        if tier != "placed":
            return usd(self.kinds, tier) * MILLION / max(1, self.messages)
        general = {k: n - self.directory_kinds.get(k, 0) for k, n in self.kinds.items()}
        spent = usd(general, "standard") + usd(self.directory_kinds, "express")
        return spent * MILLION / max(1, self.messages)

    def usd_per_month(self) -> float:
        """The requests' rate over the run (first publish to last delivery), for a month,
        at Standard prices: what a process under this load costs."""
        return usd(self.kinds, "standard") * SECONDS_PER_MONTH / max(1e-9, self.wall_s)

    def usd_per_month_steady(self) -> float:
        """The same from the steady window alone: without the first reads of every
        table, which a process pays once, not every month (at 100 topics, two LISTs and
        a few GETs a topic), nor the drain after the load."""
        return usd(self.steady_kinds, "standard") * SECONDS_PER_MONTH / max(1e-9, self.steady_s)


class SteadyWindow(threading.Thread):
    """Zeroes the proxy's counts at the start and at the end of the steady window of a
    load that started at ``started`` (time.monotonic()), keeping what they were."""

    def __init__(self, proxy: S3Proxy, started: float, seconds: float) -> None:
        super().__init__(name="steady-window", daemon=True)
        self.proxy, self.started, self.seconds = proxy, started, seconds
        self.before: dict[str, object] = {}
        self.steady: dict[str, object] = {}

    def run(self) -> None:
        time.sleep(max(0.0, self.started + self.seconds * STEADY_FROM - time.monotonic()))
        self.before = self.proxy.reset()
        time.sleep(max(0.0, self.started + self.seconds - time.monotonic()))
        self.steady = self.proxy.reset()

    def total(self, after: dict[str, object], key: str) -> dict[str, int]:
        """``after``'s counts of ``key`` with the window's and those before it."""
        summed: Counter[str] = Counter()
        for part in (self.before, self.steady, after):
            if part:
                summed.update(_by_kind(part, key))
        return dict(summed)


def _by_kind(counts: dict[str, object], key: str) -> dict[str, int]:
    """One of the proxy's counts (``kinds``, ``keys``, ``directory_kinds``) as numbers."""
    return {str(k): int(v) for k, v in dict(counts[key]).items()}  # type: ignore[call-overload]


def json_line(process: subprocess.Popen[bytes]) -> dict[str, object]:
    out, _ = process.communicate(timeout=LOAD_TIMEOUT_S)
    for line in reversed(out.decode().splitlines()):
        if line.startswith("{"):
            return dict(orjson.loads(line))
    raise RuntimeError(f"no result from {process.args!r}: {out.decode()[-2000:]}")


@dataclass(frozen=True)
class _Roles:
    """The commands of a load's two client processes, and their environment."""

    publish: Callable[[Sequence[str], float, float, bool], list[str]]
    subscribe: Callable[[Sequence[str], int, float], list[str]]
    env: dict[str, str]


def _python_roles(host: str) -> _Roles:
    module = [sys.executable, "-m", "bench.s3.load"]
    return _Roles(
        publish=lambda topics, rate, seconds, single: [
            *module, "publish", host, "--topics", ",".join(topics), "--rate", str(rate),
            "--seconds", str(seconds), *(["--single"] if single else [])],
        subscribe=lambda names, expect, seconds: [
            *module, "subscribe", host, "--subscriptions", ",".join(names),
            "--expect", str(expect), "--seconds", str(seconds)],
        env=dict(os.environ),
    )  # fmt: skip


def go_roles(host: str) -> _Roles:
    binary = str(gobuild.build())
    return _Roles(
        publish=lambda topics, rate, seconds, single: [
            binary, "-mode", "s3publish", "-topic", ",".join(topics), "-rate", str(rate),
            "-duration", str(seconds), "-messages", str(int(rate * seconds)),
            "-timeout", str(seconds + LOAD_TIMEOUT_S), *(["-single"] if single else [])],
        subscribe=lambda names, expect, seconds: [
            binary, "-mode", "s3subscribe", "-subscription", ",".join(names),
            "-messages", str(expect), "-timeout", str(seconds)],
        env={**os.environ, **NO_METADATA_ENV, "PUBSUB_EMULATOR_HOST": host},
    )  # fmt: skip


def load(
    label: str,
    topics: int,
    rate: float,
    seconds: float,
    *,
    single: bool,
    profile: str,
    env: dict[str, str] | None = None,
    intake_bucket: str | None = None,
    client: str = "python",
    workers: int = 1,
    grpc_port: bool = False,
) -> LoadResult:
    """``rate`` messages a second for ``seconds`` over ``topics`` topics, open loop,
    one StreamingPull subscriber per topic; requests counted from the first
    publish until the subscriber has every message. ``client``: Google's Python
    client (``bench/s3/load.py``) or its Go client (``bench/loadgen``, modes
    s3publish and s3subscribe), each in a publishing and a subscribing process.
    ``workers``: ``serve --workers``, processes on one port that share the topics
    (peering); the server's CPU is then the sum over them, and its commit counts
    those of the one the bench reaches (the report leaves them out). ``grpc_port``:
    ``serve --grpc-port``, the clients on grpcio's own port instead of the one port's
    relay (one process only)."""
    if grpc_port and workers > 1:
        raise ValueError("--grpc-port takes one process: its workers would share the port")
    with LakePubSubServer(
        s3=True, serve=True, proxy=profile, env=env, intake_bucket=intake_bucket,
        workers=workers, grpc_port=grpc_port,
    ) as server:  # fmt: skip
        assert server.proxy is not None and server.moto is not None
        pairs = [
            server.topic_and_subscription(ack_deadline_s=DEFAULT_ACK_DEADLINE_S)
            for _ in range(topics)
        ]
        topic_names, names = zip(*pairs, strict=True)
        total = int(rate * seconds)
        host = server.emulator_host
        roles = go_roles(host) if client == "go" else _python_roles(host)
        subscriber = subprocess.Popen(
            roles.subscribe(names, total, seconds + 300), stdout=subprocess.PIPE, cwd=REPO,
            env=roles.env,
        )  # fmt: skip
        assert subscriber.stdout is not None
        subscriber.stdout.readline()  # "ready"
        time.sleep(LOAD_SETTLE_S)
        server.proxy.reset()
        counted = server.counters()
        before, calls_before = counted.commits_by_table, counted.calls_by_method
        meters = [ProcessMeter(p) for p in (server.moto.pid, server.proxy.pid)]
        server_cpu_s = tree_cpu_s(server.pid)  # with its workers
        started = time.monotonic()
        for meter in meters:
            meter.__enter__()
        publisher = subprocess.Popen(
            roles.publish(topic_names, rate, seconds, single),
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=roles.env,
        )
        window = SteadyWindow(server.proxy, started, seconds)
        window.start()
        published = json_line(publisher)
        delivered = json_line(subscriber)
        for meter in meters:
            meter.__exit__(None, None, None)
        server_cpu_s = tree_cpu_s(server.pid) - server_cpu_s
        wall = time.monotonic() - started
        window.join()  # the publisher ran its seconds: the window is over
        counts = server.proxy.reset()
        counted = server.counters()
        after = counted.commits_by_table
        calls = {m: n - calls_before.get(m, 0.0) for m, n in counted.calls_by_method.items()}
    kinds, directory = window.total(counts, "kinds"), window.total(counts, "directory_kinds")
    commits = {t: after.get(t, 0.0) - before.get(t, 0.0) for t in after} if workers == 1 else {}
    cpu = {"server": server_cpu_s}
    cpu |= {n: m.usage.cpu_s for n, m in zip(("moto", "proxy"), meters, strict=True)}
    steady = _by_kind(window.steady, "kinds")
    steady_s = float(window.steady["seconds"])  # type: ignore[arg-type]
    return LoadResult(
        label, total, kinds, commits, published, delivered, cpu, wall, directory, steady, steady_s,
        _by_kind(window.steady, "keys"), calls if workers == 1 else {},
    )  # fmt: skip


def idle(
    label: str,
    resources: int,
    streams: bool,
    window_s: float,
    profile: str,
    env: dict[str, str] | None = None,
) -> tuple[str, list[str]]:
    """The idle case's row of the report's table, and its top request patterns."""
    with LakePubSubServer(s3=True, serve=True, proxy=profile, env=env) as server:
        assert server.proxy is not None
        pairs = [
            server.topic_and_subscription(ack_deadline_s=DEFAULT_ACK_DEADLINE_S)
            for _ in range(resources)
        ]
        holder = None
        if streams:
            names = [subscription for _, subscription in pairs]
            command = [sys.executable, "-m", "bench.s3.streams", server.emulator_host, *names]
            holder = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=REPO)
        try:
            time.sleep(WARMUP_S)
            server.proxy.reset()
            time.sleep(window_s)
            counts = server.proxy.reset()
        finally:
            if holder is not None:
                holder.terminate()
                holder.wait(timeout=30)
    kinds, keys = _by_kind(counts, "kinds"), _by_kind(counts, "keys")
    per_minute = 60 / float(counts["seconds"])  # type: ignore[arg-type]
    cells = [f"{kinds.get(k, 0) * per_minute:.1f}" for k in ("put", "list", "get", "head")]
    cells += [f"{usd(kinds, tier) * per_minute * MINUTES_PER_MONTH:.2f}" for tier in TIERS]
    patterns = [f"- `{key}`: {n * per_minute:.1f}" for key, n in list(keys.items())[:TOP_KEYS]]
    top = ["", f"Top request patterns, {label} (per minute):", "", *patterns]
    return f"| {label} | {' | '.join(cells)} |", top


def _servers(workers: int, grpc_port: bool = False) -> str:
    if grpc_port:
        return (
            "One `lakepubsub serve --grpc-port` process: the clients reach grpcio on a "
            "port of its own, not through the one port's relay."
        )
    if workers == 1:
        return "One `lakepubsub serve` process."
    return (
        f"`lakepubsub serve --workers {workers}`: {workers} processes on one port, each a "
        "peer owning some of the topics; server CPU is their sum; commits per "
        "message are not collected (n/a)."
    )


def load_report(
    results: list[LoadResult],
    profile: str,
    client: str = "python",
    workers: int = 1,
    grpc_port: bool = False,
) -> list[str]:
    if not results:
        return []
    lines = [
        "",
        f"## Load (profile `{profile}`)",
        "",
        f"{_servers(workers, grpc_port)} Google's {CLIENTS[client]}, default batching unless "
        "*single*; open loop; one StreamingPull subscriber per topic. Requests and "
        "commits from the first publish until the subscriber had every message. "
        "*placed*: requests to a directory bucket (the intake with `--intake-bucket`) "
        "at Express One Zone prices, the others at Standard. *$/month*: the run's "
        "request rate for a month, at Standard prices; *steady*: the same from the "
        f"requests between {STEADY_FROM:.0%} of the load's seconds and its end, without "
        "the first reads of every table (once per process) and the drain after the load.",
        "",
        "| case | PUT/1M | GET/1M | HEAD/1M | LIST/1M | $/1M Standard | $/1M Express "
        "| $/1M placed | $/month | $/month steady | msgs/topic commit | msgs/intake commit "
        "| msgs/lease commit "
        "| publish p50/p99 ms | e2e p50/p99 ms | failures | duplicates | CPU s server/moto/proxy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ack = r.publish.get("ack_ms", {})
        e2e = r.delivery.get("e2e_ms", {})
        assert isinstance(ack, dict) and isinstance(e2e, dict)
        per_commit = " | ".join(
            f"{r.messages / max(1.0, r.commits.get(t, 0.0)):.1f}" if r.commits else "n/a"
            for t in ("messages", "intake", "leases")
        )
        lines.append(
            f"| {r.label} | {r.per_million('put') + r.per_million('post'):,.0f} "
            f"| {r.per_million('get'):,.0f} | {r.per_million('head'):,.0f} "
            f"| {r.per_million('list'):,.0f} "
            f"| {r.usd_per_million('standard'):.3f} | {r.usd_per_million('express'):.3f} "
            f"| {r.usd_per_million('placed'):.3f} | {r.usd_per_month():.2f} "
            f"| {r.usd_per_month_steady():.2f} "
            f"| {per_commit} "
            f"| {ack['p50']:.0f} / {ack['p99']:.0f} | {e2e['p50']:.0f} / {e2e['p99']:.0f} "
            f"| {r.publish.get('failures')} | {r.delivery.get('duplicates')} "
            f"| {r.cpu_s['server']:.1f} / {r.cpu_s['moto']:.1f} / {r.cpu_s['proxy']:.1f} |"
        )
    for r in results:
        lines += _calls(r)
        lines += _by_window(r)
        lines += _steady_patterns(r)
    return lines


def _by_window(result: LoadResult) -> list[str]:
    """The publish latency's median for each 5 s of the publisher's schedule: a run
    that falls behind from its first seconds (first reads, start-up) or tips later."""
    medians = result.publish.get("ack_p50_ms_by_window")
    if not isinstance(medians, list) or not medians:
        return []
    each = ", ".join("-" if m < 0 else f"{m:,.0f}" for m in medians)
    return ["", f"Publish p50 (ms) by 5 s of the schedule, {result.label}: {each}."]


def _calls(result: LoadResult) -> list[str]:
    """The unary gRPC calls the server answered per message of a load case: how much
    the clients batched their publishes, acks and deadline changes."""
    if not result.calls:
        return []
    each = ", ".join(
        f"{method} {n / max(1, result.messages):.2f}"
        for method, n in sorted(result.calls.items(), key=lambda item: -item[1])
        if n > 0
    )
    return ["", f"Unary gRPC calls per message, {result.label}: {each}."]


def _steady_patterns(result: LoadResult) -> list[str]:
    """A load case's most frequent request patterns in its steady window, per minute
    and in dollars a month at Standard prices: where its steady bill comes from."""
    if not result.steady_keys or result.steady_s <= 0:
        return []
    per_minute = 60 / result.steady_s
    lines = ["", f"Top request patterns of the steady window, {result.label} (per minute):", ""]
    for key, n in list(result.steady_keys.items())[:STEADY_TOP_KEYS]:
        kind = key.partition(" ")[0]
        monthly = usd({kind: n}, "standard") * SECONDS_PER_MONTH / result.steady_s
        lines.append(f"- `{key}`: {n * per_minute:.1f} (${monthly:.2f} a month)")
    return lines


def report(idle_cases: list[tuple[str, list[str]]], profile: str, window_s: float) -> list[str]:
    lines = [
        "# lakepubsub on S3: requests counted at the proxy",
        "",
        f"`python -m bench s3` — moto behind `bench/harness/s3_proxy.py` (profile `{profile}`).",
    ]
    if not idle_cases:
        return lines
    lines += [
        "",
        "## Idle",
        "",
        f"One `lakepubsub serve` process; a window of {window_s:.0f} s after a "
        f"{WARMUP_S:.0f} s warm-up.",
        "",
        "| case | PUT/min | LIST/min | GET/min | HEAD/min | $/month Standard | $/month Express |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [row for row, _ in idle_cases]
    return lines + [line for _, top in idle_cases for line in top]


def main(argv: Sequence[str] | None = None) -> None:
    parser = out.parser(__doc__ or "")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="zero")
    parser.add_argument(
        "--cases",
        default="idle,load,flush,backlog",
        help="idle, load, flush, backlog; many: load's many-topic case alone",
    )
    parser.add_argument("--flush-windows", default="25,100,250,1000", help="flush case's flush ms")
    parser.add_argument("--intake", action="store_true", help="every case with LAKEPUBSUB_INTAKE=1")
    parser.add_argument("--topics", type=int, default=0, help="of the many-topics case (20)")
    parser.add_argument("--rate-each", type=float, default=0.0, help="msgs/s a topic of it (10)")
    parser.add_argument("--rate", type=float, default=0.0, help="msgs/s, batched (3000; quick 300)")
    parser.add_argument("--seconds", type=float, default=0.0, help="each load case (60; quick 20)")
    parser.add_argument("--intake-bucket", help="the intake's own bucket (LAKEPUBSUB_INTAKE_LAKE)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every server")
    parser.add_argument(
        "--client", choices=("python", "go"), default="python",
        help="load cases' Google client: Python (bench/s3/load.py) or Go (bench/loadgen)",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=1, help="load cases' serve --workers")
    parser.add_argument(
        "--grpc-port", action="store_true",
        help="load cases' clients on serve --grpc-port, not through the one port's relay",
    )  # fmt: skip
    args = parser.parse_args(argv)
    cases = set(args.cases.split(","))
    base_env = dict(item.split("=", 1) for item in args.env)
    if args.intake:
        base_env["LAKEPUBSUB_INTAKE"] = "1"
    window = QUICK_WINDOW_S if args.quick else WINDOW_S
    many = f"{IDLE_RESOURCES} topics, {IDLE_RESOURCES} subscriptions, {IDLE_RESOURCES} streams"
    results = []
    if "idle" in cases:
        one = "1 topic, 1 subscription, no client"
        results.append(idle(one, 1, False, window, args.profile, base_env))
        results.append(idle(many, IDLE_RESOURCES, True, window, args.profile, base_env))
    lines = report(results, args.profile, window)
    rate, seconds = (300.0, 20.0) if args.quick else (3000.0, 60.0)
    rate, seconds = args.rate or rate, args.seconds or seconds
    hot = args.intake_bucket
    small = args.rate_each or (5.0 if args.quick else 10.0)
    topics = args.topics or (5 if args.quick else 20)
    # Each load case with this run's profile and intake bucket.
    run = partial(
        load, seconds=seconds, profile=args.profile, intake_bucket=hot, client=args.client,
        workers=args.workers, grpc_port=args.grpc_port,
    )  # fmt: skip
    batched = f"1 topic, {rate:.0f} msgs/s, batched"
    loading = cases & {"load", "many", "flush"}  # cases that run clients against a server
    loads = []
    if "load" in cases:
        loads.append(run(batched, 1, rate, single=False, env=base_env))
    if cases & {"load", "many"}:
        spread = f"{topics} topics x {small:.0f} msgs/s, single"
        loads.append(run(spread, topics, topics * small, single=True, env=base_env))
    lines += load_report(loads, args.profile, args.client, args.workers, args.grpc_port)
    if "flush" in cases:
        windows = [float(w) for w in args.flush_windows.split(",")]
        sweep = [
            run(f"{batched}, flush {w:.0f} ms", 1, rate, single=False,
                env={**base_env, "LAKEPUBSUB_FLUSH_MS": str(w)})
            for w in windows
        ]  # fmt: skip
        lines += load_report(sweep, args.profile, args.client, args.workers, args.grpc_port)
    if "backlog" in cases:
        files, runs = (10, 1) if args.quick else (50, 3)
        lines += backlog.report(backlog.run(files, args.profile, runs), args.profile)
    every = {"idle", "load", "flush", "backlog"}
    name = "s3" if cases >= every else "s3-" + "-".join(sorted(cases & (every | {"many"})))
    if args.profile != "zero":
        name += f"-{args.profile}"
    if args.intake:
        name += "-intake"
    if hot:
        name += "-intake-express"
    if args.client == "go" and loading:
        name += "-go"
    if args.workers > 1 and loading:
        name += f"-workers{args.workers}"
    if args.grpc_port and loading:
        name += "-grpc-port"
    out.write(args.out, f"{name}.md", lines)


if __name__ == "__main__":
    main()
