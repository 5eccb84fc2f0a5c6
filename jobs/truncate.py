"""Truncation: enforce each subscription's truncation policy, then delete messages nobody needs.

    spark-submit jobs/truncate.py [--lake URI] [--no-delete]
    lakepubsub jobs run truncate [--lake URI] [--no-delete]

1. For every topic with subscriptions that have a truncation policy, Spark
   reads the topic's messages from the lowest unacknowledged offset of those
   subscriptions and computes each one's backlog: the unacknowledged messages
   (the outstanding ones below its frontier and every one from the frontier
   on), their bytes (Pub/Sub's message size) and ages. Walking the backlog
   from the newest message back, a message is dropped when the backlog from it
   onward exceeds ``max_bytes``, or when it or a newer one is older than
   ``max_age_seconds``; so the oldest messages go first and what is left
   fits the policy. Where anything is dropped the core moves the
   subscription's truncation point (``Engine.truncate``): its leases below
   the point are dropped and its next pull delivers a truncation event first.
   Each truncation is appended to the truncations table
   (``table_schemas.TRUNCATIONS``, view ``truncations``).
2. For every topic, messages below every subscription's lowest unacknowledged
   offset, every live snapshot's, and older than the topic's retention (its
   ``messageRetentionDuration``, else 7 days: ``Topic.history_s``; and than
   ``messageRetentionDuration`` of subscriptions that retain acknowledged
   messages) are deleted from the messages table with one direct-log commit.
   The newest message is always kept: the topic head is read from it. Each
   topic's report says from which offset messages are kept, and why.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import write_deltalake

from jobs import runs
from jobs.common import JobContext, Stopwatch, errored, retrying
from jobs.script import main_for
from lakepubsub import constants, errors
from lakepubsub._lake import storage_errors, table_schemas
from lakepubsub.delivery.leases import LeaseState
from lakepubsub.publish.messages_table import MessagesTable, offset_range
from lakepubsub.resources import catalog
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lakepubsub.jobs.truncate")

MAX_BYTES = "max_bytes"
MAX_AGE = "max_age"


@dataclass(frozen=True)
class TruncateOptions:
    delete_messages: bool = True


@dataclass(frozen=True)
class Backlog:
    """What Spark found for one subscription: its backlog and what the policy drops."""

    messages: int
    bytes: int
    end_offset: int  # drop every unacknowledged message below this; <= floor: none
    dropped_messages: int
    dropped_bytes: int
    reason: str


@dataclass
class Truncation:
    """One row of the truncations table."""

    subscription: str
    subscription_uid: str
    time_us: int
    reason: str
    first_offset: int
    end_offset: int
    messages_dropped: int
    bytes_dropped: int


@dataclass
class TopicCleanup:
    topic: str
    status: str = "ok"  # ok | nothing | busy | gone | error: ...
    oldest_offset: int = 0  # before the delete
    kept_from: int = 0  # every message below this was deleted
    rows_deleted: int = 0
    kept_because: str = ""  # what needs the message at kept_from (or why nothing went)


@dataclass
class TruncateReport:
    job: str = "truncate"
    subscriptions_checked: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    topics: list[TopicCleanup] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, int]:
        return {
            "subscriptions_checked": self.subscriptions_checked,
            "truncations": len(self.truncations),
            "messages_dropped": sum(t.messages_dropped for t in self.truncations),
            "rows_deleted": sum(t.rows_deleted for t in self.topics),
            "failed": len(errored(self.topics)),
        }


def run(ctx: JobContext, options: TruncateOptions | None = None) -> TruncateReport:
    """Enforce truncation policies, record the truncations, then delete unneeded messages."""
    options = options or TruncateOptions()
    watch = Stopwatch()
    engine = ctx.engine
    ctx.settle_intake()
    topics = engine.all_topics()
    subs_of: dict[str, list[Subscription]] = defaultdict(list)
    for sub in engine.all_subscriptions():
        subs_of[sub.topic_uid].append(sub)
    report = TruncateReport()
    ctx.progress.begin("truncate", len(topics) * (2 if options.delete_messages else 1))
    for topic in topics:
        policed = [s for s in subs_of[topic.uid] if s.truncation_policy is not None]
        report.subscriptions_checked += len(policed)
        if policed:
            report.truncations += enforce(ctx, topic, policed)
        ctx.progress.advance(f"policies of {topic.name.path}")
    record(ctx, report.truncations)
    if options.delete_messages:
        for topic in topics:
            report.topics.append(delete_unneeded(ctx, topic, subs_of[topic.uid]))
            ctx.progress.advance(f"messages of {topic.name.path}")
    ctx.progress.end()
    report.seconds = watch.seconds()
    runs.record(ctx, report)
    return report


# -- 1. policies -------------------------------------------------------------------------


def enforce(ctx: JobContext, topic: Topic, subs: list[Subscription]) -> list[Truncation]:
    """Truncate the subscriptions of ``topic`` whose backlog exceeds their policy."""
    engine = ctx.engine
    states: dict[str, LeaseState] = {}
    for sub in subs:
        try:
            states[sub.uid] = engine.subscription_state(sub.name)
        except errors.NotFound:
            continue  # deleted since the catalog was read
    if not states:
        return []
    try:
        messages = MessagesTable(ctx.lake, topic.uid)
    except errors.NotFound:
        return []
    head = messages.head()
    live = [s for s in subs if s.uid in states and states[s.uid].floor() < head]
    if not live:
        return []
    backlogs = measure(ctx, messages, head, live, states)
    done: list[Truncation] = []
    for sub in live:
        backlog = backlogs.get(sub.uid)
        if backlog is None or backlog.end_offset <= states[sub.uid].floor():
            continue
        try:
            event = engine.truncate(sub.name, end_offset=backlog.end_offset, reason=backlog.reason)
        except errors.NotFound:
            continue
        if event.end_offset <= event.first_offset:
            continue  # acknowledged meanwhile: nothing was left to drop
        log.info(
            "%s: truncated [%d, %d) by %s: %d messages, %d bytes",
            sub.name.path,
            event.first_offset,
            event.end_offset,
            event.reason,
            backlog.dropped_messages,
            backlog.dropped_bytes,
        )
        done.append(
            Truncation(
                subscription=sub.name.path,
                subscription_uid=sub.uid,
                time_us=event.time_us,
                reason=event.reason,
                first_offset=event.first_offset,
                end_offset=event.end_offset,
                messages_dropped=backlog.dropped_messages,
                bytes_dropped=backlog.dropped_bytes,
            )
        )
    return done


def measure(
    ctx: JobContext,
    messages: MessagesTable,
    head: int,
    subs: list[Subscription],
    states: dict[str, LeaseState],
) -> dict[str, Backlog]:
    """Each subscription's backlog and what its policy drops, computed by Spark."""
    from pyspark.sql import functions as sf  # noqa: PLC0415 — PySpark loads when the job runs, not when the CLI imports this

    from lakepubsub.spark import read_table  # noqa: PLC0415 — likewise

    spark = ctx.spark
    now_us = ctx.now_us()
    low = min(states[s.uid].floor() for s in subs)
    frame = (
        read_table(
            spark, messages.uri, version=messages.version, storage_options=ctx.lake.storage_options
        )
        .where((sf.col("offset") >= low) & (sf.col("offset") < head))
        .select("offset", "publish_time", "size")
    )
    policies = spark.createDataFrame(
        [_policy_row(s, states[s.uid], now_us) for s in subs],
        "sub string, frontier long, max_bytes long, cutoff_us long",
    )
    columns = ["sub", "offset", "publish_time", "size", "max_bytes", "cutoff_us"]
    backlog = frame.join(sf.broadcast(policies), frame["offset"] >= policies["frontier"]).select(
        *columns
    )
    behind = [
        (s.uid, key[1])
        for s in subs
        for key in states[s.uid].rows
        if key[0] == table_schemas.KIND_MESSAGE and key[1] < states[s.uid].cursor.frontier
    ]
    if behind:  # messages out on a lease or waiting for redelivery, below the frontier
        outstanding = spark.createDataFrame(behind, "sub string, offset long").join(
            sf.broadcast(policies), "sub"
        )
        backlog = backlog.unionByName(
            frame.join(sf.broadcast(outstanding), "offset").select(*columns)
        )
    return _collect(_dropped(backlog))


def _policy_row(
    sub: Subscription, state: LeaseState, now_us: int
) -> tuple[str, int, int | None, int | None]:
    policy = sub.truncation_policy
    max_bytes = policy.max_bytes if policy is not None else None
    max_age_s = policy.max_age_s if policy is not None else None
    cutoff = None if max_age_s is None else now_us - max_age_s * constants.US_PER_S
    return (sub.uid, state.cursor.frontier, max_bytes, cutoff)


def _dropped(backlog: DataFrame) -> DataFrame:
    """Per subscription: backlog totals and the messages its policy drops."""
    from pyspark.sql import Window  # noqa: PLC0415 — PySpark loads when the job runs, not when the CLI imports this
    from pyspark.sql import functions as f  # noqa: PLC0415 — likewise

    # From the newest message back: the bytes from each message on, and whether
    # it or any newer message is past the age limit.
    newest_first = (
        Window.partitionBy("sub")
        .orderBy(f.col("offset").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    too_old = f.coalesce(f.unix_micros("publish_time") < f.col("cutoff_us"), f.lit(False))
    ranked = backlog.withColumn("bytes_onward", f.sum("size").over(newest_first)).withColumn(
        "older_onward", f.max(too_old.cast("int")).over(newest_first)
    )
    by_bytes = f.coalesce(f.col("bytes_onward") > f.col("max_bytes"), f.lit(False))
    by_age = f.col("older_onward") == 1
    dropped = by_bytes | by_age
    return ranked.groupBy("sub").agg(
        f.count("*").alias("messages"),
        f.sum("size").alias("bytes"),
        f.max(f.when(by_bytes, f.col("offset"))).alias("bytes_last"),
        f.max(f.when(by_age, f.col("offset"))).alias("age_last"),
        f.count(f.when(dropped, 1)).alias("dropped_messages"),
        f.sum(f.when(dropped, f.col("size"))).alias("dropped_bytes"),
    )


def _collect(frame: DataFrame) -> dict[str, Backlog]:
    out = {}
    for row in frame.collect():
        bytes_end = -1 if row["bytes_last"] is None else row["bytes_last"] + 1
        age_end = -1 if row["age_last"] is None else row["age_last"] + 1
        out[row["sub"]] = Backlog(
            messages=row["messages"],
            bytes=row["bytes"] or 0,
            end_offset=max(bytes_end, age_end),
            dropped_messages=row["dropped_messages"],
            dropped_bytes=row["dropped_bytes"] or 0,
            reason=MAX_BYTES if bytes_end > age_end else MAX_AGE,
        )
    return out


def record(ctx: JobContext, truncations: list[Truncation]) -> None:
    """Append truncations to the truncations table (created on first use)."""
    if not truncations:
        return
    lake = ctx.lake
    rows = pa.table(
        {
            "subscription": [t.subscription for t in truncations],
            "subscription_uid": [t.subscription_uid for t in truncations],
            "time": pa.array([t.time_us for t in truncations], pa.int64()).cast(
                table_schemas.UTC_US
            ),
            "reason": [t.reason for t in truncations],
            "first_offset": [t.first_offset for t in truncations],
            "end_offset": [t.end_offset for t in truncations],
            "messages_dropped": [t.messages_dropped for t in truncations],
            "bytes_dropped": [t.bytes_dropped for t in truncations],
        },
        schema=table_schemas.TRUNCATIONS,
    )
    table = lake.create(
        lake.truncations_uri,
        table_schemas.TRUNCATIONS,
        configuration=table_schemas.TRUNCATIONS_PROPERTIES,
        description="lakepubsub truncations",
    )
    with storage_errors(lake.truncations_uri):
        # Appends never conflict with each other; delta-rs retries them itself.
        write_deltalake(table, rows, mode="append")


# -- 2. deleting messages nobody needs -----------------------------------------------------


def delete_unneeded(ctx: JobContext, topic: Topic, subs: list[Subscription]) -> TopicCleanup:
    """Delete the topic's messages that no subscription, snapshot or retention needs."""
    result = TopicCleanup(topic.name.path)
    try:
        _delete_unneeded(ctx, topic, subs, result)
    except errors.NotFound:
        result.status = "gone"
    except errors.Aborted as exc:
        result.status = "busy"
        log.warning("%s: delete left for the next run: %s", topic.name.path, exc)
    except Exception as exc:
        result.status = f"error: {type(exc).__name__}: {exc}"
        log.exception("%s: deleting old messages failed", topic.name.path)
    return result


def _delete_unneeded(
    ctx: JobContext, topic: Topic, subs: list[Subscription], result: TopicCleanup
) -> None:
    messages = MessagesTable(ctx.lake, topic.uid)
    table = ctx.lake.open(messages.uri, version=messages.version)
    oldest, head = offset_range(table)
    result.oldest_offset = result.kept_from = oldest
    if head - oldest <= 1:
        result.status = "nothing"
        result.kept_because = "no message but the newest, which always stays"
        return
    # The newest row always stays: the head is read from the table's statistics.
    needs = [(head - 1, "the newest message always stays (the head is read from it)")]
    needs += _floors(ctx, topic, subs)
    bound, _ = min(needs)
    if bound > oldest:
        for cutoff_us, why in _retention_cutoffs(ctx.now_us(), topic, subs):
            needs.append((messages.first_offset_at(cutoff_us), why))
    bound, result.kept_because = min(needs)
    if bound <= oldest:
        result.status = "nothing"
        log.info(
            "%s: keeps every message from %d: %s", topic.name.path, oldest, result.kept_because
        )
        return

    def attempt() -> int:
        # Through the direct log: the delete moves past publishers' appends.
        deleted, _ = MessagesTable(ctx.lake, topic.uid).delete_below(bound)
        return deleted

    result.rows_deleted = retrying("messages", attempt)
    result.kept_from = bound
    log.info(
        "%s: deleted %d messages below %d; keeps the rest: %s",
        topic.name.path,
        result.rows_deleted,
        bound,
        result.kept_because,
    )


def _floors(ctx: JobContext, topic: Topic, subs: list[Subscription]) -> list[tuple[int, str]]:
    """The lowest offset each subscription and each live snapshot of the topic still
    needs, with who needs it."""
    engine = ctx.engine
    floors = []
    for sub in subs:
        try:
            floor = engine.subscription_state(sub.name).floor()
        except errors.NotFound:
            continue  # deleted: needs nothing
        floors.append((floor, f"{sub.name.path} has not acknowledged offset {floor}"))
    now = ctx.now_us()
    view = engine.catalog.view()
    for entry in view.attached_to(topic.uid):
        if entry.kind != catalog.SNAPSHOT:
            continue
        if int(entry.spec.get("expire_time_us", 0)) <= now:
            continue
        try:
            table = ctx.lake.open(ctx.lake.snapshot_uri(entry.uid))
        except errors.NotFound:
            continue
        with storage_errors(table.table_uri):
            floor = LeaseState.from_arrow(table.to_pyarrow_table(), table.version()).floor()
        floors.append((floor, f"snapshot projects/{entry.project}/snapshots/{entry.name} needs it"))
    # A subscription created after the catalog was read starts at the head.
    return floors


def _retention_cutoffs(
    now_us: int, topic: Topic, subs: list[Subscription]
) -> list[tuple[int, str]]:
    """Publish times from which messages must be kept for topic retention and seek, and why."""
    if topic.message_retention_s is None:
        why = f"topic retention: {_days(topic.history_s)} (the default; messageRetentionDuration)"
    elif topic.keeps_forever:
        why = "topic retention: forever"
    else:
        why = f"topic retention: {_days(topic.history_s)} (messageRetentionDuration)"
    cutoffs = [(now_us - topic.history_s * constants.US_PER_S, why)]
    cutoffs += [
        (
            now_us - s.message_retention_s * constants.US_PER_S,
            f"{s.name.path} retains acknowledged messages for {_days(s.message_retention_s)}",
        )
        for s in subs
        if s.retain_acked_messages
    ]
    return cutoffs


def _days(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} days"
    return f"{seconds} s"


if __name__ == "__main__":
    main_for("truncate")
