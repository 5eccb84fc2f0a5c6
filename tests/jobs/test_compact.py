"""Compaction: fewer files, the same rows and offsets, while the engine publishes and acks."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator

import pytest
from deltalake import DeltaTable
from jobtools import (
    context,
    file_ranges,
    messages,
    publish_batches,
    sub_name,
    table_offsets,
    topic_name,
    traffic,
)
from pyspark.sql import SparkSession
from support import LakeSpec

from jobs import compact
from jobs.common import errored
from lakepubsub import Engine, constants
from lakepubsub._lake import checkpointer, checkpoints, table_schemas
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic


@pytest.fixture
def engine(lake: LakeSpec) -> Iterator[Engine]:
    """Publishes commit to each topic's own table, one small file each, on S3 too
    (where they would go to the intake by default and reach the table in a few
    large moves): the small files are what compaction is for.
    tests/jobs/test_views.py compacts a topic fed through the intake."""
    with Engine(lake.settings(intake=False)) as eng:
        yield eng


def test_compaction_keeps_every_row_under_traffic(
    engine: Engine, lake: LakeSpec, spark: SparkSession
) -> None:
    topic = engine.create_topic(Topic(topic_name("orders")))
    sub = engine.create_subscription(Subscription(sub_name("orders-sub"), topic.name))
    first = publish_batches(engine, topic.name, batches=24, per_batch=10)
    uri = engine.lake.messages_uri(topic.uid)
    storage = lake.storage_options
    files_before = len(file_ranges(uri, storage))
    assert files_before >= 24

    with context(lake, spark) as ctx, traffic(engine, topic.name, sub.name) as load:
        time.sleep(0.3)  # traffic is flowing when the job starts
        report = compact.run(ctx, compact.CompactOptions(min_small_files=4))
        time.sleep(0.3)
    assert load.errors == []
    assert load.commits > 0 and load.acked > 0

    result = next(t for t in report.tables if t.kind == "messages")
    assert result.status == "ok"
    assert result.files_removed >= 24
    # Fewer, larger files (traffic keeps adding small ones meanwhile)
    assert result.files_added < result.files_removed
    assert result.rows_after >= result.rows_before >= len(first)
    # Every acknowledged publish is there, offsets dense and never reused.
    published = first + load.published
    assert table_offsets(uri, storage) == sorted(published) == list(range(len(published)))
    # Files keep disjoint, ordered offset ranges (reads prune by them).
    ranges = file_ranges(uri, storage)
    assert all(a_hi < b_lo for (_, a_hi), (b_lo, _) in itertools.pairwise(ranges))
    history = DeltaTable(uri, storage_options=storage or None).history()
    optimize = [c for c in history if c["operation"] == "OPTIMIZE"]
    assert optimize and optimize[0]["operationParameters"]["targetSize"] == str(
        compact.CompactOptions().messages_target_bytes
    )
    assert errored(report.tables) == []


def test_compaction_commit_changes_no_data(local_engine: Engine, local_lake: LakeSpec) -> None:
    """The commit's actions all say dataChange=false: readers of changes see nothing new."""
    topic = local_engine.create_topic(Topic(topic_name("nochange")))
    publish_batches(local_engine, topic.name, batches=10, per_batch=5)
    with context(local_lake) as ctx:
        report = compact.run(ctx, compact.CompactOptions(min_small_files=2, vacuum=False))
    assert [t.files_removed for t in report.tables if t.kind == "messages"] == [10]
    uri = local_engine.lake.messages_uri(topic.uid)
    version = DeltaTable(uri).version()
    with open(os.path.join(uri, "_delta_log", f"{version:020d}.json")) as log:
        actions = [json.loads(line) for line in log]
    changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(changes) == 11  # ten removed, one added
    assert all(c["dataChange"] is False for c in changes)


def test_vacuum_checkpoint_then_idle(local_engine: Engine, local_lake: LakeSpec) -> None:
    topic = local_engine.create_topic(Topic(topic_name("vacuumed")))
    local_engine.create_subscription(Subscription(sub_name("vacuumed-sub"), topic.name))
    offsets = publish_batches(local_engine, topic.name, batches=12, per_batch=5)
    uri = local_engine.lake.messages_uri(topic.uid)
    data_files = {f for f in os.listdir(uri) if f.endswith(".parquet")}

    options = compact.CompactOptions(min_small_files=4, vacuum_retention_hours=0)
    with context(local_lake) as ctx:  # compaction needs no Spark
        first = compact.run(ctx, options)
        # With the default retention (the table's own) the removed files' records
        # are not due, so a second run finds nothing to do.
        second = compact.run(ctx, compact.CompactOptions(min_small_files=4))

    result = next(t for t in first.tables if t.kind == "messages")
    assert result.files_vacuumed == 12
    remaining = {f for f in os.listdir(uri) if f.endswith(".parquet")}
    assert remaining.isdisjoint(data_files)  # the small files are gone from storage
    assert len(remaining) == 1
    version = DeltaTable(uri).version()
    assert result.checkpoint_version == version
    assert os.path.exists(os.path.join(uri, "_delta_log", f"{version:020d}.checkpoint.parquet"))
    assert table_offsets(uri) == offsets
    # A second run finds nothing to do and writes nothing.
    assert all(t.files_removed == 0 and t.checkpoint_version is None for t in second.tables)
    assert DeltaTable(uri).version() == version
    # The engine keeps working on the compacted, vacuumed table.
    assert local_engine.publish(topic.name, messages(1)) == [str(len(offsets))]


def test_lease_tables_are_vacuumed_by_listing(
    local_lake: LakeSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease table's checkpoints keep tombstones an hour (every lease commit
    removes a file), so the job finds the files removed before that by listing:
    they are deleted, files removed within the hour and live files are kept."""
    monkeypatch.setattr(checkpointer._CHECKPOINTS, "request", lambda *args: None)
    with Engine(local_lake.settings()) as engine:
        topic = engine.create_topic(Topic(topic_name("leased")))
        sub = engine.create_subscription(Subscription(sub_name("leased-sub"), topic.name))
        offsets = publish_batches(engine, topic.name, batches=3, per_batch=4)
        acked: set[int] = set()

        def pull_and_ack() -> None:
            got = engine.pull(sub.name, max_messages=3, return_immediately=True)
            engine.acknowledge(sub.name, [r.ack_id for r in got])
            acked.update(r.message.offset for r in got if r.message is not None)

        for _ in range(3):  # lease commits, each replacing the cursor's file
            pull_and_ack()
        uri = engine.lake.leases_uri(sub.uid)
        removed_early = _parquet(uri) - _live(uri)
        assert removed_early
        # Those files were removed over an hour ago: the files are older, and the
        # checkpoint (written "two hours from now") holds no tombstone for them.
        _age(uri, hours=2)
        replay = checkpoints.Replay(engine.lake.objects, uri)
        replay.advance(DeltaTable(uri).version())
        replay.write(now_ms=time.time_ns() // 1_000_000 + 2 * 3600 * 1000)
        live_before = _live(uri)
        pull_and_ack()  # removes a file just now
        removed_now = live_before - _live(uri)
        assert removed_now
        present = _parquet(uri)
        with context(local_lake) as ctx:  # compaction needs no Spark
            report = compact.run(ctx, compact.CompactOptions(min_small_files=1000))
        result = next(t for t in report.tables if t.kind == "leases")
        assert result.status == "ok"
        assert result.files_vacuumed == len(removed_early)
        assert _parquet(uri) == present - removed_early
        assert removed_now <= _parquet(uri) and _live(uri) <= _parquet(uri)
        # The subscription carries on from the vacuumed table.
        offsets += [int(i) for i in engine.publish(topic.name, messages(1))]
        rest = engine.pull(sub.name, max_messages=20)
        assert {r.message.offset for r in rest if r.message is not None} == set(offsets) - acked


def _parquet(uri: str) -> set[str]:
    return {f for f in os.listdir(uri) if f.endswith(".parquet")}


def _live(uri: str) -> set[str]:
    return {os.path.basename(p) for p in DeltaTable(uri).file_uris()}


def _age(uri: str, *, hours: int) -> None:
    then = time.time() - hours * 3600
    for name in _parquet(uri):
        os.utime(os.path.join(uri, name), (then, then))


def test_older_lease_tables_adopt_the_hour(
    local_lake: LakeSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease table created with Delta's default retention (a week) gets the hour
    from the job, while its subscription pulls and acks through the job's commit."""
    with Engine(local_lake.settings()) as engine:
        topic = engine.create_topic(Topic(topic_name("older")))
        with monkeypatch.context() as m:
            m.setattr(table_schemas, "LEASES_PROPERTIES", table_schemas.CATALOG_PROPERTIES)
            sub = engine.create_subscription(Subscription(sub_name("older-sub"), topic.name))
        uri = engine.lake.leases_uri(sub.uid)
        assert table_schemas.DELETED_FILE_RETENTION not in DeltaTable(uri).metadata().configuration
        offsets = publish_batches(engine, topic.name, batches=2, per_batch=3)
        held = engine.pull(sub.name, max_messages=3, return_immediately=True)
        assert len(held) == 3
        with (
            context(local_lake) as ctx,
            traffic(engine, topic.name, sub.name, pause_s=0.01) as load,
        ):
            time.sleep(0.3)  # traffic is flowing when the job starts
            report = compact.run(ctx, compact.CompactOptions(min_small_files=1000))
            time.sleep(0.3)
        assert load.errors == [] and load.acked > 0
        assert next(t for t in report.tables if t.kind == "leases").status == "ok"
        configuration = DeltaTable(uri).metadata().configuration
        wanted = f"interval {constants.LEASE_FILE_RETENTION_HOURS} hours"
        assert configuration[table_schemas.DELETED_FILE_RETENTION] == wanted
        # Leases taken before the job are acknowledged after it, and nothing is lost.
        engine.acknowledge(sub.name, [r.ack_id for r in held])
        rest: set[int] = set()
        while got := engine.pull(sub.name, max_messages=1000, return_immediately=True):
            rest |= {r.message.offset for r in got if r.message is not None}
            engine.acknowledge(sub.name, [r.ack_id for r in got])
        assert load.acked + len(held) + len(rest) >= len(offsets) + len(load.published)
        assert rest.isdisjoint(r.message.offset for r in held if r.message is not None)
