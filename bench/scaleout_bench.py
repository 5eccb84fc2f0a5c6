"""One topic and one subscription served by several API processes on one lake.

The phases, figures and checks: bench/README.md, "Scale-out". Writes ``scaleout.md``
(``scaleout-s3.md`` with ``--s3``). The measurement behind issue 17: one topic is one
Delta table; the servers peer (lakepubsub/peering/), so one of them commits for it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import psutil

from bench import peer_lakepubsub as lps
from bench import report
from bench.clients import Context, Report, run_clients, span_s
from bench.harness.lakepubsub_server import LakePubSubServer
from bench.harness.meter import ProcessMeter

CONSUMERS = 4
PULL_MAX = 1000
# A consumer stops after this many empty pulls in a row past the phase's end.
EMPTY_PULLS_TO_STOP = 2
T = TypeVar("T")


@dataclass(frozen=True)
class Usage:
    server_cpu_s: float  # summed over the servers
    lake_cpu_s: float | None  # the moto S3 server's (``--s3``)
    busy: float  # share of the machine's CPU time in use during the phase


@dataclass(frozen=True)
class Phase:
    servers: int
    phase: str
    messages: int
    seconds: float
    shares: tuple[float, ...]
    commits: int
    conflicts: int
    usage: Usage

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def per_million(self, count: int) -> float:
        return count * 1_000_000 / self.messages if self.messages else 0.0


@contextlib.contextmanager
def servers_on_one_lake(count: int, s3: bool) -> Iterator[list[LakePubSubServer]]:
    """``count`` API processes on one fresh lake (the first one's)."""
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(LakePubSubServer(s3=s3))
        others = [stack.enter_context(LakePubSubServer(joins=first)) for _ in range(count - 1)]
        yield [first, *others]


def metered(servers: list[LakePubSubServer], run: Callable[[], T]) -> tuple[T, Usage]:
    """``run()``, and over it the servers' and moto's CPU seconds (bench/harness/meter.py)
    and the share of the machine's CPU time in use."""
    moto = servers[0].moto
    with contextlib.ExitStack() as stack:
        meters = [stack.enter_context(ProcessMeter(server.pid)) for server in servers]
        lake = stack.enter_context(ProcessMeter(moto.pid)) if moto is not None else None
        before = psutil.cpu_times()
        result = run()
        after = psutil.cpu_times()
    total = sum(after) - sum(before)
    idle = after.idle - before.idle + getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0)
    busy = 1 - idle / total if total else 0.0
    lake_cpu_s = lake.usage.cpu_s if lake is not None else None
    return result, Usage(sum(m.usage.cpu_s for m in meters), lake_cpu_s, busy)


def counters(servers: list[LakePubSubServer]) -> tuple[int, int]:
    """Delta commits and commit conflicts so far, summed over every server."""
    now = [server.counters() for server in servers]
    return sum(c.commits for c in now), sum(c.conflicts for c in now)


def _publisher(url: str, topic: str, batch: int, seconds: float, ctx: Context) -> Report:
    body = lps._publish_body(0, batch)
    sent = 0
    with lps._client(url) as client:
        clock = ctx.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sent += len(lps._post(client, f"/v1/{topic}:publish", body)["messageIds"])
    return clock.report(sent)


def _consumer(url: str, sub: str, seconds: float, ctx: Context) -> Report:
    acked = empty = 0
    pull = lps._pull_body(PULL_MAX)
    with lps._client(url) as client:
        clock = ctx.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end and empty < EMPTY_PULLS_TO_STOP:
            received = lps._post(client, f"/v1/{sub}:pull", pull).get("receivedMessages", [])
            empty = 0 if received else empty + 1
            if received:
                lps._post(client, f"/v1/{sub}:acknowledge", lps._ack_body(received))
                acked += len(received)
    return clock.report(acked)


def timed(
    job: Callable[..., Report], servers: list[LakePubSubServer], count: int, *args: object
) -> tuple[float, dict[str, int]]:
    """Run ``count`` client processes (client i on server i mod N) together; their span in
    seconds and the messages of each server."""
    urls = [server.url for server in servers]
    jobs = [partial(job, urls[i % len(urls)], *args) for i in range(count)]
    # The servers are metered by ``metered``.
    reports, _ = run_clients(jobs, server_pid=servers[0].pid, preload=lps.__name__)
    per_server = dict.fromkeys(urls, 0)
    for i, done in enumerate(reports):
        per_server[urls[i % len(urls)]] += done.messages
    return span_s(reports), per_server


def run_servers(n: int, clients: int, batch: int, seconds: float, s3: bool) -> list[Phase]:
    with servers_on_one_lake(n, s3) as servers:
        topic, sub = servers[0].topic_and_subscription(ack_deadline_s=60)
        phases = []
        steps: list[tuple[str, Callable[..., Report], int, tuple[object, ...]]] = [
            ("publish", _publisher, clients, (topic, batch, seconds)),
            ("pull + ack", _consumer, CONSUMERS, (sub, seconds)),
        ]
        for name, job, count, args in steps:
            before = counters(servers)
            (wall, per), use = metered(servers, partial(timed, job, servers, count, *args))
            after = counters(servers)
            messages = sum(per.values())
            if name == "publish":
                servers[0].check_stored(topic, messages)  # nothing lost, nothing twice
            phases.append(
                Phase(n, name, messages, wall, _shares(per, messages),
                      after[0] - before[0], after[1] - before[1], use)
            )  # fmt: skip
        return phases


def _shares(per: dict[str, int], total: int) -> tuple[float, ...]:
    return tuple(v / total if total else 0.0 for v in per.values())


def write_report(phases: list[Phase], args: argparse.Namespace) -> list[str]:
    where = "moto S3" if args.s3 else "local lake"
    one = {p.phase: p.rate for p in phases if p.servers == 1}
    lines = [
        *report.header(
            f"One topic, one subscription, several API processes ({where})",
            command=f"python -m bench scaleout --servers {args.servers} --seconds "
            f"{args.seconds:g} --clients {args.clients}{' --s3' if args.s3 else ''}",
            about=f"publishers send batches of {args.batch} 1 KiB messages back to back, client "
            f"i to server i mod N; {CONSUMERS} consumers pull {PULL_MAX} and ack. Every server, "
            "client and the lake share the machine's cores.",
        ),
        "| servers | phase | messages | msgs/s | vs 1 server | each server's share"
        " | commits / 1M | conflicts / 1M | server CPU µs / msg"
        + (" | moto CPU µs / msg" if args.s3 else "")
        + " | machine busy |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"
        + (" ---: |" if args.s3 else "")
        + " ---: |",
    ]
    for p in phases:
        base = one.get(p.phase)
        ratio = f"{p.rate / base:.2f}x" if base else ""
        shares = " / ".join(f"{s:.0%}" for s in p.shares)
        lines.append(
            f"| {p.servers} | {p.phase} | {p.messages:,} | {p.rate:,.0f} | {ratio} | {shares} |"
            f" {p.per_million(p.commits):,.0f} | {p.per_million(p.conflicts):,.0f} |"
            f" {p.usage.server_cpu_s * 1e6 / max(p.messages, 1):,.1f} |"
            + (
                f" {p.usage.lake_cpu_s * 1e6 / max(p.messages, 1):,.1f} |"
                if p.usage.lake_cpu_s is not None
                else ""
            )
            + f" {p.usage.busy:.0%} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.parser(__doc__ or "", quick="2 s phases (CI)")
    parser.add_argument("--servers", default="1,2", help="server counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=8, help="publishing clients")
    parser.add_argument("--batch", type=int, default=100, help="messages per publish")
    parser.add_argument("--s3", action="store_true", help="the lake on a moto S3 server")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 2.0
    phases: list[Phase] = []
    for n in (int(s) for s in args.servers.split(",")):
        phases += run_servers(n, args.clients, args.batch, args.seconds, args.s3)
        print(f"{n} server(s) done", file=sys.stderr)
    name = "scaleout" + ("-s3" if args.s3 else "") + ("-quick" if args.quick else "") + ".md"
    report.write(args.out, name, write_report(phases, args))
