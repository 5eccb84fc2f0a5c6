"""The flush window: a topic's publishes and a subscription's lease changes commit
at most once per window, however many requests come (real threads, real tables)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import REGISTRY
from support import LakeSpec

from lakepubsub import Engine
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic
from lakepubsub.settings import Settings

TOPIC = TopicName("flush", "topic")
SUB = SubscriptionName("flush", "sub")
WINDOW_MS = 250.0
SECONDS = 3.0
PUBLISHERS = 16


def _commits(table: str) -> float:
    return REGISTRY.get_sample_value("lakepubsub_delta_commits_total", {"table": table}) or 0.0


def test_publishes_and_acks_commit_once_per_window(local_lake: LakeSpec) -> None:
    settings = local_lake.settings(flush_ms=WINDOW_MS)
    assert Settings(lake="s3://bucket/lake").flush_s() > 0 == Settings(lake="/tmp/x").flush_s()
    with Engine(settings) as engine:
        engine.create_topic(Topic(TOPIC))
        engine.create_subscription(Subscription(SUB, TOPIC))
        stop = threading.Event()
        published = 0
        lock = threading.Lock()

        def publish() -> None:
            nonlocal published
            while not stop.is_set():
                engine.publish(TOPIC, [PublishMessage(b"m")])
                with lock:
                    published += 1

        def consume() -> int:
            got = 0
            while not stop.is_set():
                received = engine.pull(SUB, max_messages=100)
                engine.acknowledge(SUB, [r.ack_id for r in received])
                got += len(received)
            return got

        messages, leases = _commits("messages"), _commits("leases")
        started = time.monotonic()
        with ThreadPoolExecutor(PUBLISHERS + 1) as pool:
            futures = [pool.submit(publish) for _ in range(PUBLISHERS)]
            consumer = pool.submit(consume)
            time.sleep(SECONDS)
            stop.set()
            for future in futures:
                future.result()
            consumer.result()
        elapsed = time.monotonic() - started
        messages, leases = _commits("messages") - messages, _commits("leases") - leases
    windows = elapsed / (WINDOW_MS / 1000)
    print(f"{published} publishes, {messages} message commits, {leases} lease commits")
    # Each window: at most one publish commit, and one lease commit (the pull's
    # leases and the previous pull's acks go together, or one each).
    assert published > 2 * messages
    assert messages <= windows + 2
    assert leases <= windows + 2


def test_the_flush_window_default_follows_the_storage_kind() -> None:
    """Local: none; S3 Standard: 250 ms; S3 Express One Zone (a directory bucket,
    or the lake's tier set by name): 50 ms, also for an intake kept in a directory
    bucket apart from a Standard lake; an explicit window wins; a wrong tier is refused."""
    assert Settings(lake="/tmp/x").flush_s() == 0
    assert Settings(lake="s3://bucket/lake").flush_s() == 0.25
    assert Settings(lake="s3://lake--use1-az4--x-s3/prefix").flush_s() == 0.05
    assert Settings(lake="s3://bucket/lake", s3_tier="express").flush_s() == 0.05
    assert Settings(lake="s3://lake--use1-az4--x-s3", s3_tier="standard").flush_s() == 0.25
    assert Settings(lake="/tmp/x", s3_tier="express").flush_s() == 0
    hot = "s3://hot--use1-az4--x-s3/lake/intake"
    assert Settings(lake="s3://bucket/lake").flush_s(hot) == 0.05
    assert Settings(lake="s3://bucket/lake", s3_tier="express").flush_s("s3://other/i") == 0.25
    with pytest.raises(ValueError, match="same kind of storage"):
        Settings(lake="/tmp/x", intake_lake="s3://hot/lake")
    env = {"LAKEPUBSUB_LAKE": "s3://b/l", "LAKEPUBSUB_S3_TIER": "express"}
    assert Settings.from_env(env).flush_s() == 0.05
    assert Settings.from_env({**env, "LAKEPUBSUB_FLUSH_MS": "100"}).flush_s() == 0.1
    with pytest.raises(ValueError, match="LAKEPUBSUB_S3_TIER"):
        Settings.from_env({**env, "LAKEPUBSUB_S3_TIER": "glacier"})


@pytest.mark.parametrize("intake", [False, True])
def test_a_publish_its_caller_gave_up_on_leaves_the_others_of_its_commit_answered(
    local_lake: LakeSpec, intake: bool
) -> None:
    """A caller that withdraws (its future cancelled, as the doors do when a client's
    deadline passes or its call ends) while its publish waits in the window: the
    publish still commits, and every other publish of the same commit is answered."""
    with Engine(local_lake.settings(flush_ms=1000.0, intake=intake)) as engine:
        engine.create_topic(Topic(TOPIC))
        engine.create_subscription(Subscription(SUB, TOPIC))
        engine.publish(TOPIC, [PublishMessage(b"first")])  # the window starts after it
        futures = [engine.publish_future(TOPIC, [PublishMessage(b"m%d" % i)]) for i in range(3)]
        assert futures[0].cancel() and futures[1].cancel()
        assert futures[2].result(timeout=30) == ["3"]
        assert engine.publish(TOPIC, [PublishMessage(b"after")]) == ["4"]
