"""Races with real processes: publishers and several consumers on one subscription."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import random
import time
from pathlib import Path

import pytest
from support import LakeSpec

from lakepubsub import (
    Engine,
    PublishMessage,
    Settings,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
    errors,
)

TOPIC = TopicName("proj", "race")
PUBLISHERS = 2
CONSUMERS = 4
BATCHES = 15
BATCH = 20


def _settings(uri: str, options: dict[str, str]) -> Settings:
    return Settings(lake=uri, storage_options=options, pull_wait_s=0.5, pull_poll_interval_s=0.05)


def _publisher(uri: str, options: dict[str, str], index: int, out: str) -> None:
    with Engine(_settings(uri, options)) as engine, open(out, "w") as log:
        for b in range(BATCHES):
            batch = [PublishMessage(f"p{index}-{b}-{i}".encode()) for i in range(BATCH)]
            ids = engine.publish(TOPIC, batch)
            log.write(json.dumps(ids) + "\n")
            log.flush()
            time.sleep(random.uniform(0, 0.05))


def _retry(call):  # type: ignore[no-untyped-def]
    while True:
        try:
            return call()
        except errors.Aborted:
            continue


def _consumer(
    uri: str, options: dict[str, str], sub: str, chaos: bool, done: str, out: str
) -> None:
    name = SubscriptionName.parse(sub)
    rng = random.Random(os.getpid())
    idle_since = time.monotonic()
    with Engine(_settings(uri, options)) as engine, open(out, "w") as log:
        while True:
            try:
                received = engine.pull(name, max_messages=rng.randint(1, 30))
            except errors.Aborted:  # as any client does on ABORTED: retry
                continue
            now = time.time()
            if not received:
                if os.path.exists(done) and time.monotonic() - idle_since > 3.0:
                    return
                continue
            idle_since = time.monotonic()
            ack, release = [], []
            for r in received:
                assert r.message is not None
                entry = {"offset": r.message.offset, "ack_id": r.ack_id, "pulled": now}
                if chaos and rng.random() < 0.3:
                    release.append((r.ack_id, entry))
                else:
                    ack.append((r.ack_id, entry))
            for ack_id, entry in release:
                entry["released"] = time.time()
                _retry(lambda a=ack_id: engine.modify_ack_deadline(name, [a], rng.choice([0, 1])))
                entry["event"] = "released"
                log.write(json.dumps(entry) + "\n")
            if ack:
                ids = [a for a, _ in ack]
                failures = _retry(lambda ids=ids: engine.acknowledge(name, ids))
                for ack_id, entry in ack:
                    entry["event"] = "ack-failed" if ack_id in failures else "acked"
                    log.write(json.dumps(entry) + "\n")
            log.flush()


def _run(
    lake: LakeSpec, tmp_path: Path, sub: Subscription, chaos: bool
) -> tuple[list[int], list[dict]]:  # type: ignore[type-arg]
    with Engine(lake.settings()) as engine:
        engine.create_topic(Topic(TOPIC))
        engine.create_subscription(sub)
    ctx = mp.get_context("spawn")
    done = str(tmp_path / "published")
    pubs = [
        ctx.Process(
            target=_publisher, args=(lake.uri, lake.storage_options, i, str(tmp_path / f"pub{i}"))
        )
        for i in range(PUBLISHERS)
    ]
    cons = [
        ctx.Process(
            target=_consumer,
            args=(
                lake.uri,
                lake.storage_options,
                sub.name.path,
                chaos,
                done,
                str(tmp_path / f"con{i}"),
            ),
        )
        for i in range(CONSUMERS)
    ]
    for p in pubs + cons:
        p.start()
    for p in pubs:
        p.join(timeout=240)
        assert p.exitcode == 0
    Path(done).touch()
    for p in cons:
        p.join(timeout=240)
        assert p.exitcode == 0
    lines = [
        line for n in range(PUBLISHERS) for line in (tmp_path / f"pub{n}").read_text().splitlines()
    ]  # fmt: skip
    published = [int(i) for line in lines for i in json.loads(line)]
    events = [
        json.loads(line) for n in range(CONSUMERS)
        for line in (tmp_path / f"con{n}").read_text().splitlines()
    ]  # fmt: skip
    return published, events


def test_consumers_share_without_duplicates(lake: LakeSpec, tmp_path: Path) -> None:
    sub = Subscription(SubscriptionName("proj", "plain"), TOPIC, ack_deadline_s=120)
    published, events = _run(lake, tmp_path, sub, chaos=False)
    assert len(published) == PUBLISHERS * BATCHES * BATCH
    assert sorted(published) == list(range(len(published))), "dense offsets, none lost"
    delivered = sorted(e["offset"] for e in events)
    assert delivered == sorted(published), "every message delivered exactly once, none lost"
    assert {e["event"] for e in events} == {"acked"}


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_exactly_once_acks_under_random_deadlines(lake: LakeSpec, tmp_path: Path) -> None:
    sub = Subscription(
        SubscriptionName("proj", "eod"), TOPIC, ack_deadline_s=60, enable_exactly_once_delivery=True
    )
    published, events = _run(lake, tmp_path, sub, chaos=True)
    acked = [e["offset"] for e in events if e["event"] == "acked"]
    assert sorted(acked) == sorted(published), "each message successfully acked exactly once"
    by_offset: dict[int, list[dict]] = {}  # type: ignore[type-arg]
    for e in events:
        by_offset.setdefault(e["offset"], []).append(e)
    redelivered = 0
    for deliveries in by_offset.values():
        deliveries.sort(key=lambda e: e["pulled"])
        for earlier, later in itertools.pairwise(deliveries):
            redelivered += 1
            # a redelivery only after the earlier lease was released (nack or 1 s deadline)
            assert earlier["event"] == "released"
            assert later["pulled"] >= earlier["released"] - 0.05
    assert redelivered > 0, "the chaos should have caused redeliveries"
