"""The NATS JetStream side of the benchmark, at its smallest sizes, against a real nats-server.

These check that the harness measures what the workload says and counts every
message; they assert nothing about speed.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator, Sequence

import pytest

from bench import peer_nats
from bench import workload as w
from bench.harness import scratch
from bench.harness.meter import ProcessMeter
from bench.harness.nats_server import NatsServer

QUICK = w.quick()
CPU_METRICS = frozenset({w.SERVER_CPU_PER_MILLION, w.CLIENT_CPU_PER_MILLION})
USAGE_METRICS = {*CPU_METRICS, w.SERVER_PEAK_RSS}


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    with NatsServer() as nats_server:
        yield nats_server


def by_metric(results: Sequence[w.Result], case: str) -> dict[str, w.Result]:
    assert {r.case for r in results} == {case}
    assert {r.system for r in results} == {peer_nats.SYSTEM}
    metrics = {r.metric: r for r in results}
    assert len(metrics) == len(results), "one result per metric"
    return metrics


def assert_positive(results: Sequence[w.Result], *, zero_ok: frozenset[str] = frozenset()) -> None:
    for result in results:
        assert result.values, result
        if result.metric in zero_ok:
            assert all(v >= 0 for v in result.values), result
        else:
            assert all(v > 0 for v in result.values), result


def smallest_publish(*, clients: int) -> w.PublishCase:
    return min((c for c in QUICK.publish if c.clients == clients), key=lambda c: c.total_messages)


@pytest.mark.parametrize("clients", [1, 8])
def test_publish_stores_every_message(server: NatsServer, clients: int) -> None:
    case = smallest_publish(clients=clients)

    results = w.run_publish(peer_nats.Side(server, w.quick().ack_deadline_s), case)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {
        w.THROUGHPUT,
        w.BATCH_LATENCY_P50,
        w.BATCH_LATENCY_P99,
        w.MESSAGES,
        *USAGE_METRICS,
    }
    assert metrics[w.MESSAGES].values == (case.total_messages,)
    assert metrics[w.BATCH_LATENCY_P50].median <= metrics[w.BATCH_LATENCY_P99].median
    assert_positive(results)


def test_pull_receives_and_acks_every_message(server: NatsServer) -> None:
    case = max(QUICK.pull, key=lambda c: c.consumers)
    assert case.consumers > 1

    results = w.run_consume(peer_nats.Side(server, QUICK.ack_deadline_s), case)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {w.THROUGHPUT, w.MESSAGES, *USAGE_METRICS}
    assert metrics[w.MESSAGES].values == (case.backlog_messages,)
    assert_positive(results)


def test_drain_reports_its_time(server: NatsServer) -> None:
    case = dataclasses.replace(QUICK.drain[0], backlog_messages=3_000)

    results = w.run_consume(peer_nats.Side(server, QUICK.ack_deadline_s), case)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {w.DRAIN_TIME, w.THROUGHPUT, w.MESSAGES, *USAGE_METRICS}
    assert metrics[w.MESSAGES].values == (case.backlog_messages,)
    drain_s = metrics[w.DRAIN_TIME].median
    assert metrics[w.THROUGHPUT].median == pytest.approx(case.backlog_messages / drain_s)
    assert_positive(results)


def test_latency_receives_every_message(server: NatsServer) -> None:
    case = QUICK.latency[0]

    results = w.run_latency(peer_nats.Side(server, QUICK.ack_deadline_s), case)

    metrics = by_metric(results, case.name)
    assert set(metrics) == {
        w.LATENCY_P50,
        w.LATENCY_P99,
        w.LATENCY_MAX,
        w.ACHIEVED_RATE,
        w.MESSAGES,
        *USAGE_METRICS,
    }
    assert metrics[w.MESSAGES].values == (case.total_messages,)
    p50, p99, most = (metrics[m].median for m in (w.LATENCY_P50, w.LATENCY_P99, w.LATENCY_MAX))
    assert p50 <= p99 <= most
    assert_positive(results)


def test_run_all_repeats_each_case_and_merges_runs() -> None:
    tiny = dataclasses.replace(
        QUICK,
        publish=(w.PublishCase(batch_size=10, clients=1, messages_per_client=100),),
        pull=(w.PullCase(consumers=1, backlog_messages=200, max_messages_per_pull=100),),
        latency=(w.LatencyCase(offered_rate_per_s=200, duration_s=0.25),),
        drain=(w.DrainCase(backlog_messages=200, consumers=1, max_messages_per_pull=100),),
        runs=2,
    )
    seen: list[str] = []

    results = peer_nats.run_all(tiny, progress=seen.append)

    names = [tiny.publish[0].name, tiny.pull[0].name, tiny.latency[0].name, tiny.drain[0].name]
    assert len(seen) == len(names) * tiny.runs
    assert [r.case for r in results if r.metric == w.MESSAGES] == names
    assert all(len(r.values) == tiny.runs for r in results)
    # CPU time is counted in clock ticks: a few hundred messages may take none.
    assert_positive(results, zero_ok=CPU_METRICS)
    table = w.markdown_table(results).splitlines()
    assert len(table) == 2 + len(results)
    assert all(line.startswith(f"| {peer_nats.SYSTEM} |") for line in table[2:])


def test_nats_server_stops_and_removes_its_directory() -> None:
    with NatsServer() as nats_server:
        pid = nats_server.pid
        store = nats_server.directory
        assert store is not None and store.is_dir()
    assert store is not None and store.is_dir()
    assert all(p.stat().st_size == 0 for p in store.rglob("*") if p.is_file())
    scratch.remove_released()
    assert not store.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_process_meter_sees_cpu_and_memory_of_another_process() -> None:
    burn = "x = bytearray(64 * 1024 * 1024)\nwhile True: sum(range(10_000))"
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        with ProcessMeter(child.pid, sample_interval_s=0.01) as meter:
            subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5)"], check=True)
    finally:
        child.kill()
        child.wait()

    assert meter.usage.cpu_s > 0
    assert meter.usage.peak_rss_bytes > 64 * 1024 * 1024
    assert meter.usage.wall_s >= 0.5


def test_payloads_are_fixed_size_distinct_deterministic_and_incompressible() -> None:
    payloads = [w.payload(i) for i in range(1_000)]

    assert {len(p) for p in payloads} == {w.MESSAGE_BYTES}
    assert len(set(payloads)) == len(payloads)
    assert w.payload(7) == payloads[7]
    batch = b"".join(payloads)
    assert len(zlib.compress(batch, 9)) > 0.99 * len(batch)


def test_workload_shapes() -> None:
    for chosen in (w.full(), w.quick()):
        assert {(c.batch_size, c.clients) for c in chosen.publish} == {
            (b, n) for b in (1, 100, 1000) for n in (1, 8)
        }
        assert all(c.messages_per_client % c.batch_size == 0 for c in chosen.publish)
        assert all(c.messages_per_client > 0 for c in chosen.publish)
        assert {c.consumers for c in chosen.pull} == {1, 4}
        assert chosen.ack_deadline_s == 10
    assert w.full().drain[0].backlog_messages == 1_000_000
    assert w.full().runs >= 3
    assert w.quick().runs == 1


def test_results_summarise_their_runs() -> None:
    result = w.Result(system="s", case="c", metric="m", unit="u", values=(3.0, 1.0, 2.0))

    assert (result.median, result.min, result.max) == (2.0, 1.0, 3.0)
    merged = w.merge_runs([dataclasses.replace(result, values=(4.0,)), result])
    assert merged == [dataclasses.replace(result, values=(4.0, 3.0, 1.0, 2.0))]


def test_scratch_frees_space_at_once_and_inodes_at_the_end() -> None:
    """A released directory keeps its (now empty) files until remove_released: deleting
    them between runs slowed file creation in the runs after (bench/harness/scratch.py)."""
    root = scratch.directory("bench-scratch-test-")
    (root / "sub").mkdir()
    for i, path in enumerate([root / "a.parquet", root / "sub" / "b.json"]):
        path.write_bytes(b"x" * (1000 + i))
    outside = scratch.directory("bench-scratch-outside-") / "kept"
    outside.write_bytes(b"keep me")
    (root / "link").symlink_to(outside)
    scratch.release(root)
    sizes = sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*.*"))
    assert sizes == [("a.parquet", 0), ("sub/b.json", 0)]
    assert outside.read_bytes() == b"keep me"  # a link's target is left alone
    scratch.remove_released()
    assert not root.exists()
    assert outside.read_bytes() == b"keep me"
    scratch.release(outside.parent)
    scratch.remove_released()
