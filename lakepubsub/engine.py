"""The core engine: Pub/Sub's data model and delivery semantics on Delta tables.

One ``Engine`` per process and lake. Every call is thread-safe. State lives in
the lake only; what an engine keeps in memory is a cache keyed by table
version, so any number of engines (processes) can serve one lake at once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import replace
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from lakepubsub import constants, errors
from lakepubsub._lake import Lake, settle_checkpoints, table_schemas
from lakepubsub.delivery import leases
from lakepubsub.delivery.ackids import AckId, parse_all
from lakepubsub.delivery.dispatcher import Dispatcher
from lakepubsub.delivery.requests import (
    AckRequest,
    FlushRequest,
    PullRequest,
    Request,
    SeekRequest,
    TruncateRequest,
)
from lakepubsub.messages import PublishMessage, ReceivedMessage, TruncationEvent
from lakepubsub.peering.peers import MEMBERS, Member, Peering, Unreachable
from lakepubsub.publish.batches import Batch, build, from_messages
from lakepubsub.publish.intake import Intake
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.publish.publisher import TopicPublisher
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.labels import validate_labels
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName, validate_project
from lakepubsub.resources.paging import page as _page
from lakepubsub.resources.snapshots import SNAPSHOT_LIFETIME_US, Snapshot
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import SchemaSettings, Topic
from lakepubsub.schemas.registry import SchemaRegistry
from lakepubsub.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


def _now_us() -> int:
    return time.time_ns() // 1000


class Engine:
    """Topics, subscriptions, publish, pull and ack on one lake."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.lake = Lake(self.settings)
        self.catalog = cat.Catalog(self.lake)
        self.schemas = SchemaRegistry(self.catalog)
        self._lock = threading.Lock()
        self._publishers: dict[str, TopicPublisher] = {}
        self._dispatchers: dict[str, Dispatcher] = {}
        self._closed = False
        # Set by a server (``lakepubsub serve``): the other API processes on this
        # lake, and which of them commits for each topic (lakepubsub/peering/peers.py).
        self.peering: Peering | None = None
        self.catalog.on_commit = self._catalog_committed
        # Publishes of every topic commit together through the intake when the
        # settings ask for it, or when the lake has one (its rows must stay
        # visible; a lake keeps its intake once it has one).
        self.intake: Intake | None = None
        if self.settings.uses_intake() or self.lake.exists(self.lake.uri("intake")):
            self.intake = Intake(
                self.lake,
                self.settings,
                owns=lambda uid: self._owner(uid) is None,
                alive=self._topic_alive,
                on_moved=self._published,
                peered=self._peered,
            )
            self.intake.start()

    def _peered(self) -> bool:
        """Whether this process serves the lake with the others (peering): it is then
        told of commits to what it serves, and alone dispatches the subscriptions it
        owns, so it may look rarely and hold lease changes in memory."""
        return self.peering is not None

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
            with self._lock:
                dispatchers = list(self._dispatchers.values())
            for dispatcher in dispatchers:
                with contextlib.suppress(errors.Unavailable):  # stopping: it commits anyway
                    dispatcher.submit(FlushRequest())

    # -- lookups ---------------------------------------------------------------------------

    def _view(self, fresh: bool) -> cat.View:
        staleness = 0.0 if fresh else self.settings.catalog_staleness(self._peered())
        return self.catalog.view(max_staleness_s=staleness)

    def _topic_alive(self, topic_uid: str) -> bool:
        return any(e.uid == topic_uid for e in self._view(False).of_kind(cat.TOPIC))

    def _topic_entry(self, name: TopicName, *, fresh: bool = True) -> cat.Entry:
        entry = self._view(fresh).get(cat.TOPIC, name.project, name.id)
        if entry is None and not fresh:
            entry = self._view(True).get(cat.TOPIC, name.project, name.id)
        if entry is None:
            raise errors.NotFound(f"Topic not found: {name}")
        return entry

    def _subscription(self, name: SubscriptionName, *, fresh: bool = True) -> Subscription:
        entry = self._view(fresh).get(cat.SUBSCRIPTION, name.project, name.id)
        if entry is None and not fresh:
            entry = self._view(True).get(cat.SUBSCRIPTION, name.project, name.id)
        if entry is None:
            raise errors.NotFound(f"Subscription does not exist: {name}")
        return _subscription(entry)

    # -- topics ----------------------------------------------------------------------------

    def create_topic(self, topic: Topic) -> Topic:
        """Create a topic; ``AlreadyExists`` if the name is taken."""
        topic = topic.validated()
        uid = uuid.uuid4().hex
        MessagesTable.create(self.lake, uid)
        now = _now_us()
        entry = cat.Entry(
            cat.TOPIC, topic.name.project, topic.name.id, uid, None, now, now, topic.spec()
        )

        def change(view: cat.View) -> tuple[cat.Changes, None]:
            if _taken(view, entry):
                raise errors.AlreadyExists(f"Topic already exists: {topic.name}")
            self.schemas.check_settings(view, topic.schema_settings)
            return cat.Changes(put=[entry]), None

        self._register(entry, change, "topics")
        return replace(topic, uid=uid, created_us=now)

    def get_topic(self, name: TopicName) -> Topic:
        return _topic(self._topic_entry(name))

    def list_topics(
        self, project: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Topic], str]:
        validate_project(project)
        entries = self._view(True).of_kind(cat.TOPIC, project)
        page, token = _page(entries, page_size, page_token)
        return [_topic(e) for e in page], token

    def update_topic(self, name: TopicName, changes: dict[str, Any], mask: list[str]) -> Topic:
        def change(view: cat.View) -> tuple[cat.Changes, Topic]:
            entry = view.get(cat.TOPIC, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Topic not found: {name}")
            topic = _topic(entry).updated(changes, mask)
            if any(f.startswith("schema_settings") for f in mask):
                self.schemas.check_settings(view, topic.schema_settings)
            new = replace(entry, spec=topic.spec(), updated_us=_now_us())
            return cat.Changes(put=[new]), topic

        return self.catalog.transact(change)

    def delete_topic(self, name: TopicName) -> None:
        """Delete a topic with its subscriptions and snapshots; their data goes too."""

        def change(view: cat.View) -> tuple[cat.Changes, list[cat.Entry]]:
            entry = view.get(cat.TOPIC, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Topic not found: {name}")
            doomed = [entry, *view.attached_to(entry.uid)]
            return cat.Changes(delete=[e.key for e in doomed]), doomed

        doomed = self.catalog.transact(change)
        for entry in doomed:
            self._forget(entry)

    def list_topic_subscriptions(
        self, name: TopicName, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[str], str]:
        entry = self._topic_entry(name)
        subs = [e for e in self._view(False).attached_to(entry.uid) if e.kind == cat.SUBSCRIPTION]
        page, token = _page(subs, page_size, page_token)
        return [SubscriptionName(e.project, e.name).path for e in page], token

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
        entry = self._topic_entry(name, fresh=False)
        settings = SchemaSettings.from_spec(entry.spec.get("schema_settings"))
        if settings is not None:
            batch = self.schemas.conform(self._view(False), name, settings, batch)
        return self._publisher(entry.uid).submit(batch)

    def lookups_need_no_io(self) -> bool:
        """Whether the ``*_future`` entry points (publish, pull, acknowledge, deadline
        changes) would find topics and subscriptions in the cached catalog without
        reading storage: an event loop may then call them inline."""
        return self.catalog.is_fresh(self.settings.catalog_staleness(self._peered()))

    def publish(self, name: TopicName, messages: Sequence[PublishMessage]) -> list[str]:
        return self.publish_future(name, messages).result()

    def _publish_unchecked(self, name: TopicName, messages: list[PublishMessage]) -> None:
        """Publish system-made messages (dead letters): no client limits, wait for the commit."""
        entry = self._topic_entry(name, fresh=False)
        batch = build(
            [m.data for m in messages],
            [list(m.attributes.items()) or None for m in messages],
            [m.ordering_key or None for m in messages],
        )
        self._publisher(entry.uid).submit(batch).result()

    def _publisher(self, topic_uid: str) -> TopicPublisher:
        with self._lock:
            if self._closed:
                raise errors.Unavailable("the engine is shutting down")
            publisher = self._publishers.get(topic_uid)
            if publisher is None:
                publisher = TopicPublisher(
                    self.lake,
                    topic_uid,
                    self.settings,
                    on_commit=lambda batch, version: self._published(topic_uid, version),
                    forward=lambda columns: self._forward_publish(topic_uid, columns),
                    intake=self.intake,
                )
                self._publishers[topic_uid] = publisher
            return publisher

    def _owner(self, topic_uid: str) -> tuple[Peering, Member] | None:
        """The other process that commits for the topic, or None if it is this one."""
        peering = self.peering
        member = peering.owner(topic_uid) if peering is not None else None
        return None if peering is None or member is None else (peering, member)

    def _forward_publish(self, topic_uid: str, columns: pa.Table) -> Future[int] | None:
        """Hand ``columns`` to the topic's owner (a future of their first offset), or
        None when this process commits them itself."""
        owner = self._owner(topic_uid)
        return None if owner is None else owner[0].publish(owner[1], topic_uid, columns)

    def publish_forwarded(self, topic_uid: str, columns: pa.Table) -> Future[list[str]]:
        """Commit another process's checked group to the topic (this process owns it)."""
        size = int(pc.sum(columns["size"]).as_py() or 0)
        return self._publisher(topic_uid).submit(Batch(columns, size), forwarded=True)

    def _via_owner(
        self,
        topic_uid: str,
        call: Callable[[Peering, Member], Future[T]],
        here: Callable[[], Future[T]],
        *,
        withdraw: Callable[[Future[T]], None] | None = None,
    ) -> Future[T]:
        """``call`` the topic's owner, or do the work ``here`` when this process is
        the owner or the owner cannot be reached. With ``withdraw``, cancelling the
        answer withdraws the work it waits on (a pull whose caller went away)."""
        owner = self._owner(topic_uid)
        if owner is None:
            return here()
        result: Future[T] = Future()
        waiting_on: list[Future[T]] = []  # the owner's call, then the local work

        def done(finished: Future[T]) -> None:
            if result.cancelled() or finished.cancelled():
                return  # withdrawn: ``withdraw`` took care of ``finished``
            if not isinstance(finished.exception(), Unreachable):
                _copy(finished, result)
                return
            try:
                local = here()
            except BaseException as failure:
                with contextlib.suppress(InvalidStateError):  # withdrawn meanwhile
                    result.set_exception(failure)
                return
            waiting_on.append(local)
            if result.cancelled() and withdraw is not None:
                withdraw(local)
            local.add_done_callback(lambda f: _copy(f, result))

        first = call(*owner)
        waiting_on.append(first)
        if withdraw is not None:
            result.add_done_callback(lambda r: r.cancelled() and withdraw(waiting_on[-1]))
        first.add_done_callback(done)
        return result

    def _published(self, topic_uid: str, version: int) -> None:
        with self._lock:
            waiting = [
                d for d in self._dispatchers.values() if d.subscription.topic_uid == topic_uid
            ]
        for dispatcher in waiting:
            dispatcher.nudge(version)

    # -- subscriptions -----------------------------------------------------------------

    def create_subscription(self, sub: Subscription) -> Subscription:
        """Create a subscription. It receives every message published after this returns."""
        sub = sub.validated()
        topic = self._topic_entry(sub.topic)
        if sub.dead_letter_policy is not None:
            self._topic_entry(sub.dead_letter_policy.dead_letter_topic)
        uid = uuid.uuid4().hex
        now = self.settings.clock_us()
        sub = replace(sub, uid=uid, topic_uid=topic.uid, created_us=now)
        # The subscription point: the topic head as of now, read from storage.
        head = MessagesTable(self.lake, topic.uid).head()
        self.lake.create_with(
            self.lake.leases_uri(uid),
            leases.initial_rows(head, now),
            configuration=table_schemas.LEASES_PROPERTIES,
        )
        entry = cat.Entry(
            cat.SUBSCRIPTION, sub.name.project, sub.name.id, uid, topic.uid, now, now, sub.spec()
        )

        def change(view: cat.View) -> tuple[cat.Changes, None]:
            if _taken(view, entry):
                raise errors.AlreadyExists(f"Subscription already exists: {sub.name}")
            current = view.get(cat.TOPIC, sub.topic.project, sub.topic.id)
            if current is None or current.uid != topic.uid:
                raise errors.NotFound(f"Topic not found: {sub.topic}")
            return cat.Changes(put=[entry]), None

        self._register(entry, change, "subscriptions")
        return sub

    def _register(
        self, entry: cat.Entry, change: Callable[[cat.View], tuple[cat.Changes, None]], tree: str
    ) -> None:
        """Commit a new catalog entry whose tables are written; remove them if it failed.

        A commit can land while its answer is lost: the catalog's retry then sees
        the entry (``_taken`` lets that pass), and a failure that leaves the entry
        in a fresh read is a success. When the catalog cannot be read, the tables
        stay: an orphaned table only costs storage (the gc job sweeps it), a
        removed table under a live entry breaks the resource.
        """
        try:
            self.catalog.transact(change)
        except errors.LakePubSubError as failure:
            try:
                landed = self.catalog.view().get(*entry.key)
            except errors.LakePubSubError:
                raise failure from None
            if landed is not None and landed.uid == entry.uid:
                return
            self.lake.remove_tree(tree, entry.uid)
            raise

    def get_subscription(self, name: SubscriptionName, *, fresh: bool = True) -> Subscription:
        """The subscription; ``fresh=False`` accepts the cached catalog (hot paths)."""
        return self._subscription(name, fresh=fresh)

    def list_subscriptions(
        self, project: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Subscription], str]:
        validate_project(project)
        entries = self._view(True).of_kind(cat.SUBSCRIPTION, project)
        page, token = _page(entries, page_size, page_token)
        return [_subscription(e) for e in page], token

    def update_subscription(
        self, name: SubscriptionName, changes: dict[str, Any], mask: list[str]
    ) -> Subscription:
        def change(view: cat.View) -> tuple[cat.Changes, Subscription]:
            entry = view.get(cat.SUBSCRIPTION, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Subscription does not exist: {name}")
            sub = _subscription(entry).updated(changes, mask)
            if sub.dead_letter_policy is not None:
                dlt = sub.dead_letter_policy.dead_letter_topic
                if view.get(cat.TOPIC, dlt.project, dlt.id) is None:
                    raise errors.NotFound(f"Topic not found: {dlt}")
            return cat.Changes(put=[replace(entry, spec=sub.spec(), updated_us=_now_us())]), sub

        return self.catalog.transact(change)

    def delete_subscription(self, name: SubscriptionName) -> None:
        """Delete a subscription; its pending messages are dropped at once."""

        def change(view: cat.View) -> tuple[cat.Changes, cat.Entry]:
            entry = view.get(cat.SUBSCRIPTION, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Subscription does not exist: {name}")
            return cat.Changes(delete=[entry.key]), entry

        self._forget(self.catalog.transact(change))

    def _forget(self, entry: cat.Entry) -> None:
        """Stop local work on a deleted resource and remove its tables."""
        with self._lock:
            publisher = self._publishers.pop(entry.uid, None)
            dispatcher = self._dispatchers.pop(entry.uid, None)
        if dispatcher is not None:
            dispatcher.stop(errors.NotFound(f"{entry.kind} was deleted: {entry.name}"))
        if publisher is not None:
            publisher.close()
        tree = {cat.TOPIC: "topics", cat.SUBSCRIPTION: "subscriptions"}.get(entry.kind, "snapshots")
        settle_checkpoints(self.lake.uri(tree, entry.uid), forget=True)
        if entry.kind == cat.TOPIC:
            self.lake.remove_tree("topics", entry.uid)
        elif entry.kind == cat.SUBSCRIPTION:
            self.lake.remove_tree("subscriptions", entry.uid)
        else:
            self.lake.remove_tree("snapshots", entry.uid)

    # -- delivery ----------------------------------------------------------------------

    def _dispatcher(self, name: SubscriptionName) -> Dispatcher:
        sub = self._subscription(name, fresh=False)
        with self._lock:
            if self._closed:
                raise errors.Unavailable("the engine is shutting down")
            dispatcher = self._dispatchers.get(sub.uid)
            if dispatcher is None or not dispatcher.alive:
                dispatcher = Dispatcher(
                    self.lake,
                    self.settings,
                    sub,
                    lookup=lambda: self._lookup_uid(sub.name, sub.uid),
                    on_exit=self._dispatcher_exited,
                    dead_letter=self._publish_unchecked,
                    peered=self._peered,
                )
                self._dispatchers[sub.uid] = dispatcher
            return dispatcher

    def _lookup_uid(self, name: SubscriptionName, uid: str) -> Subscription | None:
        entry = self._view(False).get(cat.SUBSCRIPTION, name.project, name.id)
        return _subscription(entry) if entry is not None and entry.uid == uid else None

    def _dispatcher_exited(self, dispatcher: Dispatcher) -> None:
        with self._lock:
            if self._dispatchers.get(dispatcher.subscription.uid) is dispatcher:
                del self._dispatchers[dispatcher.subscription.uid]

    def _submit(self, name: SubscriptionName, make: Callable[[], Request]) -> Future[Any]:
        for _ in range(3):
            request = make()
            try:
                self._dispatcher(name).submit(request)
            except errors.Unavailable:
                if self._closed:
                    raise
                continue  # the dispatcher exited just now; start another
            return request.future
        raise errors.Unavailable("could not reach the subscription's dispatcher; retry")

    def pull_future(
        self,
        name: SubscriptionName,
        *,
        max_messages: int,
        return_immediately: bool = False,
        ack_deadline_s: int | None = None,
    ) -> Future[list[ReceivedMessage]]:
        """Lease up to ``max_messages`` messages (and truncation events) for the ack deadline.

        Without ``return_immediately`` a pull with nothing to deliver waits up to
        ``settings.pull_wait_s`` for something to arrive.
        ``ack_deadline_s`` leases what it gets for that long instead of the
        subscription's ack deadline (a StreamingPull stream's own deadline).
        Delivery is at least once: a message whose lease expires or is nacked is
        delivered again.
        """
        if max_messages <= 0:
            raise errors.InvalidArgument("maxMessages must be a positive number")
        sub = self._subscription(name, fresh=False)
        if sub.detached:
            raise errors.FailedPrecondition(f"Subscription is detached: {name}")
        if ack_deadline_s is not None and not (
            constants.MIN_ACK_DEADLINE_S <= ack_deadline_s <= constants.MAX_ACK_DEADLINE_S
        ):
            raise errors.InvalidArgument(
                f"the ack deadline must be between {constants.MIN_ACK_DEADLINE_S} and "
                f"{constants.MAX_ACK_DEADLINE_S} seconds"
            )
        wait = 0.0 if return_immediately else self.settings.pull_wait_s
        count = min(max_messages, constants.MAX_PULL_MESSAGES)
        return self._via_owner(
            sub.topic_uid,
            lambda peering, member: peering.pull(member, name.path, count, wait, ack_deadline_s),
            lambda: self.pull_here(
                name, max_messages=count, wait_s=wait, ack_deadline_s=ack_deadline_s
            ),
            withdraw=lambda source: self.withdraw(name, source),
        )

    def withdraw(self, name: SubscriptionName, pull: Future[list[ReceivedMessage]]) -> None:
        """Give up a pull from ``pull_future`` whose receiver went away (a stream or
        long poll that ended). A pull still waiting leaves its dispatcher at once;
        what it was already given is released (``release``). Only for a pull none of
        whose deliveries were written to a client."""
        if pull.cancel():
            return
        pull.add_done_callback(lambda done: self._release_result(name, done))

    def _release_result(self, name: SubscriptionName, done: Future[list[ReceivedMessage]]) -> None:
        if not done.cancelled() and done.exception() is None:
            self.release(name, done.result())

    def release(self, name: SubscriptionName, received: Sequence[ReceivedMessage]) -> None:
        """Give back deliveries no client saw: deliverable again at once, without
        back-off, the attempt not counted. Best effort: if it cannot be done, their
        leases run out as a vanished client's would."""
        ack_ids = [r.ack_id for r in received]
        if not ack_ids:
            return
        try:
            future = self._changes(name, ack_ids, parse_all(ack_ids), leases.RELEASE)
        except errors.LakePubSubError as exc:
            log.info("could not release %d deliveries of %s: %s", len(ack_ids), name, exc)
            return
        future.add_done_callback(lambda f: _log_release_failure(name, f))

    def pull_here(
        self,
        name: SubscriptionName,
        *,
        max_messages: int,
        wait_s: float,
        ack_deadline_s: int | None,
    ) -> Future[list[ReceivedMessage]]:
        """A pull on this process's dispatcher (``pull_future`` checked it)."""
        return self._submit(
            name, lambda: PullRequest(max_messages, time.monotonic() + wait_s, ack_deadline_s)
        )

    def pull(
        self, name: SubscriptionName, *, max_messages: int, return_immediately: bool = False
    ) -> list[ReceivedMessage]:
        return self.pull_future(
            name, max_messages=max_messages, return_immediately=return_immediately
        ).result()

    def acknowledge_future(
        self, name: SubscriptionName, ack_ids: list[str]
    ) -> Future[dict[str, str]]:
        """Acknowledge deliveries. The future gives per-id failures (exactly-once only).

        Without exactly-once, acks are idempotent and best effort: an ack for a
        lease that expired still removes the message if it was not acked yet.
        """
        return self._changes(name, ack_ids, parse_all(ack_ids), None)

    def acknowledge(self, name: SubscriptionName, ack_ids: list[str]) -> dict[str, str]:
        return self.acknowledge_future(name, ack_ids).result()

    def modify_ack_deadline_future(
        self, name: SubscriptionName, ack_ids: list[str], deadline_s: int
    ) -> Future[dict[str, str]]:
        """Extend leases to ``deadline_s`` from now; 0 makes them redeliverable (a nack)."""
        if not 0 <= deadline_s <= constants.MAX_ACK_DEADLINE_S:
            raise errors.InvalidArgument(
                f"ackDeadlineSeconds must be between 0 and {constants.MAX_ACK_DEADLINE_S}"
            )
        return self._changes(name, ack_ids, parse_all(ack_ids), deadline_s)

    def _changes(
        self,
        name: SubscriptionName,
        ack_ids: list[str],
        parsed: list[AckId],
        deadline_s: int | None,
    ) -> Future[dict[str, str]]:
        sub = self._subscription(name, fresh=False)
        return self._via_owner(
            sub.topic_uid,
            lambda peering, member: peering.acknowledge(member, name.path, ack_ids, deadline_s),
            lambda: self._submit(name, lambda: AckRequest(parsed, deadline_s)),
        )

    def acknowledge_here(
        self, name: SubscriptionName, ack_ids: list[str], deadline_s: int | None
    ) -> Future[dict[str, str]]:
        """Acks (``deadline_s`` None) or deadline changes on this process's dispatcher."""
        parsed = parse_all(ack_ids)
        return self._submit(name, lambda: AckRequest(parsed, deadline_s))

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
        return self._submit(name, lambda: TruncateRequest(end_offset, reason))

    def truncate(
        self, name: SubscriptionName, *, end_offset: int | None = None, reason: str = "request"
    ) -> TruncationEvent:
        return self.truncate_future(name, end_offset=end_offset, reason=reason).result()

    def commit_offset(self, name: SubscriptionName, end_offset: int) -> None:
        """Acknowledge every message below ``end_offset`` at once (no event).

        For consumers that process the history in bulk (the Spark batch consumer)
        and track their own position.
        """
        self._submit(name, lambda: TruncateRequest(end_offset, "commit", silent=True)).result()

    def detach_subscription(self, name: SubscriptionName) -> None:
        """Detach: drop what is pending; pulls then fail with FAILED_PRECONDITION."""
        sub = self._subscription(name)
        self.commit_offset(name, self.topic_head(sub.topic))

        def change(view: cat.View) -> tuple[cat.Changes, None]:
            entry = view.get(cat.SUBSCRIPTION, name.project, name.id)
            if entry is None or entry.uid != sub.uid:
                raise errors.NotFound(f"Subscription does not exist: {name}")
            detached = replace(_subscription(entry), detached=True)
            return cat.Changes(put=[replace(entry, spec=detached.spec())]), None

        self.catalog.transact(change)

    def seek_to_time(self, name: SubscriptionName, time_us: int) -> None:
        """Mark everything published before ``time_us`` acknowledged and everything
        from then on unacknowledged (as far as the topic still holds it)."""
        sub = self._subscription(name)
        offset = MessagesTable(self.lake, sub.topic_uid).first_offset_at(time_us)
        self._submit(name, lambda: SeekRequest(offset, [])).result()

    # -- snapshots -----------------------------------------------------------------------

    def create_snapshot(
        self,
        name: SnapshotName,
        subscription: SubscriptionName,
        *,
        labels: dict[str, str] | None = None,
    ) -> Snapshot:
        """Capture a subscription's acknowledgment state, to seek back to later."""
        validate_labels(labels or {})
        sub = self._subscription(subscription)
        state = self.subscription_state(subscription)
        uid = uuid.uuid4().hex
        now = _now_us()
        messages = MessagesTable(self.lake, sub.topic_uid)
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
        self.lake.create_with(
            self.lake.snapshot_uri(uid),
            leases.to_arrow(rows, replace(state.cursor, next_delivery=1)),
            configuration=table_schemas.LEASES_PROPERTIES,
        )
        entry = cat.Entry(
            cat.SNAPSHOT, name.project, name.id, uid, sub.topic_uid, now, now, snapshot.spec()
        )

        def change(view: cat.View) -> tuple[cat.Changes, None]:
            if _taken(view, entry):
                raise errors.AlreadyExists(f"Snapshot already exists: {name}")
            if view.get(cat.TOPIC, sub.topic.project, sub.topic.id) is None:
                raise errors.NotFound(f"Topic not found: {sub.topic}")
            return cat.Changes(put=[entry]), None

        self._register(entry, change, "snapshots")
        return snapshot

    def get_snapshot(self, name: SnapshotName) -> Snapshot:
        entry = self._view(True).get(cat.SNAPSHOT, name.project, name.id)
        if entry is None:
            raise errors.NotFound(f"Snapshot does not exist: {name}")
        return Snapshot.from_entry(entry)

    def list_snapshots(
        self, project: str, *, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Snapshot], str]:
        validate_project(project)
        page, token = _page(self._view(True).of_kind(cat.SNAPSHOT, project), page_size, page_token)
        return [Snapshot.from_entry(e) for e in page], token

    def list_topic_snapshots(self, name: TopicName) -> list[str]:
        entry = self._topic_entry(name)
        return [
            SnapshotName(e.project, e.name).path
            for e in self._view(True).attached_to(entry.uid)
            if e.kind == cat.SNAPSHOT
        ]

    def update_snapshot(self, name: SnapshotName, labels: dict[str, str]) -> Snapshot:
        validate_labels(labels)

        def change(view: cat.View) -> tuple[cat.Changes, Snapshot]:
            entry = view.get(cat.SNAPSHOT, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Snapshot does not exist: {name}")
            snapshot = replace(Snapshot.from_entry(entry), labels=labels)
            return cat.Changes(put=[replace(entry, spec=snapshot.spec())]), snapshot

        return self.catalog.transact(change)

    def delete_snapshot(self, name: SnapshotName) -> None:
        def change(view: cat.View) -> tuple[cat.Changes, cat.Entry]:
            entry = view.get(cat.SNAPSHOT, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Snapshot does not exist: {name}")
            return cat.Changes(delete=[entry.key]), entry

        self._forget(self.catalog.transact(change))

    def seek_to_snapshot(self, name: SubscriptionName, snapshot: SnapshotName) -> None:
        """Restore the acknowledgment state a snapshot captured."""
        sub = self._subscription(name)
        entry = self._view(True).get(cat.SNAPSHOT, snapshot.project, snapshot.id)
        if entry is None:
            raise errors.NotFound(f"Snapshot does not exist: {snapshot}")
        if entry.topic_uid != sub.topic_uid:
            raise errors.FailedPrecondition(
                f"Snapshot {snapshot} is of another topic than subscription {name}"
            )
        table = self.lake.open(self.lake.snapshot_uri(entry.uid))
        saved = leases.LeaseState.from_arrow(table.to_pyarrow_table(), table.version())
        rows = list(saved.rows.values())
        self._submit(name, lambda: SeekRequest(saved.cursor.frontier, rows)).result()

    # -- state for jobs and operators ---------------------------------------------------

    def subscription_state(self, name: SubscriptionName) -> leases.LeaseState:
        """The subscription's cursor and outstanding rows, as stored now, with what this
        process's dispatcher held in memory committed first (a snapshot, a view). The
        lease changes another process holds (up to its lease flush window) are not
        in it."""
        sub = self._subscription(name)
        with self._lock:
            dispatcher = self._dispatchers.get(sub.uid)
        if dispatcher is not None and dispatcher.alive:
            flush = FlushRequest()
            with contextlib.suppress(errors.Unavailable):  # stopping: it commits anyway
                dispatcher.submit(flush)
                flush.future.result()
        table = self.lake.open(self.lake.leases_uri(sub.uid))
        return leases.LeaseState.from_arrow(table.to_pyarrow_table(), table.version())

    def topic_head(self, name: TopicName) -> int:
        """One past the newest offset published to the topic, as stored now."""
        return MessagesTable(self.lake, self._topic_entry(name).uid).head()

    def all_topics(self) -> list[Topic]:
        return [_topic(e) for e in self._view(True).of_kind(cat.TOPIC)]

    def all_subscriptions(self, *, fresh: bool = True) -> list[Subscription]:
        return [_subscription(e) for e in self._view(fresh).of_kind(cat.SUBSCRIPTION)]

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Commit queued publishes, answer waiting pulls, stop every thread."""
        with self._lock:
            self._closed = True
            publishers = list(self._publishers.values())
            dispatchers = list(self._dispatchers.values())
            self._publishers.clear()
            self._dispatchers.clear()
        for publisher in publishers:
            publisher.close()
        if self.intake is not None:
            self.intake.close()
        for dispatcher in dispatchers:
            dispatcher.stop()
        for dispatcher in dispatchers:
            dispatcher.join(constants.CLOSE_WAIT_S)
        # Background checkpoints of this lake's tables finish before close returns.
        settle_checkpoints(self.lake.root)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _taken(view: cat.View, entry: cat.Entry) -> bool:
    """Whether ``entry``'s name belongs to something else (not to ``entry`` itself)."""
    existing = view.get(*entry.key)
    return existing is not None and existing.uid != entry.uid


def _topic(entry: cat.Entry) -> Topic:
    return entry.parsed(_parse_topic)


def _subscription(entry: cat.Entry) -> Subscription:
    return entry.parsed(_parse_subscription)


def _parse_topic(entry: cat.Entry) -> Topic:
    return Topic.from_spec(
        TopicName(entry.project, entry.name), entry.uid, entry.created_us, entry.spec
    )


def _parse_subscription(entry: cat.Entry) -> Subscription:
    return Subscription.from_spec(
        SubscriptionName(entry.project, entry.name),
        entry.uid,
        entry.topic_uid or "",
        entry.created_us,
        entry.spec,
    )


def _copy(source: Future[T], target: Future[T]) -> None:
    """``source``'s outcome to ``target``, unless either was cancelled (withdrawn)."""
    if source.cancelled():
        target.cancel()
        return
    exc = source.exception()
    with contextlib.suppress(InvalidStateError):
        if exc is not None:
            target.set_exception(exc)
        else:
            target.set_result(source.result())


def _log_release_failure(name: SubscriptionName, done: Future[dict[str, str]]) -> None:
    exc = done.exception()
    if exc is not None:
        log.info("could not release deliveries of %s: %s", name, exc)
