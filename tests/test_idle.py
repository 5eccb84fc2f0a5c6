"""What an idle lake costs on S3, and that idling loses no promptness.

A moto S3 behind bench/harness/s3_proxy.py, which counts every request; servers run
with the S3 defaults (a rare change check, peers told of catalog commits).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable
from support import LakeSpec, MotoServer, start_server, stop_server

from bench.harness.s3_proxy import S3Proxy
from lakepubsub import Engine
from lakepubsub.delivery.leases import LeaseState
from lakepubsub.messages import PublishMessage
from lakepubsub.peering.peers import Peering
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic
from lakepubsub.settings import Settings

pytestmark = pytest.mark.s3

PROJECT = "idle"
STREAMS = 5
WARMUP_S = 6.0
WINDOW_S = 30.0


@pytest.fixture
def proxied(moto_server: MotoServer) -> Iterator[tuple[LakeSpec, S3Proxy]]:
    with S3Proxy(moto_server.endpoint) as proxy:
        options = {**moto_server.storage_options, "AWS_ENDPOINT_URL": proxy.endpoint}
        yield LakeSpec(f"s3://{moto_server.bucket}/{uuid.uuid4().hex}", options), proxy


@contextlib.contextmanager
def _serving(settings: Settings) -> Iterator[Engine]:
    """An engine peered as a server's is (alone here, so it owns everything): it is
    told of its own commits, so it looks rarely and defers lease changes."""
    with Engine(settings) as engine:
        peering = Peering(engine)
        peering.start()
        engine.peering = peering
        try:
            yield engine
        finally:
            engine.peering = None
            peering.stop()


def _s3_defaults(lake: LakeSpec, **overrides: object) -> Settings:
    """The settings a server on S3 has: the test suite's short change check and
    per-cycle lease commits (tests/support.py) undone."""
    settings = replace(
        lake.settings(**overrides), change_check_s=None, lease_flush_ms=None, flush_ms=None
    )
    assert settings.change_check(peered=True) >= 60 and settings.lease_flush_s(peered=True) > 0
    return settings


def _requests(counts: dict[str, object]) -> int:
    kinds = counts["kinds"]
    assert isinstance(kinds, dict)
    return sum(kinds.values())


def test_an_idle_server_with_long_polls_waiting_makes_almost_no_requests(
    proxied: tuple[LakeSpec, S3Proxy],
) -> None:
    lake, proxy = proxied
    server = start_server(lake)
    stop = threading.Event()
    received: dict[int, float] = {}

    def poll(i: int) -> None:
        with server.client() as client:
            while not stop.is_set():
                answer = client.post(f"{base}/subscriptions/sub-{i}:pull", json={"maxMessages": 10})
                if answer.status_code == 200 and answer.json().get("receivedMessages"):
                    received.setdefault(i, time.monotonic())

    base = f"/v1/projects/{PROJECT}"
    threads = [threading.Thread(target=poll, args=(i,), daemon=True) for i in range(STREAMS)]
    try:
        with server.client() as client:
            for i in range(STREAMS):
                client.put(f"{base}/topics/topic-{i}").raise_for_status()
                topic = {"topic": f"projects/{PROJECT}/topics/topic-{i}"}
                client.put(f"{base}/subscriptions/sub-{i}", json=topic).raise_for_status()
            for thread in threads:
                thread.start()
            time.sleep(WARMUP_S)
            proxy.reset()
            time.sleep(WINDOW_S)
            idle = proxy.reset()
            # Waiting is not polling: a publish still reaches its waiting pull at once.
            sent = time.monotonic()
            message = {"messages": [{"data": "aGk="}]}
            client.post(f"{base}/topics/topic-0:publish", json=message).raise_for_status()
            deadline = sent + 10
            while 0 not in received and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        stop.set()
        stop_server(server)
    print("idle requests:", idle)
    # At most one heartbeat (a PUT and a LIST a minute) in the window; each
    # 2 s long poll of each subscription used to cost two GETs, plus ten a
    # second while it waited.
    assert _requests(idle) <= 2, idle
    assert 0 in received and received[0] - sent < 2.0


def test_an_expired_lease_reaches_a_waiting_pull_at_its_deadline_on_s3(
    proxied: tuple[LakeSpec, S3Proxy],
) -> None:
    lake, _ = proxied
    settings = _s3_defaults(lake, pull_wait_s=30.0)
    topic, sub = TopicName(PROJECT, "leases"), SubscriptionName(PROJECT, "leases")
    with _serving(settings) as engine:
        engine.create_topic(Topic(topic))
        engine.create_subscription(Subscription(sub, topic, ack_deadline_s=10))
        engine.publish(topic, [PublishMessage(b"again")])
        (_first,) = engine.pull(sub, max_messages=1)
        leased = time.monotonic()
        (second,) = engine.pull(sub, max_messages=1)  # waits for the lease to run out
        waited = time.monotonic() - leased
    assert second.message is not None and second.delivery_attempt == 2
    assert 9.0 < waited < 14.0


def test_what_a_process_committed_it_delivers_without_reading_it_back(
    proxied: tuple[LakeSpec, S3Proxy],
) -> None:
    """Publish, pull and ack in one process on S3: PUTs only. The messages are in
    memory (the data file and the commit it wrote), and no look for others' commits
    is due (the change check). With the S3 lease flush window the delivery and the
    ack wait in memory: the publish's two PUTs are all, until the window ends."""
    lake, proxy = proxied
    settings = _s3_defaults(lake, pull_wait_s=5.0)
    topic, sub = TopicName(PROJECT, "warm"), SubscriptionName(PROJECT, "warm")
    with _serving(settings) as engine:
        engine.create_topic(Topic(topic))
        engine.create_subscription(Subscription(sub, topic))
        # A first round opens the tables (delta-rs lists and reads each log once).
        engine.publish(topic, [PublishMessage(b"zero")])
        engine.acknowledge(sub, [r.ack_id for r in engine.pull(sub, max_messages=1)])
        proxy.reset()
        engine.publish(topic, [PublishMessage(b"one"), PublishMessage(b"two")])
        got = engine.pull(sub, max_messages=10)
        assert sorted(r.message.data for r in got if r.message) == [b"one", b"two"]
        engine.acknowledge(sub, [r.ack_id for r in got])
        assert proxy.counts()["kinds"] == {"put": 2}
    counts = proxy.reset()
    kinds = counts["kinds"]
    assert isinstance(kinds, dict)
    print("requests:", counts)
    # The publish commit (data file, log entry), nothing read; the close commits
    # the deferred delivery and ack (at most a cursor file, a rows file and its log
    # entry).
    assert kinds.get("get", 0) == 0 and kinds.get("head", 0) == 0 and kinds.get("list", 0) == 0
    assert kinds.get("put", 0) <= 2 + 3


def test_deferred_lease_changes_are_written_by_a_clean_close(
    proxied: tuple[LakeSpec, S3Proxy],
) -> None:
    lake, _ = proxied
    topic, sub = TopicName(PROJECT, "defer"), SubscriptionName(PROJECT, "defer")
    with _serving(_s3_defaults(lake, pull_wait_s=5.0)) as engine:
        engine.create_topic(Topic(topic))
        engine.create_subscription(Subscription(sub, topic))
        engine.publish(topic, [PublishMessage(b"a"), PublishMessage(b"b"), PublishMessage(b"c")])
        got = engine.pull(sub, max_messages=3)
        assert engine.acknowledge(sub, [r.ack_id for r in got]) == {}
        uri = engine.lake.leases_uri(engine.get_subscription(sub).uid)
        assert _stored(engine.lake.open(uri)).cursor.frontier == 0  # all in memory yet
        lake_handle = engine.lake
    state = _stored(lake_handle.open(uri))
    assert state.cursor.frontier == 3 and state.outstanding() == 0


def _stored(table: DeltaTable) -> LeaseState:
    return LeaseState.from_arrow(table.to_pyarrow_table(), table.version())


def test_kill_9_redelivers_deferred_acks_but_never_an_exactly_once_one(
    proxied: tuple[LakeSpec, S3Proxy],
) -> None:
    """On S3 a plain subscription's acks wait in memory (the lease flush window): a
    kill -9 loses them, and the messages come again (at-least-once). An
    exactly-once subscription commits before it confirms: its acks survive."""
    lake, _ = proxied
    base = f"/v1/projects/{PROJECT}"
    server = start_server(lake)
    try:
        with server.client() as client:
            client.put(f"{base}/topics/crash").raise_for_status()
            for name, exactly_once in (("plain", False), ("exact", True)):
                body = {
                    "topic": f"projects/{PROJECT}/topics/crash",
                    "enableExactlyOnceDelivery": exactly_once,
                }
                client.put(f"{base}/subscriptions/{name}", json=body).raise_for_status()
            messages = [{"data": "bQ==", "attributes": {"n": str(i)}} for i in range(5)]
            client.post(f"{base}/topics/crash:publish", json={"messages": messages})
            for name in ("plain", "exact"):
                got = _pull_all(client, f"{base}/subscriptions/{name}", 5)
                ack = {"ackIds": [r["ackId"] for r in got]}
                client.post(f"{base}/subscriptions/{name}:acknowledge", json=ack).raise_for_status()
        server.process.kill()  # kill -9: no clean stop
        server.process.wait(timeout=30)
    finally:
        stop_server(server)
    again = start_server(lake)
    try:
        with again.client() as client:
            redelivered = _pull_all(client, f"{base}/subscriptions/plain", 5)
            assert sorted(r["message"]["attributes"]["n"] for r in redelivered) == list("01234")
            answer = client.post(
                f"{base}/subscriptions/exact:pull",
                json={"maxMessages": 10, "returnImmediately": True},
            )
            assert answer.json().get("receivedMessages", []) == []
    finally:
        stop_server(again)


def _pull_all(client: httpx.Client, path: str, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        answer = client.post(f"{path}:pull", json={"maxMessages": count - len(got)})
        answer.raise_for_status()
        got += answer.json().get("receivedMessages", [])
    assert len(got) == count, got
    return got


def test_a_subscription_with_pulls_waiting_keeps_its_dispatcher(
    proxied: tuple[LakeSpec, S3Proxy],
) -> None:
    """Waiting pulls run no cycles; that is not idleness: the dispatcher (and the
    tables it holds open) stays between one long poll and the next, where it used
    to exit and reopen both tables (a LIST and GETs each) about once a minute."""
    lake, proxy = proxied
    settings = _s3_defaults(lake, pull_wait_s=2.0, worker_idle_exit_s=1.0)
    topic, sub = TopicName(PROJECT, "keep"), SubscriptionName(PROJECT, "keep")
    with _serving(settings) as engine:
        engine.create_topic(Topic(topic))
        engine.create_subscription(Subscription(sub, topic))
        assert engine.pull(sub, max_messages=1) == []
        first = engine.deliveries._dispatchers.all()
        assert len(first) == 1
        proxy.reset()
        for _ in range(2):
            assert engine.pull(sub, max_messages=1) == []
        assert engine.deliveries._dispatchers.all() == first
        counts = proxy.reset()
    assert _requests(counts) == 0, counts
