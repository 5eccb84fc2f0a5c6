"""The S3 bench's intake on a directory bucket: the server on a Standard lake keeps
its intake in a second moto bucket named as S3 Express One Zone names them, the
proxy counts those requests apart (priced at Express) and answers them at
Express latency while the lake's own get the Standard profile."""

from __future__ import annotations

import time

import httpx
import pytest

from bench.harness.lakepubsub_server import BUCKET, PROJECT, LakePubSubServer
from bench.harness.s3_proxy import PROFILES, directory_bucket, profile_of
from bench.s3 import backlog
from bench.s3.__main__ import LoadResult, load, load_report

pytestmark = pytest.mark.s3

HOT = "hot--use1-az4--x-s3"


def test_directory_buckets_get_express_latency_and_their_own_count() -> None:
    standard = PROFILES["standard"]
    assert directory_bucket(f"/{HOT}/lake/intake/_delta_log/0.json")
    assert not directory_bucket(f"/{BUCKET}/lake/catalog/_delta_log/0.json")
    assert profile_of(standard, f"/{HOT}/k").name == "express"
    assert profile_of(standard, f"/{BUCKET}/k").name == "standard"
    assert profile_of(PROFILES["zero"], f"/{HOT}/k").name == "zero"
    placed = LoadResult(
        "x", 1_000_000, {"put": 1000, "get": 10}, {}, {}, {}, directory_kinds={"put": 800}
    )
    # 200 Standard PUTs, 800 Express PUTs, 10 Standard GETs.
    assert placed.usd_per_million("placed") == pytest.approx(
        (200 * 0.005 + 800 * 0.00113 + 10 * 0.0004) / 1000
    )


def test_the_server_commits_publishes_to_the_intake_bucket() -> None:
    with LakePubSubServer(
        s3=True, serve=True, proxy="standard", intake_bucket=HOT, env={"LAKEPUBSUB_INTAKE": "1"}
    ) as server:
        assert server.proxy is not None and server.moto is not None
        base = f"{server.url}/v1/projects/{PROJECT}"
        with httpx.Client(timeout=60) as client:
            client.put(f"{base}/topics/hot").raise_for_status()
            server.proxy.reset()
            started = time.monotonic()
            body = {"messages": [{"data": "aG90"}]}
            client.post(f"{base}/topics/hot:publish", json=body).raise_for_status()
            took = time.monotonic() - started
        counts = server.proxy.reset()
        directory = dict(counts["directory_kinds"])  # type: ignore[call-overload]
        assert directory.get("put", 0) >= 2, counts  # the intake's data file and log entry
        keys = [o["Key"] for o in server.moto.client().list_objects_v2(Bucket=HOT)["Contents"]]
    assert any(k.startswith("lake/intake/_delta_log/") for k in keys), keys
    # Two Express PUTs, not two Standard ones (~110 ms at the median) and a window.
    assert took < 5.0


def test_the_backlog_case_reads_every_message_with_the_same_requests_either_way() -> None:
    plain, ahead = backlog.run(3, "zero", 1)
    assert (plain.read_ahead, ahead.read_ahead) == (False, True)
    assert plain.messages == ahead.messages == 3 * backlog.RANGE
    # Each file read once either way, a GET of the whole file (its size is in the
    # log: no HEAD); nothing written.
    assert plain.kinds == ahead.kinds
    assert plain.kinds.get("get", 0) >= 3 and "head" not in plain.kinds
    assert "put" not in plain.kinds
    lines = backlog.report([plain, ahead], "zero")
    assert any(line.startswith("| yes | 3,000 |") for line in lines)


@pytest.mark.parametrize("single", [False, True])
def test_the_go_client_load_publishes_and_delivers_every_message(single: bool) -> None:
    """``--client go``: Google's Go client (bench/loadgen, modes s3publish and
    s3subscribe) offers the load over several topics and receives it all."""
    result = load("go", 3, 30.0, 2.0, single=single, profile="zero", client="go")
    assert result.messages == 60
    assert (result.publish["sent"], result.publish["acked"]) == (60, 60), result.publish
    assert result.publish["failures"] == 0
    assert result.delivery["distinct"] == 60, result.delivery
    ack, e2e = result.publish["ack_ms"], result.delivery["e2e_ms"]
    assert isinstance(ack, dict) and isinstance(e2e, dict)
    assert 0 < ack["p50"] <= ack["p99"] < 60_000
    assert 0 < e2e["p50"] <= e2e["p99"] < 60_000
    # The intake's log entries at least (one PUT per commit on S3).
    assert result.per_million("put") > 0
    assert result.usd_per_month() > 0
    # The steady window: from a third of the load's 2 s to its end (1.33 s, give or
    # take the proxy's answers on a busy machine), inside the run.
    assert 0.5 <= result.steady_s < result.wall_s, (result.steady_s, result.wall_s)
    assert result.steady_kinds.get("put", 0) > 0, result.steady_kinds
    assert all(n <= result.kinds[kind] for kind, n in result.steady_kinds.items())
    assert result.usd_per_month_steady() > 0


def test_the_load_reaches_grpcio_on_its_own_port() -> None:
    """``--grpc-port``: the clients reach the server's grpcio port, not the one port
    that relays to it; every message is published and delivered, and the report
    says which door the clients used. It takes one process only."""
    result = load("direct", 4, 40.0, 2.0, single=True, profile="zero", client="go", grpc_port=True)
    assert (result.publish["acked"], result.publish["failures"]) == (80, 0), result.publish
    assert result.delivery["distinct"] == 80, result.delivery
    assert result.commits.get("intake", 0.0) + result.commits.get("messages", 0.0) > 0
    # one Publish call a message (single), counted by the server's own metrics
    assert result.calls["google.pubsub.v1.Publisher/Publish"] == 80, result.calls
    row = load_report([result], "zero", "go", grpc_port=True)
    assert "`lakepubsub serve --grpc-port`" in "\n".join(row)
    assert "google.pubsub.v1.Publisher/Publish 1.00" in "\n".join(row)
    assert any(line.startswith("Top request patterns of the steady window") for line in row)
    with pytest.raises(ValueError, match="one process"):
        load("both", 1, 10.0, 1.0, single=True, profile="zero", workers=2, grpc_port=True)


def test_the_load_runs_on_two_workers_and_counts_both_processes_cpu() -> None:
    """``--workers 2``: ``serve --workers 2``, two peers on one port sharing the topics;
    every message is published and delivered, the server's CPU is the sum over the
    supervisor and its workers, and commit counts, which one worker's metrics cannot
    give, are left out of the report."""
    result = load("workers", 4, 40.0, 2.0, single=True, profile="zero", client="go", workers=2)
    assert (result.publish["acked"], result.publish["failures"]) == (80, 0), result.publish
    assert result.delivery["distinct"] == 80, result.delivery
    # uvicorn's supervisor only watches its workers (a few ms in 2 s); 80 publishes,
    # deliveries and acks through the workers' doors cost far more.
    assert result.cpu_s["server"] > 0.1, result.cpu_s
    assert result.commits == {}
    row = load_report([result], "zero", "go", workers=2)
    assert "`lakepubsub serve --workers 2`" in "\n".join(row)
    assert any("| n/a | n/a | n/a |" in line for line in row), row
    assert result.calls == {}  # one worker's metrics cannot give them
