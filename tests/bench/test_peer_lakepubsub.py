"""The lakepubsub side of the benchmark and the side-by-side report, at tiny sizes.

The peer's tests run against a real uvicorn server on a temporary lake (and
one against a moto S3 server); they check that the harness counts every
message and reports every figure, and assert nothing about speed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bench import charts, compare
from bench import peer_lakepubsub as lps
from bench import workload as w
from bench.harness import scratch
from bench.harness.lakepubsub_server import BenchError, LakePubSubServer
from bench.harness.s3_proxy import request_kind

USAGE_METRICS = {w.SERVER_CPU_PER_MILLION, w.SERVER_PEAK_RSS, w.CLIENT_CPU_PER_MILLION}
STORAGE_METRICS = {lps.DELTA_COMMITS_PER_MILLION, lps.COMMIT_CONFLICTS_PER_MILLION}
# Zero is a fine value for these: no conflicts; too few ticks of CPU in a tiny
# run; no S3 request of some kinds (POST, DELETE).
MAY_BE_ZERO = frozenset(
    {
        lps.COMMIT_CONFLICTS_PER_MILLION,
        w.SERVER_CPU_PER_MILLION,
        w.CLIENT_CPU_PER_MILLION,
        *(lps.s3_metric(kind) for kind in lps.S3_KINDS),
    }
)
ACK_DEADLINE_S = w.quick().ack_deadline_s
DASH, TIMES = "\u2013", "\u00d7"  # as the report writes ranges and ratios


@pytest.fixture(scope="module")
def server() -> Iterator[LakePubSubServer]:
    with LakePubSubServer() as lakepubsub:
        yield lakepubsub


def may_be_zero(result: w.Result) -> bool:
    """A drain may end before the lease flush window (1 s on a local lake) without
    a lease commit: its deliveries and acks are committed later, or at the stop."""
    drain_commits = result.metric == lps.DELTA_COMMITS_PER_MILLION and "drain" in result.case
    return result.metric in MAY_BE_ZERO or drain_commits


def by_metric(results: Sequence[w.Result], case: str, system: str = lps.SYSTEM) -> dict[str, float]:
    assert {r.case for r in results} == {case}
    assert {r.system for r in results} == {system}
    metrics = {r.metric: r.median for r in results}
    assert len(metrics) == len(results), "one result per metric"
    for result in results:
        assert len(result.values) == 1, result
        assert result.median >= 0 if may_be_zero(result) else result.median > 0, result
    return metrics


@pytest.mark.parametrize(("batch_size", "clients"), [(1, 8), (10, 1)])
def test_publish_stores_every_message(
    server: LakePubSubServer, batch_size: int, clients: int
) -> None:
    case = w.PublishCase(batch_size=batch_size, clients=clients, messages_per_client=20)

    results = w.run_publish(lps.Side(server, w.quick().ack_deadline_s), case)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {
        w.THROUGHPUT,
        w.BATCH_LATENCY_P50,
        w.BATCH_LATENCY_P99,
        w.MESSAGES,
        *USAGE_METRICS,
        *STORAGE_METRICS,
    }
    assert metrics[w.MESSAGES] == case.total_messages
    assert metrics[w.BATCH_LATENCY_P50] <= metrics[w.BATCH_LATENCY_P99]
    # At most one commit per publish request: a batch is never split.
    requests = case.total_messages / batch_size
    assert metrics[lps.DELTA_COMMITS_PER_MILLION] <= requests * 1_000_000 / case.total_messages


def test_pull_receives_and_acks_every_message(server: LakePubSubServer) -> None:
    case = w.PullCase(consumers=4, backlog_messages=2_000, max_messages_per_pull=500)

    results = w.run_consume(lps.Side(server, ACK_DEADLINE_S), case)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {w.THROUGHPUT, w.MESSAGES, *USAGE_METRICS, *STORAGE_METRICS}
    assert metrics[w.MESSAGES] == case.backlog_messages


def test_drain_reports_its_time(server: LakePubSubServer) -> None:
    case = w.DrainCase(backlog_messages=1_500, consumers=1, max_messages_per_pull=1_000)

    results = w.run_consume(lps.Side(server, ACK_DEADLINE_S), case)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {
        w.DRAIN_TIME,
        w.THROUGHPUT,
        w.MESSAGES,
        *USAGE_METRICS,
        *STORAGE_METRICS,
    }
    assert metrics[w.MESSAGES] == case.backlog_messages
    assert metrics[w.THROUGHPUT] == pytest.approx(case.backlog_messages / metrics[w.DRAIN_TIME])


def test_latency_receives_every_message_and_hands_out_samples(
    server: LakePubSubServer,
) -> None:
    case = w.LatencyCase(offered_rate_per_s=100, duration_s=0.5)
    samples: list[float] = []

    results = w.run_latency(lps.Side(server, ACK_DEADLINE_S), case, samples)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {
        w.LATENCY_P50,
        w.LATENCY_P99,
        w.LATENCY_MAX,
        w.ACHIEVED_RATE,
        w.MESSAGES,
        *USAGE_METRICS,
        *STORAGE_METRICS,
    }
    assert metrics[w.MESSAGES] == case.total_messages == len(samples)
    assert metrics[w.LATENCY_P50] <= metrics[w.LATENCY_P99] <= metrics[w.LATENCY_MAX]
    assert metrics[w.LATENCY_MAX] == max(samples)


def test_a_server_error_fails_the_run(server: LakePubSubServer) -> None:
    missing = w.PullCase(consumers=1, backlog_messages=10, max_messages_per_pull=10)
    with pytest.raises(BenchError, match="HTTP 404"):
        lps.consume(
            server,
            "projects/bench/subscriptions/no-such-subscription",
            total=missing.backlog_messages,
            max_messages_per_pull=missing.max_messages_per_pull,
        )


def test_run_all_repeats_each_case_and_merges_runs() -> None:
    tiny = dataclasses.replace(
        w.quick(),
        publish=(w.PublishCase(batch_size=10, clients=1, messages_per_client=50),),
        pull=(w.PullCase(consumers=1, backlog_messages=200, max_messages_per_pull=100),),
        latency=(w.LatencyCase(offered_rate_per_s=100, duration_s=0.2),),
        drain=(w.DrainCase(backlog_messages=200, consumers=1, max_messages_per_pull=100),),
        runs=2,
    )
    seen: list[str] = []
    samples: list[float] = []

    results = lps.run_all(tiny, fresh_server=False, progress=seen.append, latency_samples=samples)

    names = [tiny.publish[0].name, tiny.pull[0].name, tiny.latency[0].name, tiny.drain[0].name]
    assert len(seen) == len(names) * tiny.runs
    assert [r.case for r in results if r.metric == w.MESSAGES] == names
    assert all(len(r.values) == tiny.runs for r in results)
    assert len(samples) == tiny.latency[0].total_messages * tiny.runs


def test_server_stops_and_removes_its_lake() -> None:
    with LakePubSubServer() as lakepubsub:
        pid, directory = lakepubsub.pid, lakepubsub.directory
        assert directory is not None and Path(lakepubsub.lake).is_relative_to(directory)
        before = lakepubsub.counters().commits
        lakepubsub.create_topic()
        assert lakepubsub.counters().commits > before
    # Emptied at once, removed when the benchmark is done (bench/harness/scratch.py).
    assert directory is not None and directory.is_dir()
    files = [p for p in directory.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_size == 0 for p in files)
    scratch.remove_released()
    assert not directory.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.s3
def test_on_s3_counts_storage_requests() -> None:
    case = w.PullCase(consumers=1, backlog_messages=300, max_messages_per_pull=100)
    # Every cycle commits (on S3 a server otherwise keeps plain subscriptions' lease
    # changes in memory for a few seconds, past this tiny run's timed part).
    every_cycle = {"LAKEPUBSUB_LEASE_FLUSH_MS": "0"}
    with LakePubSubServer(s3=True, env=every_cycle) as lakepubsub:
        assert lakepubsub.lake.startswith("s3://")
        results = w.run_consume(lps.Side(lakepubsub, ACK_DEADLINE_S), case)

    metrics = by_metric(results, case.name, system=lps.SYSTEM_S3)
    assert metrics[w.MESSAGES] == case.backlog_messages
    assert {lps.s3_metric(kind) for kind in lps.S3_KINDS} <= set(metrics)
    # Acks commit lease changes (PUTs); the dispatcher opens its tables (GETs).
    assert metrics[lps.s3_metric("put")] > 0
    assert metrics[lps.s3_metric("get")] > 0


@pytest.mark.parametrize(
    ("method", "target", "kind"),
    [
        ("PUT", "/bucket/lake/t/_delta_log/00000000000000000001.json", "put"),
        ("GET", "/bucket/lake/t/part-0.parquet", "get"),
        ("GET", "/bucket?list-type=2&prefix=lake%2Ft%2F_delta_log%2F", "list"),
        ("GET", "/bucket/?list-type=2", "list"),
        ("HEAD", "/bucket/lake/t/_delta_log/_last_checkpoint", "head"),
        ("DELETE", "/bucket/lake/t/part-0.parquet", "delete"),
        ("POST", "/bucket?delete", "post"),
    ],
)
def test_moto_requests_are_classified_as_s3_bills_them(method: str, target: str, kind: str) -> None:
    path, _, query = target.partition("?")
    assert request_kind(method, path, query) == kind


# --- the report ---------------------------------------------------------------


def fake_results(workload: w.Workload) -> list[w.Result]:
    """Two runs of every figure the peers report, for both systems, S3 counts included."""
    found = []
    for system, scale in ((lps.SYSTEM, 1.0), ("nats-jetstream", 4.0)):
        for case in [*workload.publish, *workload.pull, *workload.latency, *workload.drain]:
            metrics = [w.THROUGHPUT, w.BATCH_LATENCY_P50, w.LATENCY_P99, w.SERVER_PEAK_RSS]
            if system == lps.SYSTEM:
                metrics += [lps.DELTA_COMMITS_PER_MILLION, lps.COMMIT_CONFLICTS_PER_MILLION]
            found += [
                w.Result(system, case.name, metric, "u", (1_000 * scale, 3_000 * scale))
                for metric in metrics
            ]
    case = workload.pull[0].name
    found += [
        w.Result(lps.SYSTEM_S3, case, lps.s3_metric(kind), lps.REQUESTS_PER_MILLION, (1e6, 2e6))
        for kind in lps.S3_KINDS
    ]
    return found


def test_side_by_side_table_has_both_systems_and_their_ratio() -> None:
    results = fake_results(compare.ci_workload())

    table = compare.side_by_side_table(results).splitlines()

    row = next(line for line in table if "| publish batch=1 clients=1 | throughput |" in line)
    assert row.endswith(f"| 2,000 [1,000{DASH}3,000] | 8,000 [4,000{DASH}12,000] | 0.25{TIMES} |")
    assert not any(lps.DELTA_COMMITS_PER_MILLION in line for line in table)


def test_targets_table_marks_missed_targets() -> None:
    workload = compare.ci_workload()

    table = compare.targets_table(fake_results(workload), workload)

    row = f"| publish, 8 clients, batches of 100 | msgs/s | 2,000 [1,000{DASH}3,000] | ≥ 50,000 |"
    assert row in table
    assert "**no**" in table
    # 2,000 commits per million messages is 0.002 per message: under 0.01.
    assert f"| 0.002 [0.001{DASH}0.003] | ≤ 0.01 | yes |" in table


def test_s3_request_cost_uses_the_price_tiers() -> None:
    table = compare.storage_table(fake_results(compare.ci_workload()), lps.SYSTEM_S3)

    # Per run: 3 x 1M PUT-tier requests at $0.005/1000, 2 x 1M GET-tier at $0.0004/1000.
    run1, run2 = 3 * 5 + 2 * 0.4, 2 * (3 * 5 + 2 * 0.4)
    assert f"${(run1 + run2) / 2:,.2f} [${run1:,.2f}{DASH}${run2:,.2f}]" in table


def test_ci_workload_caps_publish_round_trips() -> None:
    workload = compare.ci_workload()

    assert {(c.batch_size, c.clients) for c in workload.publish} == {
        (c.batch_size, c.clients) for c in w.quick().publish
    }
    for case in workload.publish:
        assert 0 < case.messages_per_client <= compare.QUICK_ROUND_TRIPS * case.batch_size
        assert case.messages_per_client % case.batch_size == 0


def test_scaled_workload_keeps_whole_batches() -> None:
    workload = compare.scaled(w.full(), 0.1)

    assert [c.name for c in workload.publish] == [c.name for c in w.full().publish]
    assert all(c.messages_per_client % c.batch_size == 0 for c in workload.publish)
    assert workload.drain[0].backlog_messages == w.full().drain[0].backlog_messages // 10


def test_report_and_charts_are_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    workload = compare.ci_workload()
    done = compare.Run(
        workload=workload,
        s3_workload=workload,
        fresh_server=False,
        results=fake_results(workload),
        latency_samples={lps.SYSTEM: [5.0, 7.0, 30.0]},
        elapsed_s={lps.SYSTEM: 60.0},
        load_before=(1.0, 1.0, 1.0),
        load_after=(2.0, 2.0, 2.0),
    )

    charts.throughput_chart(done.results, tmp_path / "t.png")
    charts.latency_chart(done, tmp_path / "l.png")
    text = compare.report(done, command="python -m bench", charts=("t.png", "l.png"))

    assert (tmp_path / "t.png").stat().st_size > 0 and (tmp_path / "l.png").stat().st_size > 0
    for heading in ("## Machine", "## Targets", "## Side by side", "## lakepubsub on S3"):
        assert heading in text
    assert "cores" in text and "Load average" in text
