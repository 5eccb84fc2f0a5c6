"""GC: expired subscriptions and snapshots go, active ones stay; orphaned directories are swept."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import replace

import pytest
from jobtools import context, messages, publish_batches, sub_name, topic_name
from support import LakeSpec, MotoServer

from jobs import gc
from lakepubsub import Engine, errors
from lakepubsub.resources.names import SnapshotName, SubscriptionName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic

DAY_S = 24 * 3600
HOUR_S = 3600


def test_expired_subscriptions_and_snapshots_are_deleted(engine: Engine, lake: LakeSpec) -> None:
    topic = engine.create_topic(Topic(topic_name("events")))
    idle = engine.create_subscription(
        Subscription(sub_name("idle"), topic.name, expiration_ttl_s=DAY_S, message_retention_s=600)
    )
    busy = engine.create_subscription(
        Subscription(sub_name("busy"), topic.name, expiration_ttl_s=DAY_S, message_retention_s=600)
    )
    forever = engine.create_subscription(
        Subscription(sub_name("forever"), topic.name, expiration_ttl_s=None)
    )
    snapshot = SnapshotName("proj", "snap")
    engine.create_snapshot(snapshot, idle.name)
    publish_batches(engine, topic.name, batches=1, per_batch=3)

    # Within the TTL plus the activity clock's resolution (an hour) nothing goes.
    with context(lake, ahead_s=DAY_S) as ctx:
        report = gc.run(ctx)
    assert report.subscriptions_deleted == [] and report.snapshots_deleted == []

    # Eight days on: "busy" was active a day ago, "idle" never; the snapshot expired.
    with context(lake, ahead_s=7 * DAY_S) as ctx:
        later = int(ctx.now_us())
    _touch(engine, busy.name, later)
    with context(lake, ahead_s=8 * DAY_S) as ctx:
        dry = gc.run(ctx, gc.GcOptions(dry_run=True))
        report = gc.run(ctx)
    assert dry.subscriptions_deleted == report.subscriptions_deleted == [idle.name.path]
    assert report.snapshots_deleted == [snapshot.path]
    with pytest.raises(errors.NotFound):
        engine.get_subscription(idle.name)
    assert engine.get_subscription(busy.name).uid == busy.uid
    assert engine.get_subscription(forever.name).uid == forever.uid
    # Its lease table went with it: nothing is left for the orphan sweep.
    assert idle.uid not in engine.lake.list_dirs("subscriptions")
    assert report.orphans_removed == []


def test_orphaned_directories_are_swept(local_engine: Engine, local_lake: LakeSpec) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("kept")))
    sub = engine.create_subscription(Subscription(sub_name("kept-sub"), topic.name))
    root = engine.lake.root
    old = _make_dir(root, "topics", "0" * 32, age_s=2 * HOUR_S)
    young = _make_dir(root, "subscriptions", "1" * 32, age_s=60)
    old_sub = _make_dir(root, "subscriptions", "2" * 32, age_s=2 * HOUR_S)
    # Old catalogued tables stay whatever their age.
    for path in (
        os.path.join(root, "topics", topic.uid),
        os.path.join(root, "subscriptions", sub.uid),
    ):
        _age(path, 3 * HOUR_S)

    with context(local_lake) as ctx:
        dry = gc.run(ctx, gc.GcOptions(dry_run=True))
        report = gc.run(ctx)
    expected = sorted([f"topics/{'0' * 32}", f"subscriptions/{'2' * 32}"])
    assert sorted(dry.orphans_removed) == sorted(report.orphans_removed) == expected
    assert not os.path.exists(old) and not os.path.exists(old_sub)
    assert os.path.exists(young)
    assert os.path.isdir(os.path.join(root, "topics", topic.uid))
    assert os.path.isdir(os.path.join(root, "subscriptions", sub.uid))
    assert engine.publish(topic.name, messages(1)) == ["0"]


@pytest.mark.s3
def test_orphans_on_s3(moto_server: MotoServer) -> None:
    """On S3 the age is the newest object's LastModified (the sweep lists the prefix)."""
    lake = LakeSpec(f"s3://{moto_server.bucket}/{uuid.uuid4().hex}", moto_server.storage_options)
    with Engine(lake.settings()) as engine:
        topic = engine.create_topic(Topic(topic_name("s3-kept")))
        client = engine.lake.s3_client()
        prefix = engine.lake.prefix
        client.put_object(Bucket=engine.lake.bucket, Key=f"{prefix}/topics/{'3' * 32}/x", Body=b"")
        with context(lake) as ctx:
            young = gc.run(ctx)
        with context(lake, ahead_s=2 * HOUR_S) as ctx:
            old = gc.run(ctx)
        assert young.orphans_removed == []
        assert old.orphans_removed == [f"topics/{'3' * 32}"]
        assert engine.lake.list_dirs("topics") == [topic.uid]


def _touch(engine: Engine, name: SubscriptionName, now_us: int) -> None:
    """Client activity at ``now_us``: a pull by an engine whose clock says so."""
    with Engine(replace(engine.settings, clock_us=lambda: now_us)) as other:
        other.pull(name, max_messages=1, return_immediately=True)
    assert engine.subscription_state(name).cursor.active_us == now_us


def _make_dir(root: str, kind: str, uid: str, *, age_s: float) -> str:
    path = os.path.join(root, kind, uid)
    os.makedirs(os.path.join(path, "messages", "_delta_log"))
    with open(os.path.join(path, "messages", "part-0.parquet"), "wb") as f:
        f.write(b"left behind")
    _age(path, age_s)
    return path


def _age(path: str, age_s: float) -> None:
    then = time.time() - age_s
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (then, then))
        os.utime(dirpath, (then, then))
