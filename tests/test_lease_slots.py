"""Deferred lease commits of a process are spaced over all its subscriptions, so
their number does not grow with the subscriptions (real engine, real lease tables,
real dispatcher threads)."""

from __future__ import annotations

import time

from deltalake import DeltaTable
from support import LakeSpec

from lakepubsub import Engine
from lakepubsub.delivery.lease_slots import LeaseSlots
from lakepubsub.delivery.leases import LeaseState
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic

SUBSCRIPTIONS = 30
LEASE_FLUSH_MS = 1_000.0
STRIDE = 5


def test_slots_are_spaced_in_the_order_asked() -> None:
    slots = LeaseSlots()
    assert slots.reserve(0.5, now=10.0) == 10.0
    assert slots.reserve(0.5, now=10.1) == 10.5
    assert slots.reserve(0.5, now=10.2) == 11.0
    assert slots.reserve(0.5, now=20.0) == 20.0  # a free process commits at once


def test_many_subscriptions_commit_their_deferred_acks_a_spacing_apart(
    local_lake: LakeSpec,
) -> None:
    settings = local_lake.settings(lease_flush_ms=LEASE_FLUSH_MS)
    spacing_s = settings.lease_commit_spacing_s()
    assert spacing_s == LEASE_FLUSH_MS / 1000 / 20
    topic = TopicName("slots", "topic")
    subs = [SubscriptionName("slots", f"sub-{i}") for i in range(SUBSCRIPTIONS)]
    with Engine(settings) as engine:
        engine.create_topic(Topic(topic))
        for sub in subs:
            engine.create_subscription(Subscription(sub, topic))
        engine.publish(topic, [PublishMessage(b"m")])
        uris = []
        for sub in subs:
            got = engine.pull(sub, max_messages=1)
            assert len(got) == 1
            assert engine.acknowledge(sub, [got[0].ack_id]) == {}
            uris.append(engine.lake.leases_uri(engine.get_subscription(sub).uid))
        acked_at = time.monotonic()
        deadline = acked_at + LEASE_FLUSH_MS / 1000 + SUBSCRIPTIONS * spacing_s + 10
        stored: dict[str, float] = {}
        while len(stored) < len(uris) and time.monotonic() < deadline:
            for uri in uris:
                if uri not in stored and _frontier(uri) == 1:
                    table = DeltaTable(uri)
                    stored[uri] = table.history(1)[0]["timestamp"] / 1000
            time.sleep(0.02)
        assert len(stored) == len(uris), "every deferred ack is stored"
        # Each commit waited its window, then its slot: the commits are a spacing
        # apart, not all at the window's end. Any STRIDE + 1 of them span at least
        # STRIDE - 1 spacings (a commit lands a little after its slot, by a jitter
        # of its own).
        times = sorted(stored.values())
        spans = [b - a for a, b in zip(times, times[STRIDE:], strict=False)]
        assert min(spans) >= (STRIDE - 1) * spacing_s, spans


def _frontier(uri: str) -> int:
    table = DeltaTable(uri)
    return LeaseState.from_arrow(table.to_pyarrow_table(), table.version()).cursor.frontier
