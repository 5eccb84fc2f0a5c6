"""The side-by-side benchmark: lakepubsub over REST and gRPC and NATS JetStream, one run.

NATS JetStream, lakepubsub on a local lake (with ``--s3`` also on moto S3 at
``S3_FRACTION`` of the message counts), then the gRPC cases. Writes ``report.md`` and
its charts; a full run into ``bench/results/`` also puts its tables into
bench/README.md, which says what every case and figure is.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

from bench import grpc_bench, peer_nats
from bench import peer_lakepubsub as lps
from bench import report as report_
from bench import workload as w
from bench.charts import LABELS, latency_chart, throughput_chart
from bench.harness.lakepubsub_server import S3_KINDS
from bench.harness.nats_server import find_nats_server
from bench.report import (
    NONE,
    RESULTS,
    Target,
    cell,
    executable_version,
    load,
    now,
    ratio,
    side_by_side,
)
from bench.report import software as software_
from bench.runs import Run
from bench.s3 import prices

README = Path(__file__).parent / "README.md"
# The README's copy of the latest table sits between these lines.
README_START = "<!-- bench:latest:start -->"
README_END = "<!-- bench:latest:end -->"

# Requests per publish client in --quick (CI) runs.
QUICK_ROUND_TRIPS = 40
# Share of the message counts that the moto S3 runs publish.
S3_FRACTION = 0.1

# Figures in the side-by-side table; the storage ones get a section of their own.
_SIDE_BY_SIDE = (
    w.THROUGHPUT,
    w.BATCH_LATENCY_P50,
    w.BATCH_LATENCY_P99,
    w.LATENCY_P50,
    w.LATENCY_P99,
    w.LATENCY_MAX,
    w.ACHIEVED_RATE,
    w.DRAIN_TIME,
    w.SERVER_CPU_PER_MILLION,
    w.SERVER_PEAK_RSS,
    w.CLIENT_CPU_PER_MILLION,
)
# The gRPC cases' phase (both systems) in the report's timing line.
GRPC_PHASE = "grpc"
_PHASES = {**LABELS, GRPC_PHASE: "gRPC cases"}
# The pull + ack target is set for this many consumers (bench/README.md).
_TARGET_PULL_CONSUMERS = 4

Key = tuple[str, str, str]


def ci_workload() -> w.Workload:
    """The quick workload with every publish client capped at ``QUICK_ROUND_TRIPS`` requests."""
    quick = w.quick()
    publish = tuple(
        dataclasses.replace(
            case,
            messages_per_client=min(case.messages_per_client, QUICK_ROUND_TRIPS * case.batch_size),
        )
        for case in quick.publish
    )
    return dataclasses.replace(quick, publish=publish)


def scaled(workload: w.Workload, fraction: float) -> w.Workload:
    """The same cases with ``fraction`` of the messages (whole batches, at least one)."""

    def count(n: int, unit: int = 1) -> int:
        return max(unit, round(n * fraction) // unit * unit)

    replace = dataclasses.replace
    return replace(
        workload,
        publish=tuple(
            replace(c, messages_per_client=count(c.messages_per_client, c.batch_size))
            for c in workload.publish
        ),
        pull=tuple(replace(c, backlog_messages=count(c.backlog_messages)) for c in workload.pull),
        drain=tuple(replace(c, backlog_messages=count(c.backlog_messages)) for c in workload.drain),
    )


def run(
    workload: w.Workload,
    *,
    s3_workload: w.Workload | None = None,
    fresh_server: bool = True,
    progress: Callable[[str], None] | None = None,
    grpc_workload: grpc_bench.GrpcWorkload | None = None,
    rest: bool = True,
    checkpoint: Callable[[Run], None] | None = None,
) -> Run:
    """The phases in the module's order. A phase that fails is recorded in
    ``Run.failures`` and the next one still runs; ``checkpoint`` gets the run so
    far after every phase and every gRPC case.
    """
    done = Run(
        workload, s3_workload, fresh_server, [], {}, {}, os.getloadavg(), (0, 0, 0),
        grpc_workload=grpc_workload, rest=rest, partial=True,
    )  # fmt: skip

    def save() -> None:
        done.load_after = os.getloadavg()
        if checkpoint:
            checkpoint(done)

    phases: list[tuple[str, Callable[..., list[w.Result]]]] = []
    if rest:
        phases += [
            (peer_nats.SYSTEM, partial(peer_nats.run_all, workload)),
            (lps.SYSTEM, partial(lps.run_all, workload, fresh_server=fresh_server)),
        ]
    if rest and s3_workload is not None:
        phases.append(
            (lps.SYSTEM_S3, partial(lps.run_all, s3_workload, s3=True, fresh_server=fresh_server))
        )
    for system, phase in phases:
        started = time.monotonic()
        samples: list[float] = []
        try:
            done.results += phase(progress=progress, latency_samples=samples)
        except Exception as exc:  # the other phases still run; the report shows this one
            error = grpc_bench.describe(exc)
            done.failures.append(grpc_bench.Failure(system, "every case of the phase", error))
            if progress:
                progress(f"{system}: FAILED, the phase stopped: {error[:300]}")
        done.elapsed_s[system] = time.monotonic() - started
        if samples:
            done.latency_samples[system] = samples
        save()
    if grpc_workload is not None:
        _run_grpc(done, grpc_workload, progress=progress, save=save)
    done.load_after = os.getloadavg()
    done.partial = False
    return done


def _run_grpc(
    done: Run,
    workload: grpc_bench.GrpcWorkload,
    *,
    progress: Callable[[str], None] | None,
    save: Callable[[], None],
) -> None:
    """The gRPC cases; their results so far join the run's after every case."""
    started = time.monotonic()
    results, failures = list(done.results), list(done.failures)

    def merge(outcome: grpc_bench.Outcome) -> None:
        done.results = results + outcome.results
        done.failures = failures + outcome.failures
        done.grpc_latency_samples = outcome.latency_samples
        done.elapsed_s[GRPC_PHASE] = time.monotonic() - started
        save()

    try:
        outcome = grpc_bench.run_all(
            workload, fresh_server=done.fresh_server, progress=progress, checkpoint=merge
        )
    except Exception as exc:  # a bug in the harness: keep what was measured before it
        error = grpc_bench.describe(exc)
        done.failures.append(grpc_bench.Failure(GRPC_PHASE, "the gRPC cases not yet run", error))
        done.elapsed_s[GRPC_PHASE] = time.monotonic() - started
        return
    merge(outcome)


def _index(results: Iterable[w.Result], system: str) -> dict[Key, w.Result]:
    return {(r.case, r.metric, r.unit): r for r in results if r.system == system}


def side_by_side_table(results: Sequence[w.Result]) -> str:
    """lakepubsub (local lake) and NATS JetStream per case and figure, with lakepubsub ÷ NATS."""
    labels = ("lakepubsub", "NATS JetStream")
    found = side_by_side(
        results, lps.SYSTEM, peer_nats.SYSTEM, labels, lambda key: key[1] in _SIDE_BY_SIDE
    )
    return "\n".join(found)


def targets(workload: w.Workload) -> list[Target]:
    """The targets (bench/README.md) for the REST API, as figures of this workload's cases."""
    publish = {(c.batch_size, c.clients): c.name for c in workload.publish}
    pull = next(c.name for c in workload.pull if c.consumers == _TARGET_PULL_CONSUMERS)
    found = [
        Target(
            f"publish, 8 clients, batches of {batch:,}",
            publish[batch, 8], w.THROUGHPUT, w.MSGS_PER_S, 50_000,
        )
        for batch in (100, 1000)
    ]  # fmt: skip
    found += [
        Target(
            f"single-message publish {metric.removeprefix('batch_latency_')}, "
            f"{_count(clients, 'client')}",
            publish[1, clients], metric, w.MS, bound, at_least=False,
        )
        for clients in (1, 8)
        for metric, bound in ((w.BATCH_LATENCY_P50, 25), (w.BATCH_LATENCY_P99, 100))
    ]  # fmt: skip
    found.append(Target("pull + ack, 4 consumers", pull, w.THROUGHPUT, w.MSGS_PER_S, 20_000))
    found += [
        Target(
            f"Delta commits per delivered message, {case}",
            case, lps.DELTA_COMMITS_PER_MILLION, "commits/msg", 0.01, at_least=False,
            divisor=w.MILLION,
        )
        for case in (pull, *(d.name for d in workload.drain))
    ]  # fmt: skip
    return found


def targets_table(results: Sequence[w.Result], workload: w.Workload) -> str:
    ours = {(r.case, r.metric): r for r in results if r.system == lps.SYSTEM}
    peer = {(r.case, r.metric): r for r in results if r.system == peer_nats.SYSTEM}
    rows = []
    for t in targets(workload):
        if (result := ours.get((t.case, t.metric))) is not None:
            rows.append(
                (t.label, t.unit, *t.cells(result), cell(peer.get((t.case, t.metric)), t.divisor))
            )
    latency = workload.latency[0].name
    for metric in (w.LATENCY_P50, w.LATENCY_P99):
        if (result := ours.get((latency, metric))) is not None:
            label = f"end-to-end {metric.removeprefix('latency_')}, {latency}"
            rows.append((label, w.MS, cell(result), NONE, NONE, cell(peer.get((latency, metric)))))
    header = ["target (bench/README.md)", "unit", "lakepubsub median [min-max]", "target"]
    header += ["met", "NATS JetStream"]
    return "\n".join(report_.table(header, rows, right=2, centred=(4,)))


def _cost_per_million(by_kind: dict[str, w.Result]) -> w.Result | None:
    """USD of S3 requests per million messages, per run, from the per-kind request counts."""
    if not by_kind:
        return None
    runs = len(next(iter(by_kind.values())).values)
    costs = tuple(prices.usd({k: v.values[i] for k, v in by_kind.items()}) for i in range(runs))
    return w.Result(lps.SYSTEM_S3, "", "s3_request_cost", "USD/1M msgs", costs)


def storage_table(results: Sequence[w.Result], system: str) -> str:
    """Delta commits and conflicts per million messages, and on S3 requests and their cost."""
    found = [r for r in results if r.system == system]
    by_case = {(r.case, r.metric): r for r in found}
    s3 = any(r.metric == lps.s3_metric("put") for r in found)
    columns = ["Delta commits", "commit conflicts"]
    if s3:
        columns += [kind.upper() for kind in S3_KINDS] + ["request cost, USD"]
    rows = []
    for case in dict.fromkeys(r.case for r in found):
        cells = [
            cell(by_case.get((case, lps.DELTA_COMMITS_PER_MILLION))),
            cell(by_case.get((case, lps.COMMIT_CONFLICTS_PER_MILLION))),
        ]
        if s3:
            by_kind = {
                kind: by_case[case, lps.s3_metric(kind)]
                for kind in S3_KINDS
                if (case, lps.s3_metric(kind)) in by_case
            }
            cells += [cell(by_kind.get(kind)) for kind in S3_KINDS]
            cost = _cost_per_million(by_kind)
            cells.append(cell(cost, show=_usd))
        rows.append((case, *cells))
    return "\n".join(report_.table(["case (per 1M messages)", *columns], rows))


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:.3g}"


# The REST case each gRPC figure is shown beside: the closest one of the REST workload.
def _rest_counterparts(workload: w.Workload, grpc: grpc_bench.GrpcWorkload) -> dict[str, str]:
    publish = {(c.batch_size, c.clients): c.name for c in workload.publish}
    found = {
        # Google's Go client sends bundles of up to 100 messages by default.
        grpc.publish_case: publish.get((100, grpc.publishers), ""),
        grpc.single_case: publish.get((1, 1), ""),
        grpc.latency_case: next(
            (c.name for c in workload.latency if c.offered_rate_per_s == grpc.latency_rate_per_s),
            "",
        ),
        grpc.drain_case: next((c.name for c in workload.drain if c.consumers == 1), ""),
    }
    return {k: v for k, v in found.items() if v}


# As the side-by-side table's, the drain time first, no memory.
_GRPC_FIGURES = (
    w.DRAIN_TIME,
    *(m for m in _SIDE_BY_SIDE if m not in (w.DRAIN_TIME, w.SERVER_PEAK_RSS)),
)
_FAILED = "**failed**"


def grpc_table(
    results: Sequence[w.Result],
    failures: Sequence[grpc_bench.Failure],
    workload: w.Workload,
    grpc: grpc_bench.GrpcWorkload,
) -> str:
    """The gRPC cases: lakepubsub (Go client, gRPC) beside JetStream (Go client), and the
    closest REST case's figure from this run (the REST client is Python)."""
    ours, peer = _index(results, lps.SYSTEM), _index(results, peer_nats.SYSTEM)
    failed = {(f.system, f.case) for f in failures}
    rest = _rest_counterparts(workload, grpc)
    # Drain times of different backlogs do not compare.
    same_drain = any(c.backlog_messages == grpc.drain_messages for c in workload.drain)
    rows: list[tuple[str, ...]] = []
    for case in grpc.cases:
        ours_failed, peer_failed = (lps.SYSTEM, case) in failed, (peer_nats.SYSTEM, case) in failed
        metrics = [m for m in _GRPC_FIGURES for k in (*ours, *peer) if k[:2] == (case, m)]
        if not metrics:
            nothing = (_grpccell(None, ours_failed), _grpccell(None, peer_failed))
            rows.append((case, NONE, "", *nothing, "", "", ""))
        for metric in dict.fromkeys(metrics):
            unit = next(k[2] for k in (*ours, *peer) if k[:2] == (case, metric))
            mine, theirs = ours.get((case, metric, unit)), peer.get((case, metric, unit))
            twin = rest.get(case, "") if metric != w.DRAIN_TIME or same_drain else ""
            beside = ours.get((twin, metric, unit)) if twin else None
            rows.append((
                case, metric, unit, _grpccell(mine, ours_failed), _grpccell(theirs, peer_failed),
                ratio(mine, theirs), cell(beside), twin if beside else "",
            ))  # fmt: skip
    header = ["case", "metric", "unit", "lakepubsub gRPC", "NATS JetStream", "ratio"]
    header += ["lakepubsub REST, same run", "REST case"]
    return "\n".join(report_.table(header, rows, right=3, left=(7,)))


def _grpccell(result: w.Result | None, failed: bool) -> str:
    if result is None:
        return _FAILED if failed else NONE
    return f"{cell(result)} ({_FAILED} in some runs)" if failed else cell(result)


def machine_lines(done: Run) -> list[str]:
    nats = executable_version(find_nats_server(), "--version")
    software = (
        software_("lakepubsub", "deltalake", "pyarrow", "fastapi", "uvicorn")
        + f" ({software_('uvloop', 'httptools')}), {software_('httpx', 'orjson')}; "
        f"{nats}, {software_('nats-py')}; {software_('moto')}"
    )
    found = report_.machine_lines(
        done.load_before,
        done.load_after,
        stores="lakes, moto and the JetStream store",
        note="Other jobs shared the machine; figures are noisy.",
        software=software,
    )
    return found + ([grpc_bench.software_line()] if done.grpc_workload else [])


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _workload_lines(workload: w.Workload, *, fresh_server: bool) -> list[str]:
    publish = ", ".join(
        f"batches of {c.batch_size:,} from {_count(c.clients, 'client')}: {c.total_messages:,}"
        for c in workload.publish
    )
    pull = ", ".join(
        f"{_count(c.consumers, 'consumer')}: {c.backlog_messages:,}" for c in workload.pull
    )
    latency = ", ".join(
        f"{c.offered_rate_per_s:,} msgs/s for {c.duration_s:g} s "
        f"({_count(c.total_messages, 'message')}), pulls of up to {c.max_messages_per_pull}"
        for c in workload.latency
    )
    drain = ", ".join(
        f"{_count(c.backlog_messages, 'message')}, {_count(c.consumers, 'consumer')}"
        for c in workload.drain
    )
    servers = (
        "each run on a fresh server and store"
        if fresh_server
        else "each NATS run on a fresh server; all lakepubsub runs on one server, "
        "each on a fresh topic and subscription"
    )
    return [
        f"- 1 KiB incompressible messages; {_count(workload.runs, 'run')} of every case, "
        f"{servers}; every client its own process; ack deadline {workload.ack_deadline_s} s.",
        f"- publish, messages per case: {publish}.",
        f"- pull + ack of a backlog published first (untimed), pulls of up to "
        f"{workload.pull[0].max_messages_per_pull:,}: {pull}.",
        f"- end-to-end latency, one publisher (one message per publish), one consumer: {latency}.",
        f"- backlog drain: {drain}.",
    ]


def report(done: Run, *, command: str, charts: tuple[str | None, str | None]) -> str:
    """The report; ``charts`` are the chart files' names (``None``: no such chart)."""
    written = now()
    minutes = sum(done.elapsed_s.values()) / 60
    took = ", ".join(f"{_PHASES.get(s, s)} {t / 60:.1f} min" for s, t in done.elapsed_s.items())
    sections = ["# lakepubsub vs NATS JetStream: side-by-side benchmark", ""]
    if done.partial:
        sections += [
            f"**Partial report** ({written}): the run is still going; the cases so far.",
            "",
        ]
    sections += [
        f"Written {written} by `{command}` in {minutes:.1f} min ({took}).",
        "",
        "## Machine",
        "",
        *machine_lines(done),
        "",
        "## Workload",
        "",
        "Defined in `bench/workload.py` (REST cases) and `bench/grpc_bench.py` (gRPC cases), "
        "the same for both systems, on the same machine, one system after the other.",
        "",
        *(_workload_lines(done.workload, fresh_server=done.fresh_server) if done.rest else []),
        *(grpc_bench.workload_lines(done.grpc_workload) if done.grpc_workload else []),
        "",
        "Each figure is the median of the runs, with [min-max]; `ratio` is lakepubsub ÷ NATS. "
        'What each figure is: bench/README.md, "The workload".',
        "",
    ]
    if done.rest:
        sections += ["## Targets", "", targets_table(done.results, done.workload), ""]
    sections += [
        "## Side by side",
        "",
        side_by_side_table(done.results),
        "",
        *([f"![throughput]({charts[0]})", ""] if charts[0] else []),
        *([f"![latency]({charts[1]})", ""] if charts[1] else []),
    ]
    if done.grpc_workload is not None:
        sections += [
            "## gRPC: Google's Go client vs the NATS Go client",
            "",
            "Both driven by `bench/loadgen`; how each case maps onto each system: "
            'bench/README.md, "gRPC cases". `lakepubsub REST` is the closest REST case of '
            "the same run (Python clients), where it ran.",
            "",
            grpc_table(done.results, done.failures, done.workload, done.grpc_workload),
            "",
        ]
    if done.failures:
        sections += [
            "## Failed cases",
            "",
            "These runs failed; the other cases ran and are reported above.",
            "",
            grpc_bench.failures_table(done.failures),
            "",
        ]
    sections += [
        "## Delta commits per million messages (lakepubsub, local lake)",
        "",
        storage_table(done.results, lps.SYSTEM),
        "",
    ]
    if done.s3_workload is not None:
        sections += [
            "## lakepubsub on S3 (moto server)",
            "",
            f"The same cases at {S3_FRACTION:g} of the message counts:",
            "",
            *_workload_lines(done.s3_workload, fresh_server=done.fresh_server),
            "",
            "S3 requests are counted from moto's request log over each case's timed part "
            f"(setup and backlog publishing excluded). Request cost at {prices.describe()}. "
            "Storage and transfer not included.",
            "",
            storage_table(done.results, lps.SYSTEM_S3),
            "",
            w.markdown_table(r for r in done.results if r.system == lps.SYSTEM_S3),
            "",
        ]
    sections += ["## Reproduce", "", "`make install`, then bench/README.md's commands.", ""]
    return "\n".join(sections)


def update_readme(readme: Path, done: Run, report_name: str) -> None:
    """Put the latest targets and side-by-side tables between the README's markers."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return
    at_start = load(done.load_before)
    body = "\n".join(
        [
            README_START,
            "",
            f"From `results/{report_name}` ({now()[:10]}, "
            f"{os.cpu_count()} cores, load average {at_start} at the start; "
            "median [min-max] of the runs; ratio = lakepubsub ÷ NATS):",
            "",
            targets_table(done.results, done.workload),
            "",
            side_by_side_table(done.results),
            "",
        ]
    )
    readme.write_text(text[:start] + body + text[end:])


def _chart(draw: Callable[[Path], None], out: Path, name: str | None) -> str | None:
    """Draw one chart; a run with nothing to draw (every case failed) has none."""
    if name is None:
        return None
    try:
        draw(out / name)
    except (ValueError, ZeroDivisionError, KeyError) as exc:
        print(f"no {name}: {exc!r}", file=sys.stderr)
        return None
    return name


def main(argv: Sequence[str] | None = None) -> None:
    parser = report_.parser(__doc__ or "", quick="CI sizes, one run, a few minutes", runs=True)
    parser.add_argument("--s3", action="store_true", help="also run lakepubsub on moto S3")
    parser.add_argument(
        "--only",
        choices=("rest", "grpc"),
        default=None,
        help="only the REST cases, or only the gRPC cases (each with its NATS peers)",
    )
    args = parser.parse_args(argv)
    workload = ci_workload() if args.quick else w.full()
    grpc_workload = grpc_bench.quick() if args.quick else grpc_bench.full()
    if args.runs is not None:
        workload = dataclasses.replace(workload, runs=args.runs)
        grpc_workload = dataclasses.replace(grpc_workload, runs=args.runs)
    rest = args.only != "grpc"
    s3_workload = (workload if args.quick else scaled(workload, S3_FRACTION)) if args.s3 else None
    progress = report_.progress()

    # A gRPC-only run has report-grpc.md of its own: it never replaces the full report.
    suffix = ("-grpc" if not rest else "") + ("-quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    charts: tuple[str | None, str | None] = (
        f"throughput{suffix}.png",
        f"latency{suffix}.png" if rest else None,
    )
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])
    report_path = args.out / f"report{suffix}.md"

    def checkpoint(so_far: Run) -> None:
        report_path.write_text(report(so_far, command=command, charts=charts))

    done = run(
        workload,
        s3_workload=s3_workload if rest else None,
        fresh_server=not args.quick,
        progress=progress,
        grpc_workload=grpc_workload if args.only != "rest" else None,
        rest=rest,
        checkpoint=checkpoint,
    )
    charts = (
        _chart(lambda path: throughput_chart(done.results, path), args.out, charts[0]),
        _chart(lambda path: latency_chart(done, path), args.out, charts[1]),
    )
    report_path.write_text(report(done, command=command, charts=charts))
    if not args.quick and args.out == RESULTS and rest:
        update_readme(README, done, report_path.name)
    print(side_by_side_table(done.results))
    print(f"\nwrote {report_path}", file=sys.stderr)
    if done.failures:
        print(f"\n{len(done.failures)} failed:\n{grpc_bench.failures_table(done.failures)}")
        raise SystemExit(1)
