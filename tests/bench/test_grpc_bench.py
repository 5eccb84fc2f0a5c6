"""The benchmark's gRPC cases at tiny sizes, against a real ``lakepubsub serve`` and nats-server.

The Go load generator (``bench/loadgen``) is built once per machine; a missing
Go fails these tests, as the client checks do (CI machines have Go 1.26).
They check that the load generator counts what the servers hold and that the
harness reports every figure and records a failed case; nothing about speed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bench import compare, gobuild, peer_nats
from bench import grpc_bench as g
from bench import peer_lakepubsub as lps
from bench import workload as w
from bench.harness.lakepubsub_server import PROJECT, BenchError, LakePubSubServer
from bench.harness.nats_server import NatsServer

TINY = dataclasses.replace(
    g.quick(),
    drain_messages=1_500,
    publish_messages=803,  # not a multiple of the publishers: uneven shares
    publishers=4,
    single_messages=30,
    latency_rate_per_s=200,
    latency_duration_s=1.0,
    max_outstanding=500,
    runs=1,
)
USAGE = {w.SERVER_CPU_PER_MILLION, w.SERVER_PEAK_RSS, w.CLIENT_CPU_PER_MILLION}
STORAGE = {lps.DELTA_COMMITS_PER_MILLION, lps.COMMIT_CONFLICTS_PER_MILLION}
# Too few CPU ticks in a tiny run, or no conflicts: zero is fine for these.
MAY_BE_ZERO = {w.SERVER_CPU_PER_MILLION, w.CLIENT_CPU_PER_MILLION, lps.COMMIT_CONFLICTS_PER_MILLION}


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return gobuild.build()
    except gobuild.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def server() -> Iterator[LakePubSubServer]:
    with LakePubSubServer(serve=True) as lakepubsub:
        yield lakepubsub


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    with NatsServer() as nats:
        yield nats


def may_be_zero(result: w.Result) -> bool:
    """A drain may end before the lease flush window (1 s on a local lake) without
    a lease commit: its deliveries and acks are committed later, or at the stop."""
    drain_commits = result.metric == lps.DELTA_COMMITS_PER_MILLION and "drain" in result.case
    return result.metric in MAY_BE_ZERO or drain_commits


def figures(results: Sequence[w.Result], case: str, system: str) -> dict[str, float]:
    assert {r.case for r in results} == {case}
    assert {r.system for r in results} == {system}
    found = {r.metric: r.median for r in results}
    assert len(found) == len(results), "one result per metric"
    for r in results:
        assert r.median >= 0 if may_be_zero(r) else r.median > 0, r
    return found


# --- the load generator's own counts ----------------------------------------------------------


def test_loadgen_counts_every_publish_and_the_lake_holds_them(
    binary: Path, server: LakePubSubServer
) -> None:
    topic = server.create_topic()
    messages, publishers = 301, 3

    report, usage = g.run_loadgen(
        binary,
        ["-system", "pubsub", "-mode", "publish", "-topic", topic,
         "-publishers", str(publishers), "-messages", str(messages)],
        server_pid=server.pid,
        env={"PUBSUB_EMULATOR_HOST": server.emulator_host},
    )  # fmt: skip

    assert report["published"] == messages
    assert report["errors"] == []
    assert report.elapsed_s > 0 and report.cpu_s >= 0
    assert usage.wall_s >= report.elapsed_s
    # Each publisher's untimed warm-up message is stored too.
    server.check_stored(topic, messages + publishers)


def test_loadgen_drain_counts_each_message_once_and_acks_it(
    binary: Path, server: LakePubSubServer
) -> None:
    topic = server.create_topic()
    subscription = server.create_subscription(topic, ack_deadline_s=10)
    backlog = 700
    lps.publish_backlog(server, topic, backlog)

    report, _ = g.run_loadgen(
        binary,
        ["-system", "pubsub", "-mode", "drain", "-subscription", subscription,
         "-messages", str(backlog), "-max-outstanding", "100"],
        server_pid=server.pid,
        env={"PUBSUB_EMULATOR_HOST": server.emulator_host},
    )  # fmt: skip

    assert report["distinct"] == report["received"] == report["acked"] == backlog
    assert report["redelivered"] == 0
    server.check_all_acked(topic, subscription, backlog)


def test_loadgen_reports_its_errors(binary: Path, server: LakePubSubServer) -> None:
    missing = f"projects/{PROJECT}/topics/no-such-topic"

    with pytest.raises(BenchError, match=r"NotFound|not found|NOT_FOUND"):
        g.run_loadgen(
            binary,
            ["-system", "pubsub", "-mode", "publish", "-topic", missing, "-messages", "5"],
            server_pid=server.pid,
            env={"PUBSUB_EMULATOR_HOST": server.emulator_host},
            timeout_s=60,
        )


# --- the cases, one run each -------------------------------------------------------------------


def test_lakepubsub_drain(binary: Path, server: LakePubSubServer) -> None:
    found = figures(
        g.run_drain(lps.Side(server, TINY.ack_deadline_s), binary, TINY),
        TINY.drain_case,
        lps.SYSTEM,
    )

    assert set(found) == {w.DRAIN_TIME, w.THROUGHPUT, w.MESSAGES, *USAGE, *STORAGE}
    assert found[w.MESSAGES] == TINY.drain_messages
    assert found[w.THROUGHPUT] == pytest.approx(TINY.drain_messages / found[w.DRAIN_TIME])


@pytest.mark.parametrize("single", [False, True], ids=["batching", "single"])
def test_lakepubsub_publish(binary: Path, server: LakePubSubServer, single: bool) -> None:
    case = TINY.single_case if single else TINY.publish_case

    found = figures(
        g.run_publish(lps.Side(server, TINY.ack_deadline_s), binary, TINY, single=single),
        case,
        lps.SYSTEM,
    )

    latency = {w.BATCH_LATENCY_P50, w.BATCH_LATENCY_P99} if single else set()
    assert set(found) == {w.THROUGHPUT, w.MESSAGES, *latency, *USAGE, *STORAGE}
    assert found[w.MESSAGES] == (TINY.single_messages if single else TINY.publish_messages)
    if single:
        assert found[w.BATCH_LATENCY_P50] <= found[w.BATCH_LATENCY_P99]
        # One request per message, each awaited: no faster than its round trips allow.
        assert found[w.THROUGHPUT] <= 1000 / found[w.BATCH_LATENCY_P50] * 2


def test_lakepubsub_latency(binary: Path, server: LakePubSubServer) -> None:
    samples: list[float] = []

    found = figures(
        g.run_latency(lps.Side(server, TINY.ack_deadline_s), binary, TINY, samples),
        TINY.latency_case,
        lps.SYSTEM,
    )

    assert found[w.MESSAGES] == len(samples) == TINY.latency_messages
    assert found[w.LATENCY_P50] <= found[w.LATENCY_P99] <= found[w.LATENCY_MAX] == max(samples)
    assert found[w.ACHIEVED_RATE] == pytest.approx(TINY.latency_rate_per_s, rel=0.2)


def test_nats_cases(binary: Path, nats_server: NatsServer) -> None:
    drain = figures(
        g.run_drain(
            peer_nats.Side(nats_server, TINY.ack_deadline_s, durable=g.PUSH_DURABLE), binary, TINY
        ),
        TINY.drain_case,
        peer_nats.SYSTEM,
    )
    assert drain[w.MESSAGES] == TINY.drain_messages
    assert set(drain) == {w.DRAIN_TIME, w.THROUGHPUT, w.MESSAGES, *USAGE}
    # The push consumer shows every message acked, none pending or redelivered.
    asyncio.run(
        peer_nats.check_all_acked(nats_server.url, TINY.drain_messages, durable=g.PUSH_DURABLE)
    )

    single = figures(
        g.run_publish(
            peer_nats.Side(nats_server, TINY.ack_deadline_s, durable=g.PUSH_DURABLE),
            binary,
            TINY,
            single=True,
        ),
        TINY.single_case,
        peer_nats.SYSTEM,
    )
    assert single[w.MESSAGES] == TINY.single_messages
    assert single[w.BATCH_LATENCY_P50] <= single[w.BATCH_LATENCY_P99]

    samples: list[float] = []
    latency = figures(
        g.run_latency(
            peer_nats.Side(nats_server, TINY.ack_deadline_s, durable=g.PUSH_DURABLE),
            binary,
            TINY,
            samples,
        ),
        TINY.latency_case,
        peer_nats.SYSTEM,
    )
    assert latency[w.MESSAGES] == len(samples) == TINY.latency_messages
    assert latency[w.LATENCY_P50] <= latency[w.LATENCY_P99] <= latency[w.LATENCY_MAX]


# --- failures and the report ---------------------------------------------------------------------


def test_a_failed_case_is_reported_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = g.run_publish

    def broken(side: object, *args: object, **kwargs: object) -> list[w.Result]:
        if isinstance(side, lps.Side):
            raise BenchError("injected: the publisher gave up")
        return real(side, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(g, "run_publish", broken)
    tiny = dataclasses.replace(TINY, drain_messages=300, publish_messages=200, single_messages=5)
    checkpoints: list[int] = []

    outcome = g.run_all(
        tiny, fresh_server=False, checkpoint=lambda so_far: checkpoints.append(len(so_far.results))
    )

    failed = {(f.system, f.case) for f in outcome.failures}
    assert failed == {(lps.SYSTEM, tiny.publish_case), (lps.SYSTEM, tiny.single_case)}
    assert all("injected" in f.error for f in outcome.failures)
    ran = {(r.system, r.case) for r in outcome.results}
    assert (lps.SYSTEM, tiny.drain_case) in ran and (lps.SYSTEM, tiny.latency_case) in ran
    assert {(peer_nats.SYSTEM, case) for case in tiny.cases} <= ran
    # A checkpoint after every case, each with more results than the one before.
    assert len(checkpoints) == len(tiny.cases) and checkpoints == sorted(set(checkpoints))

    done = compare.Run(
        w.quick(), None, False, outcome.results, {}, {}, os.getloadavg(), os.getloadavg(),
        grpc_workload=tiny, rest=False, failures=outcome.failures,
    )  # fmt: skip
    text = compare.report(done, command="python -m bench --only grpc", charts=("t.png", None))
    assert "## gRPC: Google's Go client vs the NATS Go client" in text
    assert "## Failed cases" in text and "injected: the publisher gave up" in text
    assert f"| {tiny.publish_case} | throughput | msgs/s | **failed** |" in text
    assert "## Targets" not in text and "Partial report" not in text
    assert f"| {tiny.drain_case} | throughput | msgs/s |" in text
