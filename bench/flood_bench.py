"""Overload: single-message REST publishes at twice the server's capacity.

What it sends, counts and checks: bench/README.md, "Overload". Writes ``flood.md``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from bench import gobuild
from bench import report as out
from bench.grpc_bench import run_loadgen
from bench.harness.lakepubsub_server import LakePubSubServer
from bench.report import quantile

# Closed-loop workers that find the capacity (enough to keep one process busy).
PUBLISHERS = 32
CAPACITY_S = 10.0
QUICK_CAPACITY_S = 3.0
QUICK_SECONDS = 5.0
# More than the server's admission limit (constants.MAX_INFLIGHT_REQUESTS, 512).
CONNECTIONS = 2048


def run(*, seconds: float, factor: float, capacity_s: float, connections: int) -> list[str]:
    binary = gobuild.build()
    with LakePubSubServer(serve=True) as server:
        common = ["-system", "rest", "-mode", "flood", "-url", server.url]
        closed_loop = [*common, "-rate", "0", "-publishers", str(PUBLISHERS), "-messages", "1000"]
        for duration in ("1", f"{capacity_s:g}"):  # a warm-up second, then the capacity
            closed, closed_usage = run_loadgen(
                binary,
                [*closed_loop, "-topic", server.create_topic(), "-duration", duration],
                server_pid=server.pid,
            )
        capacity = closed["published"] / closed.elapsed_s
        rate = factor * capacity
        requests = int(rate * seconds)
        flood_topic = server.create_topic()
        started = time.monotonic()
        report, usage = run_loadgen(
            binary,
            [*common, "-topic", flood_topic, "-rate", f"{rate:.1f}",
             "-messages", str(requests), "-connections", str(connections)],
            server_pid=server.pid,
        )  # fmt: skip
        wall_s = time.monotonic() - started
        stored = server.topic_head(flood_topic)
    statuses: dict[str, int] = report["statuses"] or {}
    failures: dict[str, int] = report.doc.get("transport_errors") or {}
    accepted = statuses.get("200", 0)
    latencies = report.latencies_ms
    answered = sum(statuses.values())
    lines = [
        *out.header(
            "Overload: single-message REST publishes past capacity",
            command=f"python -m bench flood --seconds {seconds:g} --factor {factor:g}"
            f" --connections {connections}",
            about="one `lakepubsub serve` process, local lake, 1 KiB messages, Go load generator "
            "(`bench/loadgen`, `-system rest -mode flood`)",
        ),
        f"- **capacity** (closed loop, {PUBLISHERS} workers, {capacity_s:g} s): "
        f"{capacity:,.0f} publishes/s; p50 / p99 "
        f"{quantile(closed.latencies_ms, 0.5):.1f} / "
        f"{quantile(closed.latencies_ms, 0.99):.1f} ms; server CPU "
        f"{closed_usage.cpu_s / max(1, closed['published']) * 1e6:,.0f} µs per publish",
        f"- **flood**: {rate:,.0f} requests/s open loop ({factor:g}x capacity) for "
        f"{seconds:g} s: {requests:,} requests, all sent in {report['publish_s']:.1f} s, "
        f"the last answered after {report.elapsed_s:.1f} s",
        f"  - answered: {answered:,} of {requests:,} "
        f"({', '.join(f'{n:,} x {s}' for s, n in sorted(statuses.items())) or 'none'})",
        f"  - no answer: {sum(failures.values()):,} "
        f"({', '.join(f'{n:,} {k}' for k, n in sorted(failures.items())) or 'none'}); "
        f"connection resets: {failures.get('reset', 0)}",
        f"  - accepted (200): {accepted:,}, {accepted / report.elapsed_s:,.0f}/s; latency p50 / "
        f"p99 / max {quantile(latencies, 0.5):.1f} / {quantile(latencies, 0.99):.1f} / "
        f"{max(latencies, default=float('nan')):.1f} ms",
        f"  - the topic holds {stored:,} messages "
        f"({'= the accepted publishes' if stored == accepted else 'accepted: ' + str(accepted)})",
        f"  - server: peak RSS {usage.peak_rss_bytes / 2**20:,.0f} MiB, CPU {usage.cpu_s:.1f} s "
        f"over {wall_s:.1f} s",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = out.parser(__doc__ or "", quick="a few seconds (CI)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the flood")
    parser.add_argument("--factor", type=float, default=2.0, help="times the capacity")
    parser.add_argument(
        "--connections", type=int, default=CONNECTIONS, help="connections of the flood at most"
    )
    args = parser.parse_args(argv)
    lines = run(
        seconds=QUICK_SECONDS if args.quick else args.seconds,
        factor=args.factor,
        capacity_s=QUICK_CAPACITY_S if args.quick else CAPACITY_S,
        connections=args.connections,
    )
    out.write(args.out, "flood.md", lines)
