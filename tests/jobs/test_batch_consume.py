"""The batch consumer: every message written exactly once across runs, crashes and reruns."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from deltalake import DeltaTable
from jobtools import context, messages, publish_batches, sub_name, topic_name
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from support import LakeSpec

from jobs import batch_consume
from jobs.examples import hourly_counts
from lakepubsub import Engine
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic

EXAMPLE = "jobs.examples.hourly_counts:transform"


def _target(lake: LakeSpec, tmp_path: Path) -> str:
    if lake.storage_options:
        return f"{lake.uri}-summaries/{uuid.uuid4().hex}"
    return str(tmp_path / "summary")


def _totals(target: str, lake: LakeSpec) -> dict[tuple[str | None, str | None], int]:
    rows = DeltaTable(target, storage_options=lake.storage_options or None).to_pyarrow_table()
    totals: dict[tuple[str | None, str | None], int] = {}
    for row in rows.to_pylist():
        key = (row["key"], row["value"])
        totals[key] = totals.get(key, 0) + row["messages"]
    return totals


def test_hourly_counts_exactly_once(
    engine: Engine, lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    topic = engine.create_topic(Topic(topic_name("clicks")))
    sub = engine.create_subscription(Subscription(sub_name("clicks-hourly"), topic.name))
    publish_batches(engine, topic.name, batches=3, per_batch=10)
    target = _target(lake, tmp_path)
    options = batch_consume.BatchOptions(sub.name.path, target, transform=EXAMPLE)

    with context(lake, spark) as ctx:
        first = batch_consume.run(ctx, options)
        again = batch_consume.run(ctx, options)
        publish_batches(engine, topic.name, batches=1, per_batch=6)
        second = batch_consume.run(ctx, options)
    assert (first.status, first.start_offset, first.end_offset) == ("written", 0, 30)
    assert first.rows_written == 3
    assert (again.status, again.rows_written) == ("nothing new", 0)
    assert (second.start_offset, second.end_offset) == (30, 36)
    # Each batch of 10 has 4 x v0, 3 x v1, 3 x v2; the 6 more have 2 of each.
    assert _totals(target, lake) == {("k", "v0"): 14, ("k", "v1"): 11, ("k", "v2"): 11}
    table = DeltaTable(target, storage_options=lake.storage_options or None)
    assert table.transaction_version(batch_consume.app_id(sub.uid)) == 36
    # What was consumed is acknowledged: nothing left to pull.
    assert engine.subscription_state(sub.name).floor() == 36
    assert engine.pull(sub.name, max_messages=10, return_immediately=True) == []


def test_rerun_after_a_crash_between_write_and_ack(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("crashy")))
    sub = engine.create_subscription(Subscription(sub_name("crashy-batch"), topic.name))
    publish_batches(engine, topic.name, batches=2, per_batch=10)
    target = str(tmp_path / "summary")
    options = batch_consume.BatchOptions(
        sub.name.path, target, sql=hourly_counts.SQL, max_messages=15
    )

    with context(local_lake, spark) as ctx:
        acked = ctx.engine.commit_offset

        def crash(*args: object, **kwargs: object) -> None:
            raise RuntimeError("killed before acknowledging")

        ctx.engine.commit_offset = crash  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            batch_consume.run(ctx, options)
        ctx.engine.commit_offset = acked  # type: ignore[method-assign]
        # The batch [0, 15) is in the target, but the subscription still starts at 0.
        assert engine.subscription_state(sub.name).cursor.frontier == 0
        publish_batches(engine, topic.name, batches=1, per_batch=10)
        rerun = batch_consume.run(ctx, options)
        rest = batch_consume.run(ctx, options)
    assert rerun.recovered_to == 15
    assert (rerun.start_offset, rerun.end_offset) == (15, 30)
    assert (rest.start_offset, rest.end_offset) == (30, 30)
    assert sum(_totals(target, local_lake).values()) == 30


def test_a_failed_transform_writes_nothing(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("failing")))
    sub = engine.create_subscription(Subscription(sub_name("failing-batch"), topic.name))
    publish_batches(engine, topic.name, batches=1, per_batch=5)
    target = str(tmp_path / "copy")

    def broken(frame: DataFrame) -> DataFrame:

        return frame.select(sf.raise_error("bad row").alias("offset"))

    options = batch_consume.BatchOptions(sub.name.path, target)
    with context(local_lake, spark) as ctx:
        with pytest.raises(Exception, match="bad row"):
            batch_consume.run(ctx, options, transform=broken)
        assert engine.subscription_state(sub.name).cursor.frontier == 0
        done = batch_consume.run(ctx, options, transform=lambda f: f.select("offset", "data"))
    assert (done.start_offset, done.end_offset, done.rows_written) == (0, 5, 5)
    copied = DeltaTable(target).to_pyarrow_table()
    assert sorted(copied["offset"].to_pylist()) == [0, 1, 2, 3, 4]


def test_subscription_filter_applies(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("filtered")))
    sub = engine.create_subscription(
        Subscription(sub_name("filtered-batch"), topic.name, filter='attributes.k = "v1"')
    )
    engine.publish(topic.name, messages(9))
    engine.publish(topic.name, [PublishMessage(b"no attributes")])
    target = str(tmp_path / "v1")
    options = batch_consume.BatchOptions(
        sub.name.path, target, sql="SELECT offset, attributes['k'] AS k FROM messages"
    )
    with context(local_lake, spark) as ctx:
        report = batch_consume.run(ctx, options)
    assert report.end_offset == 10
    rows = DeltaTable(target).to_pyarrow_table().to_pylist()
    assert sorted(r["offset"] for r in rows) == [1, 4, 7]
    assert {r["k"] for r in rows} == {"v1"}
