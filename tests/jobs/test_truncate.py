"""Truncation policies enforced by Spark, truncation events delivered, old messages deleted."""

from __future__ import annotations

import time

from deltalake import DeltaTable
from jobtools import (
    context,
    messages,
    publish_batches,
    sub_name,
    table_offsets,
    topic_name,
    traffic,
)
from pyspark.sql import SparkSession
from support import LakeSpec

from jobs import truncate
from lakepubsub import Engine
from lakepubsub.constants import FOREVER_RETENTION_S
from lakepubsub.resources.names import SnapshotName, SubscriptionName
from lakepubsub.resources.subscriptions import Subscription, TruncationPolicy
from lakepubsub.resources.topics import Topic

SIZE = 103  # 100 bytes of data plus attribute "k" = "vN"
DAY_S = 24 * 3600


def test_policies_drop_oldest_first_and_deliver_an_event(
    engine: Engine, lake: LakeSpec, spark: SparkSession
) -> None:
    topic = engine.create_topic(Topic(topic_name("orders")))
    by_bytes = engine.create_subscription(
        Subscription(
            sub_name("by-bytes"), topic.name, truncation_policy=TruncationPolicy(max_bytes=2000)
        )
    )
    by_age = engine.create_subscription(
        Subscription(
            sub_name("by-age"), topic.name, truncation_policy=TruncationPolicy(max_age_s=3600)
        )
    )
    engine.create_subscription(Subscription(sub_name("keeper"), topic.name))
    publish_batches(engine, topic.name, batches=5, per_batch=10)
    leased = engine.pull(by_bytes.name, max_messages=5, return_immediately=True)
    assert [r.message.offset for r in leased if r.message] == [0, 1, 2, 3, 4]

    with context(lake, spark) as ctx:
        report = truncate.run(ctx)
    # 19 newest messages fit 2000 bytes: offsets 31-49 stay, 0-30 go (leased ones too).
    assert [
        (t.subscription, t.reason, t.first_offset, t.end_offset) for t in report.truncations
    ] == [(by_bytes.name.path, "max_bytes", 0, 31)]
    assert report.truncations[0].messages_dropped == 31
    assert report.truncations[0].bytes_dropped == 31 * SIZE
    # The next pull delivers the event first, then the oldest message kept.
    received = engine.pull(by_bytes.name, max_messages=3, return_immediately=True)
    assert received[0].event is not None
    assert (received[0].event.first_offset, received[0].event.end_offset) == (0, 31)
    assert received[0].event.reason == "max_bytes"
    assert [r.message.offset for r in received[1:] if r.message] == [31, 32]
    assert engine.subscription_state(by_bytes.name).floor() == 31
    # "keeper" still needs every message: nothing is deleted.
    assert [t.status for t in report.topics] == ["nothing"]

    # Two hours on, every message is past by-age's limit; by-bytes has no age limit.
    with context(lake, spark, ahead_s=7200) as ctx:
        later = truncate.run(ctx, truncate.TruncateOptions(delete_messages=False))
    assert [(t.subscription, t.reason, t.end_offset) for t in later.truncations] == [
        (by_age.name.path, "max_age", 50)
    ]
    assert engine.subscription_state(by_age.name).floor() == 50
    assert engine.subscription_state(by_bytes.name).floor() == 31
    # Both runs are in the truncations table, for operators.
    logged = DeltaTable(
        engine.lake.truncations_uri, storage_options=lake.storage_options or None
    ).to_pyarrow_table()
    rows = logged.select(["reason", "first_offset", "end_offset", "messages_dropped"])
    assert sorted(rows.to_pylist(), key=lambda r: r["reason"]) == [
        {"reason": "max_age", "first_offset": 0, "end_offset": 50, "messages_dropped": 50},
        {"reason": "max_bytes", "first_offset": 0, "end_offset": 31, "messages_dropped": 31},
    ]


def test_deletes_only_what_nothing_needs_and_keeps_the_newest(
    engine: Engine, lake: LakeSpec, spark: SparkSession
) -> None:
    topic = engine.create_topic(Topic(topic_name("history"), message_retention_s=600))
    fast = engine.create_subscription(Subscription(sub_name("fast"), topic.name))
    slow = engine.create_subscription(Subscription(sub_name("slow"), topic.name))
    publish_batches(engine, topic.name, batches=5, per_batch=10)
    uri = engine.lake.messages_uri(topic.uid)
    _ack(engine, fast.name, 50)
    _ack(engine, slow.name, 30)
    engine.create_snapshot(SnapshotName("proj", "before-20"), slow.name)  # floor 30
    _ack(engine, slow.name, 20)  # slow is now at 50

    with context(lake, spark) as ctx:  # within the topic's 10 minutes: everything stays
        report = truncate.run(ctx)
    assert [(t.status, t.rows_deleted) for t in report.topics] == [("nothing", 0)]
    assert report.topics[0].kept_because == "topic retention: 600 s (messageRetentionDuration)"

    with context(lake, spark, ahead_s=601) as ctx:
        report = truncate.run(ctx)
    assert [(t.status, t.kept_from, t.rows_deleted) for t in report.topics] == [("ok", 30, 30)]
    assert report.topics[0].kept_because == "snapshot projects/proj/snapshots/before-20 needs it"
    assert table_offsets(uri, lake.storage_options) == list(range(30, 50))

    # Eight days on the snapshot has expired: all but the newest row go.
    with context(lake, spark, ahead_s=8 * DAY_S) as ctx:
        report = truncate.run(ctx)
    assert [(t.kept_from, t.rows_deleted) for t in report.topics] == [(49, 19)]
    assert report.topics[0].kept_because.startswith("the newest message always stays")
    assert table_offsets(uri, lake.storage_options) == [49]
    # The head did not move back: the next message gets a new offset.
    assert engine.publish(topic.name, messages(1)) == ["50"]
    assert engine.topic_head(topic.name) == 51


def test_history_is_kept_seven_days_by_default_or_forever(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    engine = local_engine
    default = engine.create_topic(Topic(topic_name("default-history")))
    forever = engine.create_topic(
        Topic(topic_name("forever-history"), message_retention_s=FOREVER_RETENTION_S)
    )
    for topic in (default, forever):
        sub = engine.create_subscription(Subscription(sub_name(f"{topic.name.id}-sub"), topic.name))
        publish_batches(engine, topic.name, batches=2, per_batch=10)
        _ack(engine, sub.name, 20)  # every subscription is done with every message
    with context(local_lake, spark, ahead_s=6 * DAY_S) as ctx:
        report = {t.topic: t for t in truncate.run(ctx).topics}
    kept = report[default.name.path]
    assert (kept.status, kept.rows_deleted) == ("nothing", 0)
    assert kept.kept_because == "topic retention: 7 days (the default; messageRetentionDuration)"
    assert report[forever.name.path].kept_because == "topic retention: forever"
    with context(local_lake, spark, ahead_s=8 * DAY_S) as ctx:
        report = {t.topic: t for t in truncate.run(ctx).topics}
    assert report[default.name.path].rows_deleted == 19
    assert (report[forever.name.path].status, report[forever.name.path].rows_deleted) == (
        "nothing",
        0,
    )
    assert table_offsets(engine.lake.messages_uri(forever.uid)) == list(range(20))


def test_topic_retention_keeps_acknowledged_messages(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("retained"), message_retention_s=600))
    sub = engine.create_subscription(Subscription(sub_name("retained-sub"), topic.name))
    publish_batches(engine, topic.name, batches=2, per_batch=10)
    _ack(engine, sub.name, 20)
    uri = engine.lake.messages_uri(topic.uid)
    with context(local_lake, spark) as ctx:
        assert [t.status for t in truncate.run(ctx).topics] == ["nothing"]
    assert table_offsets(uri) == list(range(20))
    with context(local_lake, spark, ahead_s=601) as ctx:
        assert [t.rows_deleted for t in truncate.run(ctx).topics] == [19]
    assert table_offsets(uri) == [19]


def test_truncation_while_publishing_and_acking(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("busy")))
    policed = engine.create_subscription(
        Subscription(
            sub_name("busy-small"), topic.name, truncation_policy=TruncationPolicy(max_bytes=5000)
        )
    )
    reader = engine.create_subscription(Subscription(sub_name("busy-reader"), topic.name))
    first = publish_batches(engine, topic.name, batches=10, per_batch=20)
    uri = engine.lake.messages_uri(topic.uid)
    with context(local_lake, spark) as ctx, traffic(engine, topic.name, reader.name) as load:
        time.sleep(0.3)
        report = truncate.run(ctx)
        time.sleep(0.3)
    assert load.errors == []
    assert load.commits > 0
    [truncation] = report.truncations
    assert truncation.subscription == policed.name.path
    assert truncation.first_offset == 0 and truncation.end_offset >= len(first) - 5000 // SIZE
    # Everything published is there from the delete bound on, densely, no offset reused.
    [cleanup] = report.topics
    assert cleanup.status in ("ok", "nothing")
    published = first + load.published
    kept = table_offsets(uri)
    assert kept == sorted(o for o in published if o >= cleanup.kept_from)
    assert kept == list(range(cleanup.kept_from, len(published)))


def _ack(engine: Engine, sub: SubscriptionName, count: int) -> None:
    """Pull and acknowledge ``count`` messages."""
    done = 0
    while done < count:
        received = engine.pull(sub, max_messages=count - done, return_immediately=True)
        assert received, "nothing left to pull"
        engine.acknowledge(sub, [r.ack_id for r in received])
        done += len(received)
