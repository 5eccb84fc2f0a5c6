"""The resources as the catalog holds them: lookups (fresh, or from the cached copy
on hot paths), lists, and the catalog-only changes of topics, subscriptions and
snapshots. Creating a resource's tables and stopping local work on a deleted one
is the engine's (``lakepubsub/engine.py``); the catalog commits are here."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lakepubsub import errors
from lakepubsub._lake import Lake
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.labels import validate_labels
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName, validate_project
from lakepubsub.resources.paging import page as _page
from lakepubsub.resources.snapshots import Snapshot
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import SchemaSettings, Topic

# Checks a topic's schema settings against the catalog (the schema registry's).
SchemaCheck = Callable[[cat.View, SchemaSettings | None], None]


def now_us() -> int:
    return time.time_ns() // 1000


class Directory:
    """Reads and changes the resources in the catalog."""

    def __init__(
        self,
        lake: Lake,
        catalog: cat.Catalog,
        *,
        staleness_s: Callable[[], float],
        check_schema: SchemaCheck,
    ) -> None:
        self._lake = lake
        self.catalog = catalog
        self._staleness_s = staleness_s
        self._check_schema = check_schema

    # -- lookups ---------------------------------------------------------------------------

    def view(self, fresh: bool) -> cat.View:
        return self.catalog.view(max_staleness_s=0.0 if fresh else self._staleness_s())

    def is_fresh(self) -> bool:
        return self.catalog.is_fresh(self._staleness_s())

    def topic_alive(self, topic_uid: str) -> bool:
        return any(e.uid == topic_uid for e in self.view(False).of_kind(cat.TOPIC))

    def topic_entry(self, name: TopicName, *, fresh: bool = True) -> cat.Entry:
        entry = self.view(fresh).get(cat.TOPIC, name.project, name.id)
        if entry is None and not fresh:
            entry = self.view(True).get(cat.TOPIC, name.project, name.id)
        if entry is None:
            raise errors.NotFound(f"Topic not found: {name}")
        return entry

    def subscription(self, name: SubscriptionName, *, fresh: bool = True) -> Subscription:
        entry = self.view(fresh).get(cat.SUBSCRIPTION, name.project, name.id)
        if entry is None and not fresh:
            entry = self.view(True).get(cat.SUBSCRIPTION, name.project, name.id)
        if entry is None:
            raise errors.NotFound(f"Subscription does not exist: {name}")
        return subscription_of(entry)

    def lookup_uid(self, name: SubscriptionName, uid: str) -> Subscription | None:
        """The subscription if it is still the incarnation ``uid`` (cached catalog)."""
        entry = self.view(False).get(cat.SUBSCRIPTION, name.project, name.id)
        return subscription_of(entry) if entry is not None and entry.uid == uid else None

    def snapshot_entry(self, name: SnapshotName) -> cat.Entry:
        entry = self.view(True).get(cat.SNAPSHOT, name.project, name.id)
        if entry is None:
            raise errors.NotFound(f"Snapshot does not exist: {name}")
        return entry

    def all_topics(self) -> list[Topic]:
        return [topic_of(e) for e in self.view(True).of_kind(cat.TOPIC)]

    def all_subscriptions(self, *, fresh: bool = True) -> list[Subscription]:
        return [subscription_of(e) for e in self.view(fresh).of_kind(cat.SUBSCRIPTION)]

    # -- lists -----------------------------------------------------------------------------

    def list_topics(self, project: str, page_size: int, page_token: str) -> tuple[list[Topic], str]:
        validate_project(project)
        page, token = _page(self.view(True).of_kind(cat.TOPIC, project), page_size, page_token)
        return [topic_of(e) for e in page], token

    def list_subscriptions(
        self, project: str, page_size: int, page_token: str
    ) -> tuple[list[Subscription], str]:
        validate_project(project)
        entries = self.view(True).of_kind(cat.SUBSCRIPTION, project)
        page, token = _page(entries, page_size, page_token)
        return [subscription_of(e) for e in page], token

    def list_snapshots(
        self, project: str, page_size: int, page_token: str
    ) -> tuple[list[Snapshot], str]:
        validate_project(project)
        page, token = _page(self.view(True).of_kind(cat.SNAPSHOT, project), page_size, page_token)
        return [Snapshot.from_entry(e) for e in page], token

    def list_topic_subscriptions(
        self, name: TopicName, page_size: int, page_token: str
    ) -> tuple[list[str], str]:
        entry = self.topic_entry(name)
        subs = [e for e in self.view(False).attached_to(entry.uid) if e.kind == cat.SUBSCRIPTION]
        page, token = _page(subs, page_size, page_token)
        return [SubscriptionName(e.project, e.name).path for e in page], token

    def list_topic_snapshots(self, name: TopicName) -> list[str]:
        entry = self.topic_entry(name)
        return [
            SnapshotName(e.project, e.name).path
            for e in self.view(True).attached_to(entry.uid)
            if e.kind == cat.SNAPSHOT
        ]

    # -- changes ---------------------------------------------------------------------------

    def register(
        self,
        entry: cat.Entry,
        tree: str,
        taken: str,
        check: Callable[[cat.View], None] = lambda view: None,
    ) -> None:
        """Commit a new catalog entry whose tables are written; remove them if it failed.
        ``taken`` is the AlreadyExists message; ``check`` raises what else forbids it.

        A commit can land while its answer is lost: the catalog's retry then sees
        the entry (``_taken`` lets that pass), and a failure that leaves the entry
        in a fresh read is a success. When the catalog cannot be read, the tables
        stay: an orphaned table only costs storage (the gc job sweeps it), a
        removed table under a live entry breaks the resource.
        """

        def change(view: cat.View) -> tuple[cat.Changes, None]:
            if _taken(view, entry):
                raise errors.AlreadyExists(taken)
            check(view)
            return cat.Changes(put=[entry]), None

        try:
            self.catalog.transact(change)
        except errors.LakePubSubError as failure:
            try:
                landed = self.catalog.view().get(*entry.key)
            except errors.LakePubSubError:
                raise failure from None
            if landed is not None and landed.uid == entry.uid:
                return
            self._lake.remove_tree(tree, entry.uid)
            raise

    def update_topic(self, name: TopicName, changes: dict[str, Any], mask: list[str]) -> Topic:
        def change(view: cat.View) -> tuple[cat.Changes, Topic]:
            entry = view.get(cat.TOPIC, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Topic not found: {name}")
            topic = topic_of(entry).updated(changes, mask)
            if any(f.startswith("schema_settings") for f in mask):
                self._check_schema(view, topic.schema_settings)
            new = replace(entry, spec=topic.spec(), updated_us=now_us())
            return cat.Changes(put=[new]), topic

        return self.catalog.transact(change)

    def delete_topic(self, name: TopicName) -> list[cat.Entry]:
        """Delete a topic's entry with its subscriptions' and snapshots'; returns them."""

        def change(view: cat.View) -> tuple[cat.Changes, list[cat.Entry]]:
            entry = view.get(cat.TOPIC, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Topic not found: {name}")
            doomed = [entry, *view.attached_to(entry.uid)]
            return cat.Changes(delete=[e.key for e in doomed]), doomed

        return self.catalog.transact(change)

    def update_subscription(
        self, name: SubscriptionName, changes: dict[str, Any], mask: list[str]
    ) -> Subscription:
        def change(view: cat.View) -> tuple[cat.Changes, Subscription]:
            entry = view.get(cat.SUBSCRIPTION, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Subscription does not exist: {name}")
            sub = subscription_of(entry).updated(changes, mask)
            if sub.dead_letter_policy is not None:
                dlt = sub.dead_letter_policy.dead_letter_topic
                if view.get(cat.TOPIC, dlt.project, dlt.id) is None:
                    raise errors.NotFound(f"Topic not found: {dlt}")
            return cat.Changes(put=[replace(entry, spec=sub.spec(), updated_us=now_us())]), sub

        return self.catalog.transact(change)

    def delete_subscription(self, name: SubscriptionName) -> cat.Entry:
        return self._delete(
            cat.SUBSCRIPTION, name.project, name.id, f"Subscription does not exist: {name}"
        )

    def mark_detached(self, name: SubscriptionName, uid: str) -> None:
        def change(view: cat.View) -> tuple[cat.Changes, None]:
            entry = view.get(cat.SUBSCRIPTION, name.project, name.id)
            if entry is None or entry.uid != uid:
                raise errors.NotFound(f"Subscription does not exist: {name}")
            detached = replace(subscription_of(entry), detached=True)
            return cat.Changes(put=[replace(entry, spec=detached.spec())]), None

        self.catalog.transact(change)

    def update_snapshot(self, name: SnapshotName, labels: dict[str, str]) -> Snapshot:
        validate_labels(labels)

        def change(view: cat.View) -> tuple[cat.Changes, Snapshot]:
            entry = view.get(cat.SNAPSHOT, name.project, name.id)
            if entry is None:
                raise errors.NotFound(f"Snapshot does not exist: {name}")
            snapshot = replace(Snapshot.from_entry(entry), labels=labels)
            return cat.Changes(put=[replace(entry, spec=snapshot.spec())]), snapshot

        return self.catalog.transact(change)

    def delete_snapshot(self, name: SnapshotName) -> cat.Entry:
        return self._delete(cat.SNAPSHOT, name.project, name.id, f"Snapshot does not exist: {name}")

    def _delete(self, kind: str, project: str, name: str, missing: str) -> cat.Entry:
        """Delete one entry; NotFound with ``missing`` if there is none."""

        def change(view: cat.View) -> tuple[cat.Changes, cat.Entry]:
            entry = view.get(kind, project, name)
            if entry is None:
                raise errors.NotFound(missing)
            return cat.Changes(delete=[entry.key]), entry

        return self.catalog.transact(change)


def _taken(view: cat.View, entry: cat.Entry) -> bool:
    """Whether ``entry``'s name belongs to something else (not to ``entry`` itself)."""
    existing = view.get(*entry.key)
    return existing is not None and existing.uid != entry.uid


def topic_of(entry: cat.Entry) -> Topic:
    return entry.parsed(_parse_topic)


def subscription_of(entry: cat.Entry) -> Subscription:
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
