"""Before and after: the gRPC drain, batched-publish and callback-latency cases of ``bench grpc``
against the server of two revisions, run in turn (base, head, base, head, ...), so
that both meet the same drift of a shared machine.

    python -m bench ab --base REV [--head REV] [--rounds 3] [--drain 1000000]
        [--publish 0] [--latency-s 30]

``--base`` (and ``--head``, by default the working tree) are checked out into
temporary git worktrees; only the server runs their code: the clients (Google's Go
client, ``bench/loadgen``) and this harness are this checkout's. Each run is one
fresh ``lakepubsub serve`` with its clients on ``--grpc-port``. Writes
``ab-<name>.md``: every run, then the median of each side and head ÷ base.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench import gobuild, grpc_bench, report
from bench import peer_lakepubsub as lps
from bench import workload as w
from bench.harness.lakepubsub_server import REPO, servers

# The figures each case reports, in the report's order.
DRAIN = (w.THROUGHPUT, w.SERVER_CPU_PER_MILLION)
PUBLISH = (w.THROUGHPUT, w.SERVER_CPU_PER_MILLION)
LATENCY = ("latency_p50", "latency_p99", "latency_max", w.SERVER_CPU_PER_MILLION)
LABELS = {
    ("drain", w.THROUGHPUT): "drain msgs/s",
    ("drain", w.SERVER_CPU_PER_MILLION): "drain CPU µs/msg",
    ("publish", w.THROUGHPUT): "publish msgs/s",
    ("publish", w.SERVER_CPU_PER_MILLION): "publish CPU µs/msg",
    ("latency", "latency_p50"): "latency p50 ms",
    ("latency", "latency_p99"): "p99 ms",
    ("latency", "latency_max"): "max ms",
    ("latency", w.SERVER_CPU_PER_MILLION): "latency CPU µs/msg",
}
# Figures from this size on are shown whole; smaller ones with three digits.
WHOLE_FROM = 100
TIMES = "\N{MULTIPLICATION SIGN}"


@contextlib.contextmanager
def checkout(revision: str | None) -> Iterator[Path]:
    """``revision`` in a temporary git worktree (None: this working tree)."""
    if revision is None:
        yield REPO
        return
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as parent:
        path = Path(parent) / "tree"
        git = ["git", "-C", str(REPO), "worktree"]
        subprocess.run([*git, "add", "--detach", str(path), revision], check=True,
                       capture_output=True)  # fmt: skip
        try:
            yield path
        finally:
            subprocess.run([*git, "remove", "--force", str(path)], check=False,
                           capture_output=True)  # fmt: skip


def one_run(code: Path, binary: Path, workload: grpc_bench.GrpcWorkload) -> list[w.Result]:
    """The drain, publish and latency cases against one fresh server running ``code``."""
    found: list[w.Result] = []
    with servers(fresh=True, serve=True, grpc_port=True, code=code) as make:
        if workload.drain_messages:
            with make() as server:
                side = lps.Side(server, workload.ack_deadline_s)
                found += grpc_bench.run_drain(side, binary, workload)
        if workload.publish_messages:
            with make() as server:
                side = lps.Side(server, workload.ack_deadline_s)
                found += grpc_bench.run_publish(side, binary, workload, single=False)
        if workload.latency_duration_s:
            with make() as server:
                side = lps.Side(server, workload.ack_deadline_s)
                found += grpc_bench.run_latency(side, binary, workload)
    return found


def figures(
    results: Sequence[w.Result], workload: grpc_bench.GrpcWorkload
) -> dict[tuple[str, str], float]:
    """A run's figures by case ("drain", "publish", "latency") and metric."""
    cases = {
        workload.drain_case: ("drain", DRAIN),
        workload.publish_case: ("publish", PUBLISH),
        workload.latency_case: ("latency", LATENCY),
    }
    found = {}
    for r in results:
        kind, metrics = cases.get(r.case, ("", ()))
        if r.metric in metrics:
            found[kind, r.metric] = r.values[0]
    return found


def lines_of(runs: list[tuple[str, dict[tuple[str, str], float]]]) -> list[str]:
    """Every run, the median of each side, and head ÷ base."""
    order = [
        *(("drain", m) for m in DRAIN),
        *(("publish", m) for m in PUBLISH),
        *(("latency", m) for m in LATENCY),
    ]
    keys = [k for k in order if any(k in found for _, found in runs)]
    rows = [[side, *(_cell(found.get(k)) for k in keys)] for side, found in runs]
    medians = {
        side: {k: statistics.median([f[k] for s, f in runs if s == side and k in f]) for k in keys}
        for side in ("base", "head")
    }
    rows += [[f"median, {side}", *(_cell(medians[side][k]) for k in keys)] for side in medians]
    rows.append(["head ÷ base", *(
        f"{medians['head'][k] / medians['base'][k]:.3g}" + TIMES if medians["base"][k] else ""
        for k in keys
    )])  # fmt: skip
    return report.table(["run", *(LABELS[k] for k in keys)], rows)


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.3g}" if value < WHOLE_FROM else f"{value:,.0f}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.parser(__doc__ or "", quick="tiny sizes, one round (CI)")
    parser.add_argument("--base", required=True, help="the revision before")
    parser.add_argument("--head", default=None, help="the revision after (default: working tree)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side")
    parser.add_argument("--drain", type=int, default=1_000_000, help="drain messages (0: none)")
    parser.add_argument("--publish", type=int, default=0,
                        help="batched-publish messages, all publishers (0: none)")  # fmt: skip
    parser.add_argument("--latency-s", type=float, default=30.0, help="latency seconds (0: none)")
    parser.add_argument("--name", default="grpc", help="the report is ab-NAME.md")
    args = parser.parse_args(argv)
    rounds, drain, publish, latency_s = args.rounds, args.drain, args.publish, args.latency_s
    if args.quick:
        rounds, drain, publish, latency_s = 1, 2_000, 2_000 if publish else 0, 1.0
    workload = dataclasses.replace(
        grpc_bench.full(),
        drain_messages=drain,
        publish_messages=publish,
        latency_duration_s=latency_s,
        runs=1,
    )
    binary = gobuild.build()
    heads = {"base": args.base, "head": args.head or "the working tree"}
    runs: list[tuple[str, dict[tuple[str, str], float]]] = []
    step = report.progress()
    with checkout(args.base) as base, checkout(args.head) as head:
        for round_ in range(rounds):
            for side, code in (("base", base), ("head", head)):
                step(f"round {round_ + 1}: {side}")
                runs.append((side, figures(one_run(code, binary, workload), workload)))
    about = f"base {heads['base']}, head {heads['head']}, {rounds} rounds"
    lines = [
        *report.header(
            f"Before and after: {args.name}", command=report.command("ab", argv), about=about
        ),
        f"Drain of {drain:,} messages; {publish:,} published by {workload.publishers} "
        "publishers with the client's default batching (0: not run); publish → callback at "
        f"{workload.latency_rate_per_s} msgs/s for {latency_s:g} s. CPU is the server's, "
        "per million messages (µs per message).",
        "",
        *lines_of(runs),
    ]
    report.write(args.out, f"ab-{args.name}.md", lines)
