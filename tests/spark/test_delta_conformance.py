"""The reference reader verifies us: delta-spark opens every table lakepubsub writes.

Messages tables are committed by lakepubsub's direct log (appends, compaction,
deletes), lease tables by its copy-on-write lease commits, the catalog and the
truncations table by delta-rs; checkpoints come from lakepubsub's replay of the
log (``lakepubsub/_lake/checkpoints.py``) and from delta-rs. For each, at
each step and at every retained version, delta-spark must find exactly the
rows delta-rs finds, skip files only where their statistics allow it, and
answer ``DESCRIBE DETAIL`` and ``DESCRIBE HISTORY``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf
from support import LakeSpec

from jobs import compact, truncate
from jobs.common import JobContext
from lakepubsub import Engine, constants, errors
from lakepubsub._lake import Lake
from lakepubsub._lake.checkpointer import settle_checkpoints
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription, TruncationPolicy
from lakepubsub.resources.topics import Topic
from lakepubsub.spark.tables import pinned_version, read_table, spark_path

PROJECT = "conf"


@pytest.fixture
def engine_on(lake: LakeSpec) -> Iterator[Engine]:
    """Publishes commit to the topic's own table (on S3 too, where they would go to
    the intake by default; ``test_the_intake_table`` covers that one)."""
    with Engine(lake.settings(intake=False)) as engine:
        yield engine


def rows_of(table: pa.Table) -> list[str]:
    """Rows as sortable JSON text (maps as key/value lists, bytes as hex)."""

    def plain(value: object) -> object:
        if isinstance(value, bytes):
            return value.hex()
        return str(value) if not isinstance(value, int | str | list | dict | None) else value

    return sorted(
        json.dumps({k: plain(v) for k, v in row.items()}, default=str, sort_keys=True)
        for row in table.to_pylist()
    )


def delta_rs(uri: str, storage: dict[str, str], version: int | None = None) -> DeltaTable:
    return DeltaTable(uri, version=version, storage_options=storage or None)


def assert_same_rows(
    spark: SparkSession, uri: str, storage: dict[str, str], version: int | None = None
) -> int:
    """delta-spark's rows of ``uri`` at ``version`` (default: latest) are delta-rs's; the count."""
    table = delta_rs(uri, storage, version)
    expected = table.to_pyarrow_table()
    frame = read_table(spark, uri, version=table.version(), storage_options=storage)
    assert pinned_version(frame) == table.version()
    got = frame.toArrow().select(expected.schema.names).cast(expected.schema)
    assert rows_of(got) == rows_of(expected), f"{uri} at version {table.version()}"
    return int(expected.num_rows)


def assert_every_version(spark: SparkSession, uri: str, storage: dict[str, str]) -> None:
    """Each version from the oldest in the log to the latest reads the same both ways
    (one Spark job over all versions)."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{spark_path(uri)}`").collect()
    versions = sorted(r["version"] for r in history)
    assert versions[-1] == delta_rs(uri, storage).version()
    frames = [
        read_table(spark, uri, version=v, storage_options=storage).withColumn("_version", sf.lit(v))
        for v in versions
    ]
    everything = functools.reduce(lambda a, b: a.unionByName(b), frames).toArrow()
    for version in versions:
        expected = delta_rs(uri, storage, version).to_pyarrow_table()
        mine = everything.filter(pc.equal(everything.column("_version"), version))
        got = mine.select(expected.schema.names).cast(expected.schema)
        assert rows_of(got) == rows_of(expected), f"{uri} at version {version}"


def copy_from_checkpoint(lake: Lake, uri: str, checkpoint: int) -> str:
    """A copy of the table without the JSON commits before ``checkpoint`` (as log cleanup
    leaves it): only a reader that uses the checkpoint can open it."""
    copy = f"{uri}-from-checkpoint-{checkpoint}"
    if not lake.is_s3:
        shutil.copytree(uri, copy)
        for version in range(checkpoint):
            os.remove(os.path.join(copy, "_delta_log", f"{version:020d}.json"))
        return copy
    client = lake.s3_client()
    prefix = uri.split("/", 3)[3] + "/"
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=lake.bucket, Prefix=prefix)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    dropped = {f"_delta_log/{v:020d}.json" for v in range(checkpoint)}
    for key in keys:
        relative = key[len(prefix) :]
        if relative not in dropped:
            source = {"Bucket": lake.bucket, "Key": key}
            target = copy.split("/", 3)[3] + "/" + relative
            client.copy_object(Bucket=lake.bucket, Key=target, CopySource=source)
    return copy


def assert_skipping_exact(spark: SparkSession, uri: str, storage: dict[str, str]) -> None:
    """Filters on every file's boundary offsets and publish times find every row: no file
    is skipped by statistics that do not hold."""
    table = delta_rs(uri, storage)
    actions = pa.table(table.get_add_actions(flatten=True))
    rows = table.to_pyarrow_table(columns=["offset", "publish_time"])
    bounds = set(
        actions.column("min.offset").to_pylist() + actions.column("max.offset").to_pylist()
    )
    frame = read_table(spark, uri, storage_options=storage)
    assert frame.where(frame["offset"].isin(sorted(bounds))).count() == len(bounds)
    # Each file's first and last publish time, at full microsecond precision.
    offsets = rows.column("offset")
    stamps = set()
    for low, high in zip(
        actions.column("min.offset").to_pylist(),
        actions.column("max.offset").to_pylist(),
        strict=True,
    ):
        for edge in (low, high):
            index = pc.index(offsets, edge).as_py()
            stamps.add(rows.column("publish_time")[index].as_py())
    expected = sum(1 for s in rows.column("publish_time").to_pylist() if s in stamps)
    assert frame.where(frame["publish_time"].isin(sorted(stamps))).count() == expected


def assert_described(spark: SparkSession, uri: str, storage: dict[str, str]) -> None:
    table = delta_rs(uri, storage)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{spark_path(uri)}`").first()
    assert detail is not None
    assert detail["format"] == "delta"
    assert detail["numFiles"] == len(table.file_uris())
    assert detail["id"] == table.metadata().id


def publish(engine: Engine, topic: TopicName, batches: int, per_batch: int = 5) -> None:
    for b in range(batches):
        engine.publish(
            topic,
            [
                PublishMessage(
                    f"m{b}-{i}".encode(),
                    {"batch": str(b)} if i % 2 else {},
                    ordering_key=f"k{i % 2}" if i % 3 == 0 else "",
                )
                for i in range(per_batch)
            ],
        )


def test_messages_table_through_appends_checkpoints_deletes_compaction(
    engine_on: Engine, lake: LakeSpec, spark: SparkSession
) -> None:
    engine = engine_on
    storage = dict(lake.storage_options)
    topic = engine.create_topic(Topic(TopicName(PROJECT, "orders")))
    uri = engine.lake.messages_uri(topic.uid)

    publish(engine, topic.name, batches=4)  # direct-log appends
    assert assert_same_rows(spark, uri, storage) == 20
    assert_skipping_exact(spark, uri, storage)

    publish(engine, topic.name, batches=9)  # past the checkpoint interval (10)
    settle_checkpoints()
    # lakepubsub's own checkpoint (lakepubsub/_lake/checkpoints.py), read with no
    # JSON commit before it.
    ours = json.loads(engine.lake.objects.read(f"{uri}/_delta_log/_last_checkpoint") or b"{}")
    assert ours.get("version", 0) >= 9  # the interval (10) counts from version -1
    from_ours = copy_from_checkpoint(engine.lake, uri, ours["version"])
    assert rows_of(read_table(spark, from_ours, storage_options=storage).toArrow()) == rows_of(
        read_table(spark, uri, storage_options=storage).toArrow()
    )
    assert rows_of(delta_rs(from_ours, storage).to_pyarrow_table()) == rows_of(
        delta_rs(uri, storage).to_pyarrow_table()
    )
    delta_rs(uri, storage).create_checkpoint()  # and delta-rs's at the newest version
    assert assert_same_rows(spark, uri, storage) == 65
    copy = copy_from_checkpoint(engine.lake, uri, delta_rs(uri, storage).version())
    with pytest.raises(errors.NotFound):  # the copy has no JSON commit to start from
        read_table(spark, copy, version=0, storage_options=storage)
    assert rows_of(read_table(spark, copy, storage_options=storage).toArrow()) == rows_of(
        read_table(spark, uri, storage_options=storage).toArrow()
    )

    deleted, version = MessagesTable(engine.lake, topic.uid).delete_below(12)  # straddles a file
    assert (deleted, version) == (12, delta_rs(uri, storage).version())
    assert assert_same_rows(spark, uri, storage) == 53

    with JobContext(lake.settings(), spark=spark) as ctx:
        report = compact.run(ctx, compact.CompactOptions(min_small_files=2, vacuum=False))
    assert [t.status for t in report.tables if t.kind == "messages"] == ["ok"]
    assert len(delta_rs(uri, storage).file_uris()) < 10
    assert assert_same_rows(spark, uri, storage) == 53
    assert_skipping_exact(spark, uri, storage)

    publish(engine, topic.name, batches=1)  # an append after the compaction
    assert assert_same_rows(spark, uri, storage) == 58
    assert_every_version(spark, uri, storage)
    assert_described(spark, uri, storage)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{spark_path(uri)}`").collect()
    operations = {r["operation"] for r in history}
    assert {"WRITE", "DELETE", "OPTIMIZE"} <= operations


def test_lease_catalog_snapshot_and_truncation_tables(
    engine_on: Engine, lake: LakeSpec, spark: SparkSession
) -> None:
    engine = engine_on
    storage = dict(lake.storage_options)
    topic = engine.create_topic(Topic(TopicName(PROJECT, "events")))
    sub = engine.create_subscription(
        Subscription(SubscriptionName(PROJECT, "events-sub"), topic.name)
    )
    small = engine.create_subscription(
        Subscription(
            SubscriptionName(PROJECT, "events-small"),
            topic.name,
            truncation_policy=TruncationPolicy(max_bytes=20),
        )
    )
    publish(engine, topic.name, batches=3)
    received = engine.pull(sub.name, max_messages=6, return_immediately=True)
    engine.acknowledge(sub.name, [r.ack_id for r in received[:3]])
    engine.nack(sub.name, [received[4].ack_id])
    engine.create_snapshot(SnapshotName(PROJECT, "events-snap"), sub.name)
    with JobContext(lake.settings(), spark=spark) as ctx:
        report = truncate.run(ctx, truncate.TruncateOptions(delete_messages=False))
    assert [t.subscription for t in report.truncations] == [small.name.path]

    lake_ = engine.lake
    leases = lake_.leases_uri(sub.uid)
    assert assert_same_rows(spark, leases, storage) >= 4  # cursor + outstanding rows
    assert_every_version(spark, leases, storage)
    assert_same_rows(spark, lake_.leases_uri(small.uid), storage)
    [snapshot] = engine.catalog.view().of_kind("snapshot")
    assert assert_same_rows(spark, lake_.snapshot_uri(snapshot.uid), storage) >= 1
    assert assert_same_rows(spark, lake_.catalog_uri, storage) == 4
    assert_every_version(spark, lake_.catalog_uri, storage)
    assert assert_same_rows(spark, lake_.truncations_uri, storage) == 1

    with JobContext(lake.settings(), spark=spark) as ctx:  # delta-rs optimize + checkpoints
        compact.run(ctx, compact.CompactOptions(min_small_files=2, vacuum=False))
    for uri in (leases, lake_.catalog_uri, lake_.truncations_uri):
        assert_same_rows(spark, uri, storage)
        assert_described(spark, uri, storage)


def test_the_intake_table(
    lake: LakeSpec, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intake (tagged adds, every topic in one file) through appends, moves and
    the removal of moved files reads the same in delta-spark as in delta-rs."""
    monkeypatch.setattr(constants, "INTAKE_REMOVE_GRACE_S", 0.0)
    storage = dict(lake.storage_options)
    with Engine(lake.settings(intake=True, intake_move_s=3600.0)) as engine:
        topics = [engine.create_topic(Topic(TopicName(PROJECT, f"hot-{i}"))) for i in range(3)]
        for topic in topics:
            publish(engine, topic.name, batches=3)
        uri = engine.lake.intake_uri()
        assert assert_same_rows(spark, uri, storage) == 45
        intake = engine.intake
        assert intake is not None
        intake.move_all()
        monkeypatch.setattr("lakepubsub.publish.intake_moves.REMOVAL_PASS_S", 0.0)
        with intake._work:
            intake.mover.remove_moved(time.monotonic())  # the first pass starts the grace (0 s)
            intake.mover.remove_moved(time.monotonic())
        assert assert_same_rows(spark, uri, storage) == 0
        assert_every_version(spark, uri, storage)
        for topic in topics:
            assert assert_same_rows(spark, engine.lake.messages_uri(topic.uid), storage) == 15
