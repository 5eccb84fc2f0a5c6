"""Helpers for the job tests: resources, traffic in background threads, table facts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from support import LakeSpec

from jobs.common import JobContext
from lakepubsub import Engine
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.settings import wall_clock_us

PROJECT = "proj"
HOUR_US = 3600 * 1_000_000


def context(
    lake: LakeSpec, spark: SparkSession | None = None, *, ahead_s: float = 0.0
) -> JobContext:
    """A job context on ``lake`` whose clock runs ``ahead_s`` seconds in the future."""
    ahead_us = int(ahead_s * 1_000_000)
    return JobContext(lake.settings(), spark=spark, clock_us=lambda: wall_clock_us() + ahead_us)


def topic_name(name: str) -> TopicName:
    return TopicName(PROJECT, name)


def sub_name(name: str) -> SubscriptionName:
    return SubscriptionName(PROJECT, name)


def messages(count: int, *, size: int = 100, start: int = 0) -> list[PublishMessage]:
    return [PublishMessage(b"x" * size, {"k": f"v{(start + i) % 3}"}) for i in range(count)]


def publish_batches(engine: Engine, topic: TopicName, batches: int, per_batch: int) -> list[int]:
    """One commit per batch (one small file each); returns the offsets."""
    offsets: list[int] = []
    for _ in range(batches):
        offsets += [int(i) for i in engine.publish(topic, messages(per_batch))]
    return offsets


def table_offsets(uri: str, storage_options: dict[str, str] | None = None) -> list[int]:
    table = DeltaTable(uri, storage_options=storage_options or None)
    column = table.to_pyarrow_table(columns=["offset"]).column("offset")
    return sorted(int(o) for o in column.to_pylist())


def file_ranges(uri: str, storage_options: dict[str, str] | None = None) -> list[tuple[int, int]]:
    """(min, max) offset of every data file, in offset order."""
    table = DeltaTable(uri, storage_options=storage_options or None)
    actions = pa.table(table.get_add_actions(flatten=True))
    lows = actions.column("min.offset").to_pylist()
    highs = actions.column("max.offset").to_pylist()
    return sorted(zip(lows, highs, strict=True))


@dataclass
class Traffic:
    """Publishers and an acking puller running on an engine until stopped."""

    published: list[int] = field(default_factory=list)
    acked: int = 0
    errors: list[BaseException] = field(default_factory=list)
    commits: int = 0


@contextmanager
def traffic(
    engine: Engine,
    topic: TopicName,
    sub: SubscriptionName | None,
    *,
    batch: int = 20,
    pause_s: float = 0.0,
) -> Iterator[Traffic]:
    """Publish ``batch`` messages per commit and pull + ack ``sub`` until the block ends."""
    stop = threading.Event()
    seen = Traffic()

    def guarded(step: Callable[[], None]) -> Callable[[], None]:
        def loop() -> None:
            while not stop.is_set():
                try:
                    step()
                except BaseException as exc:
                    seen.errors.append(exc)
                    return
                if pause_s:
                    time.sleep(pause_s)

        return loop

    def publish() -> None:
        seen.published += [int(i) for i in engine.publish(topic, messages(batch))]
        seen.commits += 1

    def pull() -> None:
        assert sub is not None
        received = engine.pull(sub, max_messages=100, return_immediately=True)
        ids = [r.ack_id for r in received]
        if ids:
            engine.acknowledge(sub, ids)
            seen.acked += len(ids)
        else:
            time.sleep(0.01)

    threads = [threading.Thread(target=guarded(publish), daemon=True)]
    if sub is not None:
        threads.append(threading.Thread(target=guarded(pull), daemon=True))
    for thread in threads:
        thread.start()
    try:
        yield seen
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
