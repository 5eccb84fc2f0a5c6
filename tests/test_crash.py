"""Crash safety: SIGKILL in the middle of publish or ack loses nothing acknowledged."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path

from support import LakeSpec

from lakepubsub import (
    Engine,
    PublishMessage,
    Settings,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
)
from lakepubsub.delivery.leases import LeaseState
from lakepubsub.publish.messages_table import MessagesTable

TOPIC = TopicName("proj", "crash")
SUB = SubscriptionName("proj", "crash-sub")
KILLS = 5


def _settings(uri: str, options: dict[str, str]) -> Settings:
    return Settings(lake=uri, storage_options=options, pull_wait_s=0.3, pull_poll_interval_s=0.05)


def _publish_forever(uri: str, options: dict[str, str], out: str, start: int) -> None:
    with Engine(_settings(uri, options)) as engine, open(out, "a") as log:
        n = start
        while True:
            batch = [PublishMessage(f"{n}-{i}".encode()) for i in range(random.randint(1, 50))]
            ids = engine.publish(TOPIC, batch)
            log.write(" ".join(ids) + "\n")
            log.flush()
            n += 1


def _ack_forever(uri: str, options: dict[str, str], out: str) -> None:
    with Engine(_settings(uri, options)) as engine, open(out, "a") as log:
        while True:
            got = engine.pull(SUB, max_messages=random.randint(1, 40))
            if got:
                engine.acknowledge(SUB, [r.ack_id for r in got])
                log.write(" ".join(str(r.message.offset) for r in got if r.message) + "\n")
                log.flush()


# A process's first commit can take many seconds on a loaded machine (spawn,
# imports, S3 set-up), so the kill is timed from its first logged line.
FIRST_COMMIT_TIMEOUT_S = 60.0


def _kill_after(target, args, seconds: float) -> None:  # type: ignore[no-untyped-def]
    log = Path(args[2])
    before = log.stat().st_size if log.exists() else 0
    proc = mp.get_context("spawn").Process(target=target, args=args)
    proc.start()
    deadline = time.monotonic() + FIRST_COMMIT_TIMEOUT_S
    while time.monotonic() < deadline and proc.is_alive():
        if log.exists() and log.stat().st_size > before:
            break
        time.sleep(0.02)
    time.sleep(seconds)
    os.kill(proc.pid or 0, signal.SIGKILL)
    proc.join()


def test_sigkill_during_publish_and_ack_loses_nothing(lake: LakeSpec, tmp_path: Path) -> None:
    with Engine(lake.settings()) as engine:
        engine.create_topic(Topic(TOPIC))
        engine.create_subscription(Subscription(SUB, TOPIC, ack_deadline_s=10))
    published_log = tmp_path / "published"
    acked_log = tmp_path / "acked"
    rng = random.Random(7)
    for round_ in range(KILLS):
        # the kill lands somewhere in the commit loop, after the first commit
        _kill_after(
            _publish_forever,
            (lake.uri, lake.storage_options, str(published_log), round_ * 10_000),
            rng.uniform(0.5, 2.5),
        )
        _kill_after(
            _ack_forever, (lake.uri, lake.storage_options, str(acked_log)), rng.uniform(0.5, 2.0)
        )

    acknowledged = [int(i) for line in published_log.read_text().splitlines() for i in line.split()]
    assert acknowledged, "the publisher should have committed something before the kills"
    with Engine(lake.settings(pull_wait_s=0.5)) as engine:
        table = MessagesTable(engine.lake, engine.get_topic(TOPIC).uid)
        stored = table.read_range(0, table.head())["offset"].to_pylist()
        assert stored == list(range(len(stored))), "offsets stay dense across crashes"
        assert set(acknowledged) <= set(stored), "every acknowledged publish survives"
        # Drain what is left (leases of killed consumers expire after the 10 s
        # deadline and are redelivered) until the subscription has acked everything.
        # A killed consumer may have committed acks it never logged, so the end
        # state is read from the lease table, not from the logs.
        acked_before = {int(o) for line in acked_log.read_text().splitlines() for o in line.split()}
        assert acked_before, "the consumers should have acked something before the kills"
        leases = engine.lake.open(engine.lake.leases_uri(engine.get_subscription(SUB).uid))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = engine.pull(SUB, max_messages=1000)
            if got:
                engine.acknowledge(SUB, [r.ack_id for r in got])
            leases.update_incremental()
            state = LeaseState.from_arrow(leases.to_pyarrow_table(), leases.version())
            if state.floor() == len(stored):
                break
        assert state.floor() == len(stored), "every stored message is eventually acked"
        assert state.rows == {}
