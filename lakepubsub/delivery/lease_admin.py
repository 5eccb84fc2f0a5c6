"""The resources made of lease tables: a subscription (its lease table, started at
the topic's head) and a snapshot (a copy of a subscription's lease state, to
seek back to). Each writes its table under a fresh uid, then registers the
catalog entry (``Directory.register``)."""

from __future__ import annotations

import uuid
from dataclasses import replace

from lakepubsub import errors
from lakepubsub._lake import Lake, table_schemas
from lakepubsub.delivery import leases
from lakepubsub.delivery.deliveries import Deliveries
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.directory import Directory, now_us
from lakepubsub.resources.labels import validate_labels
from lakepubsub.resources.names import SnapshotName, SubscriptionName
from lakepubsub.resources.snapshots import SNAPSHOT_LIFETIME_US, Snapshot
from lakepubsub.resources.subscriptions import Subscription


def create_subscription(
    lake: Lake, directory: Directory, sub: Subscription, now: int
) -> Subscription:
    """Create a subscription (created at ``now``, µs). It receives every message
    published after this returns."""
    sub = sub.validated()
    topic = directory.topic_entry(sub.topic)
    if sub.dead_letter_policy is not None:
        directory.topic_entry(sub.dead_letter_policy.dead_letter_topic)
    uid = uuid.uuid4().hex
    sub = replace(sub, uid=uid, topic_uid=topic.uid, created_us=now)
    # The subscription point: the topic head as of now, read from storage.
    head = MessagesTable(lake, topic.uid).head()
    lake.create_with(
        lake.leases_uri(uid),
        leases.initial_rows(head, now),
        configuration=table_schemas.LEASES_PROPERTIES,
    )
    entry = cat.Entry(
        cat.SUBSCRIPTION, sub.name.project, sub.name.id, uid, topic.uid, now, now, sub.spec()
    )

    def check(view: cat.View) -> None:
        current = view.get(cat.TOPIC, sub.topic.project, sub.topic.id)
        if current is None or current.uid != topic.uid:
            raise errors.NotFound(f"Topic not found: {sub.topic}")

    directory.register(entry, "subscriptions", f"Subscription already exists: {sub.name}", check)
    return sub


def create_snapshot(
    lake: Lake,
    directory: Directory,
    deliveries: Deliveries,
    name: SnapshotName,
    subscription: SubscriptionName,
    labels: dict[str, str] | None,
) -> Snapshot:
    """Capture a subscription's acknowledgment state, to seek back to later."""
    validate_labels(labels or {})
    sub = directory.subscription(subscription)
    state = deliveries.state(directory.subscription(subscription))
    uid = uuid.uuid4().hex
    now = now_us()
    messages = MessagesTable(lake, sub.topic_uid)
    oldest_us = messages.publish_time_us(state.floor()) or now
    snapshot = Snapshot(
        name,
        sub.topic,
        uid,
        labels or {},
        oldest_us + SNAPSHOT_LIFETIME_US,
        state.cursor.frontier,
    )
    rows = [r for r in state.rows.values() if r.kind == table_schemas.KIND_MESSAGE]
    lake.create_with(
        lake.snapshot_uri(uid),
        leases.to_arrow(rows, replace(state.cursor, next_delivery=1)),
        configuration=table_schemas.LEASES_PROPERTIES,
    )
    entry = cat.Entry(
        cat.SNAPSHOT, name.project, name.id, uid, sub.topic_uid, now, now, snapshot.spec()
    )

    def check(view: cat.View) -> None:
        if view.get(cat.TOPIC, sub.topic.project, sub.topic.id) is None:
            raise errors.NotFound(f"Topic not found: {sub.topic}")

    directory.register(entry, "snapshots", f"Snapshot already exists: {name}", check)
    return snapshot


def seek_to_snapshot(
    directory: Directory, deliveries: Deliveries, name: SubscriptionName, snapshot: SnapshotName
) -> None:
    """Restore the acknowledgment state a snapshot captured."""
    sub = directory.subscription(name)
    entry = directory.snapshot_entry(snapshot)
    if entry.topic_uid != sub.topic_uid:
        raise errors.FailedPrecondition(
            f"Snapshot {snapshot} is of another topic than subscription {name}"
        )
    deliveries.restore(name, entry.uid)
