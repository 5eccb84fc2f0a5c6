"""The core engine: Pub/Sub's data model and delivery semantics on Delta tables.

One ``Engine`` per process and lake. Every call is thread-safe. State lives in
the lake only; what an engine keeps in memory is a cache keyed by table
version, so any number of engines (processes) can serve one lake at once.

A facade: each call goes to its room. Lookups and catalog changes to
``resources/directory.py``, publishes to ``publish/publishers.py``, pulls, acks
and deadline changes to ``delivery/deliveries.py`` (which routes them to the
topic's owner through ``peering/routing.py``). What is left here puts a
resource's tables and its catalog entry together. ``Rooms``, the base of
``Engine``, builds the rooms and wires them to one another, and runs their life
cycle.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Self

import pyarrow as pa

from lakepubsub import constants, errors
from lakepubsub._lake import Lake, settle_checkpoints
from lakepubsub.delivery import lease_admin, leases
from lakepubsub.delivery.ackids import Split, split_malformed, with_failures
from lakepubsub.delivery.context import DeliveryContext
from lakepubsub.delivery.deliveries import Deliveries
from lakepubsub.messages import PublishMessage, Pull, ReceivedMessage, TruncationEvent
from lakepubsub.peering.membership import MEMBERS
from lakepubsub.peering.peers import Peering
from lakepubsub.peering.routing import Route, owner_of
from lakepubsub.publish.batches import Batch, from_messages
from lakepubsub.publish.intake import Intake
from lakepubsub.publish.messages_table import MessagesTable, create_table
from lakepubsub.publish.publishers import Publishers
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.directory import Directory, now_us, topic_of
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName
from lakepubsub.resources.snapshots import Snapshot
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import SchemaSettings, Topic
from lakepubsub.schemas.registry import SchemaRegistry
from lakepubsub.settings import Settings


class Rooms:
    """One process's rooms on one lake, wired together: the catalog and its
    directory, the publishers and the intake, the dispatchers, and peering when a
    server sets it; and their life cycle. ``Engine`` adds the calls."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.lake = Lake(self.settings)
        self.catalog = cat.Catalog(self.lake)
        self.schemas = SchemaRegistry(self.catalog)
        # Set by a server (``lakepubsub serve``): the other API processes on this
        # lake, and which of them commits for each topic (lakepubsub/peering/).
        self.peering: Peering | None = None
        self.catalog.on_commit = self._catalog_committed
        self.resources = Directory(
            self.lake,
            self.catalog,
            staleness_s=lambda: self.settings.catalog_staleness(self._peered()),
            check_schema=self.schemas.check_settings,
        )
        self.deliveries = Deliveries(
            DeliveryContext(self.lake, self.settings, self._publish_unchecked, self._peered),
            self.resources,
            self._owner,
        )
        # Publishes of every topic commit together through the intake when the
        # settings ask for it, or when the lake has one (its rows must stay
        # visible; a lake keeps its intake once it has one).
        self.intake: Intake | None = None
        if self.settings.uses_intake() or self.lake.exists(self.lake.intake_uri()):
            self.intake = Intake(
                self.lake,
                self.settings,
                owns=lambda uid: self._owner(uid) is None,
                alive=self.resources.topic_alive,
                on_moved=self.deliveries.nudge,
                peered=self._peered,
            )
        self.publishers = Publishers(
            self.lake,
            self.settings,
            self.intake,
            on_commit=self.deliveries.nudge,
            forward=self._forward_publish,
            here=lambda uid: self._owner(uid) is None,
        )
        if self.intake is not None:
            self.intake.start()

    def _peered(self) -> bool:
        """Whether this process serves the lake with the others (peering): it is then
        told of commits to what it serves, and alone dispatches the subscriptions it
        owns, so it may look rarely and hold lease changes in memory."""
        return self.peering is not None

    def _owner(self, topic_uid: str) -> Route | None:
        return owner_of(self.peering, topic_uid)

    def _catalog_committed(self) -> None:
        """Tell the other processes at once: they read the catalog only when told, or
        when their cached copy is older than ``catalog_staleness()``."""
        peering = self.peering
        if peering is not None:
            peering.tell("catalog")

    def told(self, what: str) -> None:
        """A peer committed to a table this process caches (``Peering.tell``)."""
        if what == "catalog":
            self.catalog.invalidate()
        elif what == MEMBERS:
            # A topic may have a new owner, which reads the lease tables as stored:
            # commit the lease changes held in memory now (not when the dispatcher
            # idles out), so the takeover redelivers as little as it can.
            self.deliveries.flush_all()

    def lookups_need_no_io(self) -> bool:
        """Whether the ``*_future`` entry points (publish, pull, acknowledge, deadline
        changes) would find topics and subscriptions in the cached catalog without
        reading storage: an event loop may then call them inline."""
        return self.resources.is_fresh()

    def _publish_unchecked(self, name: TopicName, messages: list[PublishMessage]) -> None:
        """Publish system-made messages (dead letters): no client limits, wait for the commit."""
        entry = self.resources.topic_entry(name, fresh=False)
        self.publishers.publish_unchecked(entry.uid, messages)

    def _forward_publish(self, topic_uid: str, columns: pa.Table) -> Future[int] | None:
        """Hand ``columns`` to the topic's owner (a future of their first offset), or
        None when this process commits them itself."""
        owner = self._owner(topic_uid)
        return None if owner is None else owner[0].publish(owner[1], topic_uid, columns)

    def _forget(self, entry: cat.Entry) -> None:
        """Stop local work on a deleted resource and remove its tables."""
        self.deliveries.forget(
            entry.uid, errors.NotFound(f"{entry.kind} was deleted: {entry.name}")
        )
        self.publishers.forget(entry.uid)
        tree = {cat.TOPIC: "topics", cat.SUBSCRIPTION: "subscriptions"}.get(entry.kind, "snapshots")
        settle_checkpoints(self.lake.uri(tree, entry.uid), forget=True)
        self.lake.remove_tree(tree, entry.uid)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Commit queued publishes, answer waiting pulls, stop every thread."""
        publishers = self.publishers.shut()
        dispatchers = self.deliveries.shut()
        for publisher in publishers:
            publisher.close()
        if self.intake is not None:
            self.intake.close()
        self.deliveries.stop_all(dispatchers)
        # Background checkpoints of this lake's tables finish before close returns.
        settle_checkpoints(self.lake.root)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Engine(Rooms):
    """Topics, subscriptions, publish, pull and ack on one lake: a facade that hands
    each call to its room."""

    # -- topics ----------------------------------------------------------------------------

    def create_topic(self, topic: Topic) -> Topic:
        """Create a topic; ``AlreadyExists`` if the name is taken."""
        topic = topic.validated()
        uid = uuid.uuid4().hex
        table = create_table(self.lake, uid)
        if self.intake is not None:
            self.intake.created(table)
        now = now_us()
        name = topic.name
        entry = cat.Entry(cat.TOPIC, name.project, name.id, uid, None, now, now, topic.spec())
        self.resources.register(
            entry,
            "topics",
            f"Topic already exists: {name}",
            lambda view: self.schemas.check_settings(view, topic.schema_settings),
        )
        return replace(topic, uid=uid, created_us=now)

    def get_topic(self, name: TopicName) -> Topic:
        return topic_of(self.resources.topic_entry(name))

    def list_topics(
        self, project: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Topic], str]:
        return self.resources.list_topics(project, page_size, page_token)

    def update_topic(self, name: TopicName, changes: dict[str, Any], mask: list[str]) -> Topic:
        return self.resources.update_topic(name, changes, mask)

    def delete_topic(self, name: TopicName) -> None:
        """Delete a topic with its subscriptions and snapshots; their data goes too."""
        for entry in self.resources.delete_topic(name):
            self._forget(entry)

    def list_topic_subscriptions(
        self, name: TopicName, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[str], str]:
        return self.resources.list_topic_subscriptions(name, page_size, page_token)

    def list_topic_snapshots(self, name: TopicName) -> list[str]:
        return self.resources.list_topic_snapshots(name)

    def topic_head(self, name: TopicName) -> int:
        """One past the newest offset published to the topic, as stored now."""
        return MessagesTable(self.lake, self.resources.topic_entry(name).uid).head()

    def all_topics(self) -> list[Topic]:
        return self.resources.all_topics()

    # -- publish ---------------------------------------------------------------------------

    def publish_future(
        self, name: TopicName, messages: Sequence[PublishMessage]
    ) -> Future[list[str]]:
        """Queue a publish; the future gives the message ids once they are committed.

        An id is returned only for a message that is durably in the topic's table.
        On an error the messages may or may not have been stored (at-least-once:
        a retry can duplicate them, it cannot lose them).
        """
        return self.publish_batch_future(name, from_messages(messages))

    def publish_batch_future(self, name: TopicName, batch: Batch) -> Future[list[str]]:
        """As ``publish_future``, for a batch already built and checked (``batches``).
        On a topic with a schema, every message must conform, or nothing is published."""
        entry = self.resources.topic_entry(name, fresh=False)
        settings = SchemaSettings.from_spec(entry.spec.get("schema_settings"))
        if settings is not None:
            batch = self.schemas.conform(self.resources.view(False), name, settings, batch)
        return self.publishers.submit(entry.uid, batch)

    def publish(self, name: TopicName, messages: Sequence[PublishMessage]) -> list[str]:
        return self.publish_future(name, messages).result()

    def publish_forwarded(self, topic_uid: str, columns: pa.Table) -> Future[list[str]]:
        """Commit another process's checked group to the topic (this process owns it)."""
        return self.publishers.submit_forwarded(topic_uid, columns)

    # -- subscriptions -----------------------------------------------------------------

    def create_subscription(self, sub: Subscription) -> Subscription:
        """Create a subscription. It receives every message published after this returns."""
        return lease_admin.create_subscription(
            self.lake, self.resources, sub, self.settings.clock_us()
        )

    def get_subscription(self, name: SubscriptionName, *, fresh: bool = True) -> Subscription:
        """The subscription; ``fresh=False`` accepts the cached catalog (hot paths)."""
        return self.resources.subscription(name, fresh=fresh)

    def list_subscriptions(
        self, project: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Subscription], str]:
        return self.resources.list_subscriptions(project, page_size, page_token)

    def update_subscription(
        self, name: SubscriptionName, changes: dict[str, Any], mask: list[str]
    ) -> Subscription:
        return self.resources.update_subscription(name, changes, mask)

    def delete_subscription(self, name: SubscriptionName) -> None:
        """Delete a subscription; its pending messages are dropped at once."""
        self._forget(self.resources.delete_subscription(name))

    def detach_subscription(self, name: SubscriptionName) -> None:
        """Detach: drop what is pending; pulls then fail with FAILED_PRECONDITION."""
        sub = self.resources.subscription(name)
        self.commit_offset(name, self.topic_head(sub.topic))
        self.resources.mark_detached(name, sub.uid)

    def all_subscriptions(self, *, fresh: bool = True) -> list[Subscription]:
        return self.resources.all_subscriptions(fresh=fresh)

    def subscription_state(self, name: SubscriptionName) -> leases.LeaseState:
        """The subscription's cursor and outstanding rows, as stored now, with what this
        process's dispatcher held in memory committed first (a snapshot, a view). The
        lease changes another process holds (up to its lease flush window) are not
        in it."""
        return self.deliveries.state(self.resources.subscription(name))

    # -- delivery ----------------------------------------------------------------------

    def pull_future(
        self,
        name: SubscriptionName,
        *,
        max_messages: int,
        return_immediately: bool = False,
        ack_deadline_s: int | None = None,
    ) -> Future[Sequence[ReceivedMessage]]:
        """Lease up to ``max_messages`` messages (and truncation events) for the ack deadline.

        Without ``return_immediately`` a pull with nothing to deliver waits up to
        ``settings.pull_wait_s`` for something to arrive.
        ``ack_deadline_s`` leases what it gets for that long instead of the
        subscription's ack deadline (a StreamingPull stream's own deadline).
        Delivery is at least once: a message whose lease expires or is nacked is
        delivered again.
        """
        return self.deliveries.pull(
            name,
            max_messages=max_messages,
            return_immediately=return_immediately,
            ack_deadline_s=ack_deadline_s,
        )

    def pull(
        self, name: SubscriptionName, *, max_messages: int, return_immediately: bool = False
    ) -> list[ReceivedMessage]:
        return list(
            self.pull_future(
                name, max_messages=max_messages, return_immediately=return_immediately
            ).result()
        )

    def pull_here(self, name: SubscriptionName, pull: Pull) -> Future[Sequence[ReceivedMessage]]:
        """A pull on this process's dispatcher (``pull_future`` checked it)."""
        return self.deliveries.pull_here(name, pull)

    def withdraw(self, name: SubscriptionName, pull: Future[Sequence[ReceivedMessage]]) -> None:
        """Give up a pull from ``pull_future`` whose receiver went away (a stream or
        long poll that ended). A pull still waiting leaves its dispatcher at once;
        what it was already given is released (``release``). Only for a pull none of
        whose deliveries were written to a client."""
        self.deliveries.withdraw(name, pull)

    def release(self, name: SubscriptionName, received: Sequence[ReceivedMessage]) -> None:
        """Give back deliveries no client saw: deliverable again at once, without
        back-off, the attempt not counted. Best effort: if it cannot be done, their
        leases run out as a vanished client's would."""
        self.deliveries.release(name, received)

    def acknowledge_future(
        self, name: SubscriptionName, ack_ids: list[str], split: Split | None = None
    ) -> Future[dict[str, str]]:
        """Acknowledge deliveries. The future gives per-id failures (exactly-once only).
        ``split``: ``ack_ids`` already parsed (``split_malformed``).

        Without exactly-once, acks are idempotent and best effort: an ack for a
        lease that expired still removes the message if it was not acked yet.
        """
        return self._changes(name, ack_ids, None, split)

    def acknowledge(self, name: SubscriptionName, ack_ids: list[str]) -> dict[str, str]:
        return self.acknowledge_future(name, ack_ids).result()

    def acknowledge_here(
        self, name: SubscriptionName, ack_ids: list[str], deadline_s: int | None
    ) -> Future[dict[str, str]]:
        """Acks (``deadline_s`` None) or deadline changes on this process's dispatcher."""
        return self.deliveries.acknowledge_here(name, ack_ids, deadline_s)

    def modify_ack_deadline_future(
        self,
        name: SubscriptionName,
        ack_ids: list[str],
        deadline_s: int,
        split: Split | None = None,
    ) -> Future[dict[str, str]]:
        """Extend leases to ``deadline_s`` from now; 0 makes them redeliverable (a nack)."""
        if not 0 <= deadline_s <= constants.MAX_ACK_DEADLINE_S:
            raise errors.InvalidArgument(
                f"ackDeadlineSeconds must be between 0 and {constants.MAX_ACK_DEADLINE_S}"
            )
        return self._changes(name, ack_ids, deadline_s, split)

    def _changes(
        self,
        name: SubscriptionName,
        ack_ids: list[str],
        deadline_s: int | None,
        split: Split | None,
    ) -> Future[dict[str, str]]:
        """Acks or deadline changes; a malformed id fails alone (``split_malformed``)."""
        ids, parsed, malformed = split_malformed(ack_ids) if split is None else split
        future = self.deliveries.changes(name, ids, parsed, deadline_s) if ids else None
        return with_failures(future, malformed)

    def modify_ack_deadline(
        self, name: SubscriptionName, ack_ids: list[str], deadline_s: int
    ) -> dict[str, str]:
        return self.modify_ack_deadline_future(name, ack_ids, deadline_s).result()

    def nack(self, name: SubscriptionName, ack_ids: list[str]) -> dict[str, str]:
        return self.modify_ack_deadline(name, ack_ids, 0)

    def truncate_future(
        self, name: SubscriptionName, *, end_offset: int | None = None, reason: str = "request"
    ) -> Future[TruncationEvent]:
        """Drop every message not yet acknowledged (below ``end_offset``, default all
        published so far) and queue a truncation event for the next pull."""
        return self.deliveries.truncate(name, end_offset, reason)

    def truncate(
        self, name: SubscriptionName, *, end_offset: int | None = None, reason: str = "request"
    ) -> TruncationEvent:
        return self.truncate_future(name, end_offset=end_offset, reason=reason).result()

    def commit_offset(self, name: SubscriptionName, end_offset: int) -> None:
        """Acknowledge every message below ``end_offset`` at once (no event).

        For consumers that process the history in bulk (the Spark batch consumer)
        and track their own position.
        """
        self.deliveries.truncate(name, end_offset, "commit", silent=True).result()

    def seek_to_time(self, name: SubscriptionName, time_us: int) -> None:
        """Mark everything published before ``time_us`` acknowledged and everything
        from then on unacknowledged (as far as the topic still holds it)."""
        sub = self.resources.subscription(name)
        offset = MessagesTable(self.lake, sub.topic_uid).first_offset_at(time_us)
        self.deliveries.seek(name, offset, [])

    # -- snapshots -----------------------------------------------------------------------

    def create_snapshot(
        self,
        name: SnapshotName,
        subscription: SubscriptionName,
        *,
        labels: dict[str, str] | None = None,
    ) -> Snapshot:
        """Capture a subscription's acknowledgment state, to seek back to later."""
        return lease_admin.create_snapshot(
            self.lake, self.resources, self.deliveries, name, subscription, labels
        )

    def get_snapshot(self, name: SnapshotName) -> Snapshot:
        return Snapshot.from_entry(self.resources.snapshot_entry(name))

    def list_snapshots(
        self, project: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Snapshot], str]:
        return self.resources.list_snapshots(project, page_size, page_token)

    def update_snapshot(self, name: SnapshotName, labels: dict[str, str]) -> Snapshot:
        return self.resources.update_snapshot(name, labels)

    def delete_snapshot(self, name: SnapshotName) -> None:
        self._forget(self.resources.delete_snapshot(name))

    def seek_to_snapshot(self, name: SubscriptionName, snapshot: SnapshotName) -> None:
        """Restore the acknowledgment state a snapshot captured."""
        lease_admin.seek_to_snapshot(self.resources, self.deliveries, name, snapshot)
