"""Spark SQL views over a lake: every topic's history, every subscription's backlog.

``register(spark, lake)`` creates these temporary views (docs/spark.md):

``<project>__<topic>``
    every message the topic's table holds: offset, message_id, publish_time,
    data, attributes (a map), ordering_key, size.
``<project>__<subscription>__backlog``
    the subscription's unacknowledged messages (the topic view's columns plus
    delivery_attempts, lease_state and lease_deadline of those out on a lease).
``topics``, ``subscriptions``
    one row per topic (its view, table location, version, offsets) and per
    subscription (cursor, backlog size, policies, last activity).
``truncations``
    every truncation the truncation job made (subscription, time, reason,
    offsets and bytes dropped).
``<project>__<topic>__typed``, ``typed_decode_errors``
    for a topic with an Avro schema, its messages decoded into one column per
    field (``lakepubsub/spark/typed.py``), and the rows that did not decode,
    counted.

View names: each character of a project, topic or subscription id that is
not a letter, digit or underscore becomes ``_``. Spark compares view names
case-insensitively, so where two resources would get the same view name
(``a-b`` and ``a.b``, or ``Orders`` and ``orders``), the later one in name
order gets ``__`` and the first 8 characters of its uid appended; ``topics``
lists the view of each topic.

Each view reads one table version pinned when ``register`` runs: the latest,
the one given for that view in ``versions``, or the last one committed at or
before ``timestamp`` (time travel; a topic created after it shows its first,
empty version).
Backlog views always show the current cursor. Call ``register`` again to
move every view forward; it drops the views it made before.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.pandas.types import from_arrow_schema

from lakepubsub import constants, errors
from lakepubsub._lake import table_schemas
from lakepubsub.delivery.leases import LEASED, WAITING, LeaseState
from lakepubsub.engine import Engine
from lakepubsub.publish.messages_table import offset_range
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic
from lakepubsub.settings import Settings
from lakepubsub.spark.session import register_source
from lakepubsub.spark.tables import pinned_version, read_table, spark_path
from lakepubsub.spark.typed import ERRORS_VIEW, TYPED_SUFFIX, errors_frame, typed_frame

log = logging.getLogger(__name__)

TOPICS_VIEW = "topics"
SUBSCRIPTIONS_VIEW = "subscriptions"
TRUNCATIONS_VIEW = "truncations"
BACKLOG_SUFFIX = "backlog"
SEPARATOR = "__"
UID_CHARS = 8
# The session remembers the views it registered, to drop them on the next call.
_REGISTERED_VIEWS = "lakepubsub.spark.views"
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
_LEASE_STATES = {LEASED: "leased", WAITING: "waiting"}
# delta-spark's error classes for a time after the newest commit, and before the oldest kept.
_AFTER_NEWEST = "DELTA_TIMESTAMP_GREATER_THAN_COMMIT"
_BEFORE_OLDEST = "DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION"


@dataclass(frozen=True)
class View:
    """One registered view: its name, what it shows, and the table version it reads."""

    name: str
    kind: str  # topic | typed | backlog | topics | subscriptions | truncations | …
    resource: str  # the topic or subscription path; "" for the lake-wide views
    version: int | None = None


def view_name(*parts: str) -> str:
    """``parts`` joined by ``__``, every non-identifier character replaced by ``_``."""
    return SEPARATOR.join(_NOT_IDENTIFIER.sub("_", p) for p in parts)


def register(
    spark: SparkSession,
    lake: str | Settings,
    *,
    storage_options: Mapping[str, str] | None = None,
    versions: Mapping[str, int] | None = None,
    timestamp: datetime | str | None = None,
    shared: bool = False,
) -> list[View]:
    """Register the lake's views in ``spark``; return them.

    ``lake`` is a lake root (S3 settings then come from ``storage_options`` or
    the AWS environment variables) or ``Settings``. ``versions`` pins single
    topic views by view name or topic path; ``timestamp`` pins every topic view.
    ``shared`` also makes each a global temporary view (``global_temp.<name>``),
    which every session of the application sees (Spark Connect clients).
    """
    settings = _settings(lake, storage_options)
    register_source(spark)
    _drop_previous(spark)
    names = _Names()
    views: list[View] = []
    with Engine(settings) as engine:
        topics = engine.all_topics()
        subs = engine.all_subscriptions()
        current: dict[str, tuple[DataFrame, int]] = {}  # topic uid -> latest frame, head
        topic_rows = []
        for topic in topics:
            name = names.take(view_name(topic.name.project, topic.name.id), topic.uid)
            pinned = (versions or {}).get(name, (versions or {}).get(topic.name.path))
            loaded = _topic_frame(spark, engine, topic, pinned, timestamp)
            if loaded is None:
                continue
            frame, table = loaded
            frame.createOrReplaceTempView(name)
            views.append(View(name, "topic", topic.name.path, table.version()))
            typed = typed_frame(engine, topic, frame)
            if typed is not None:
                typed_name = names.take(f"{name}{SEPARATOR}{TYPED_SUFFIX}", topic.uid)
                typed.createOrReplaceTempView(typed_name)
                views.append(View(typed_name, "typed", topic.name.path, table.version()))
            live = pinned is None and timestamp is None
            topic_rows.append(_topic_row(engine, topic, name, table, live=live))
            latest = loaded if live else _topic_frame(spark, engine, topic, None, None)
            if latest is not None:
                head = max(offset_range(latest[1])[1], _intake_head(engine, topic.uid))
                current[topic.uid] = (latest[0], head)
        sub_rows = []
        for sub in subs:
            try:
                state = engine.subscription_state(sub.name)
            except errors.NotFound:
                continue
            name = names.take(view_name(sub.name.project, sub.name.id, BACKLOG_SUFFIX), sub.uid)
            topic_frame, head = current.get(sub.topic_uid, (None, state.cursor.frontier))
            sub_rows.append(_subscription_row(sub, state, head, name))
            if topic_frame is None:
                continue
            _backlog(spark, topic_frame, state).createOrReplaceTempView(name)
            views.append(View(name, "backlog", sub.name.path))
        lake_views: list[tuple[str, DataFrame]] = [
            (TOPICS_VIEW, spark.createDataFrame(topic_rows, _TOPICS_SCHEMA)),
            (SUBSCRIPTIONS_VIEW, spark.createDataFrame(sub_rows, _SUBSCRIPTIONS_SCHEMA)),
            (TRUNCATIONS_VIEW, _truncations(spark, engine)),
        ]
        typed_views = [v.name for v in views if v.kind == "typed"]
        if typed_views:  # only a lake with typed views has their error counts
            lake_views.append((ERRORS_VIEW, errors_frame(spark, typed_views)))
    for name, frame in lake_views:
        frame.createOrReplaceTempView(name)
        views.append(View(name, name, ""))
    if shared:
        for view in views:
            spark.table(view.name).createOrReplaceGlobalTempView(view.name)
    spark.conf.set(_REGISTERED_VIEWS, ",".join(v.name for v in views))
    return views


def _settings(lake: str | Settings, storage_options: Mapping[str, str] | None) -> Settings:
    if isinstance(lake, Settings):
        return lake
    settings = Settings.from_env({**os.environ, "LAKEPUBSUB_LAKE": lake})
    if storage_options is not None:
        settings = Settings(lake=lake, storage_options=dict(storage_options))
    return settings


def _drop_previous(spark: SparkSession) -> None:
    previous = spark.conf.get(_REGISTERED_VIEWS, "") or ""
    for name in filter(None, previous.split(",")):
        spark.catalog.dropTempView(name)
        spark.catalog.dropGlobalTempView(name)


class _Names:
    """View names handed out so far, compared as Spark compares them (case-insensitively)."""

    def __init__(self) -> None:
        self.taken = {TOPICS_VIEW, SUBSCRIPTIONS_VIEW, TRUNCATIONS_VIEW, ERRORS_VIEW}

    def take(self, name: str, uid: str) -> str:
        if name.lower() in self.taken:
            name = f"{name}{SEPARATOR}{uid[:UID_CHARS]}"
        self.taken.add(name.lower())
        return name


def _topic_frame(
    spark: SparkSession,
    engine: Engine,
    topic: Topic,
    version: int | None,
    timestamp: datetime | str | None,
) -> tuple[DataFrame, DeltaTable] | None:
    """The topic's messages at the pinned version (delta-spark), and that version (delta-rs).

    ``None`` when the table is gone. A version or time the table's log no longer
    reaches raises ``NotFound`` naming the oldest one it does.
    """
    uri = engine.lake.messages_uri(topic.uid)
    storage = engine.lake.storage_options
    pinned = version
    try:
        if timestamp is not None and version is None:
            version = pinned_version(_as_of(spark, uri, storage, timestamp))
        elif version is not None:
            read_table(spark, uri, version=version, storage_options=storage)
        else:
            version = engine.lake.open(uri).version()
        frame = read_table(spark, uri, version=version, storage_options=storage)
        table = engine.lake.open(uri, version=version)
        if pinned is None and timestamp is None and engine.intake is not None:
            # The newest messages may still be in the intake: the view reads them
            # from there, past the table's head (docs/architecture.md, "The intake").
            head = offset_range(table)[1]
            fresh = engine.intake.read(topic.uid, head, engine.intake.next_offset(topic.uid))
            if fresh.num_rows:
                frame = frame.unionByName(spark.createDataFrame(fresh))
    except errors.NotFound as exc:
        if not engine.lake.exists(uri):
            log.warning("%s: no view: %s", topic.name.path, exc)
            return None
        when = f"as of {timestamp}" if version is None else f"version {version}"
        reason = str(exc).removeprefix(f"{uri}: ")
        raise errors.NotFound(f"{topic.name.path}: cannot read {when}: {reason}") from exc
    return frame, table


def _as_of(
    spark: SparkSession, uri: str, storage: Mapping[str, str] | None, timestamp: datetime | str
) -> DataFrame:
    """The table as delta-spark reads it as of ``timestamp``.

    After the newest commit: the newest version. Before the oldest commit the
    log still holds: the empty first version if that is version 0 (the topic
    did not exist yet), else delta-spark's ``NotFound``, which names the oldest
    time the log still reaches.
    """
    try:
        return read_table(spark, uri, timestamp=timestamp, storage_options=storage)
    except errors.NotFound as exc:
        if _AFTER_NEWEST in str(exc):
            return read_table(spark, uri, storage_options=storage)
        if _BEFORE_OLDEST not in str(exc):
            raise
        try:
            return read_table(spark, uri, version=0, storage_options=storage)
        except errors.NotFound:
            raise exc from None


def _backlog(spark: SparkSession, topic: DataFrame, state: LeaseState) -> DataFrame:
    """The unacknowledged messages of one subscription, with their lease state."""
    frontier = state.cursor.frontier
    rows = [
        (
            r.offset,
            r.attempt,
            _LEASE_STATES.get(r.state, "held"),
            _time(r.deadline_us) if r.state == LEASED else None,
        )
        for r in state.rows.values()
        if r.kind == table_schemas.KIND_MESSAGE
    ]
    leases = spark.createDataFrame(rows, _LEASES_SCHEMA)
    behind = [r[0] for r in rows if r[0] < frontier]
    condition = sf.col("offset") >= frontier
    if behind:
        condition = condition | sf.col("offset").isin(behind)
    return (
        topic.where(sf.col("offset") >= state.floor())
        .where(condition)
        .join(sf.broadcast(leases), "offset", "left")
        .select(*topic.columns, "delivery_attempts", "lease_state", "lease_deadline")
    )


def _truncations(spark: SparkSession, engine: Engine) -> DataFrame:
    lake = engine.lake
    if lake.exists(lake.truncations_uri):
        return read_table(spark, lake.truncations_uri, storage_options=lake.storage_options)
    return spark.createDataFrame([], from_arrow_schema(table_schemas.TRUNCATIONS))


def _time(us: int | None) -> datetime | None:
    if not us:
        return None
    return datetime.fromtimestamp(us / constants.US_PER_S, tz=UTC)


def _intake_head(engine: Engine, topic_uid: str) -> int:
    """One past the topic's newest message in the intake (0: none there)."""
    return 0 if engine.intake is None else engine.intake.next_offset(topic_uid)


def _topic_row(
    engine: Engine, topic: Topic, view: str, table: DeltaTable, *, live: bool
) -> tuple[Any, ...]:
    actions = pa.table(table.get_add_actions(flatten=True))
    oldest, head = offset_range(table)
    if live:
        head = max(head, _intake_head(engine, topic.uid))
    return (
        topic.name.project,
        topic.name.id,
        topic.name.path,
        view,
        spark_path(engine.lake.messages_uri(topic.uid)),
        table.version(),
        oldest,
        head,
        actions.num_rows,
        topic.message_retention_s,
        topic.history_s,
    )


def _subscription_row(
    sub: Subscription, state: LeaseState, head: int, backlog_view: str
) -> tuple[Any, ...]:
    policy = sub.truncation_policy
    outstanding = state.outstanding()
    return (
        sub.name.project,
        sub.name.id,
        sub.name.path,
        sub.topic.path,
        backlog_view,
        state.cursor.frontier,
        state.floor(),
        head,
        outstanding + max(0, head - state.cursor.frontier),
        outstanding,
        policy.max_bytes if policy else None,
        policy.max_age_s if policy else None,
        sub.expiration_ttl_s,
        sub.retain_acked_messages,
        _time(state.cursor.active_us),
    )


_LEASES_SCHEMA = "offset long, delivery_attempts int, lease_state string, lease_deadline timestamp"
_TOPICS_SCHEMA = (
    "project string, topic string, name string, view string, location string, version long,"
    " oldest_offset long, head long, files long, message_retention_seconds long,"
    " history_seconds long"
)
_SUBSCRIPTIONS_SCHEMA = (
    "project string, subscription string, name string, topic string, backlog_view string,"
    " frontier long, floor long, head long, backlog_messages long, outstanding long,"
    " max_bytes long, max_age_seconds long, expiration_ttl_seconds long,"
    " retain_acked_messages boolean, last_activity timestamp"
)
