"""This process's publishers: one group committer per topic it publishes to, made
on first use. Each commits here, or hands its groups to the topic's owner
(``forward``; ``here``: whether this process owns the topic); after a commit
here, ``on_commit`` wakes the topic's waiting pulls."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

import pyarrow as pa
import pyarrow.compute as pc

from lakepubsub._lake import Lake
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.batches import Batch, build
from lakepubsub.publish.intake import Intake
from lakepubsub.publish.publisher import TopicPublisher
from lakepubsub.settings import Settings
from lakepubsub.workers import Workers


class Publishers:
    """The topics' group committers in this process. Thread-safe."""

    def __init__(
        self,
        lake: Lake,
        settings: Settings,
        intake: Intake | None,
        *,
        on_commit: Callable[[str, int], None],
        forward: Callable[[str, pa.Table], Future[int] | None],
        here: Callable[[str], bool] = lambda topic_uid: True,
    ) -> None:
        self._lake = lake
        self._settings = settings
        self._intake = intake
        self._on_commit = on_commit
        self._forward = forward
        self._here = here
        self._publishers: Workers[TopicPublisher] = Workers()

    def submit(self, topic_uid: str, batch: Batch) -> Future[list[str]]:
        """Queue a checked batch; the future gives its message ids once committed."""
        return self._publisher(topic_uid).submit(batch)

    def submit_forwarded(self, topic_uid: str, columns: pa.Table) -> Future[list[str]]:
        """Commit another process's checked group to the topic (this process owns it)."""
        size = int(pc.sum(columns["size"]).as_py() or 0)
        return self._publisher(topic_uid).submit(Batch(columns, size), forwarded=True)

    def publish_unchecked(self, topic_uid: str, messages: list[PublishMessage]) -> None:
        """Publish system-made messages (dead letters): no client limits, wait for the commit."""
        batch = build(
            [m.data for m in messages],
            [list(m.attributes.items()) or None for m in messages],
            [m.ordering_key or None for m in messages],
        )
        self._publisher(topic_uid).submit(batch).result()

    def _publisher(self, topic_uid: str) -> TopicPublisher:
        return self._publishers.get(
            topic_uid,
            lambda: TopicPublisher(
                self._lake,
                topic_uid,
                self._settings,
                on_commit=lambda batch, version: self._on_commit(topic_uid, version),
                forward=lambda columns: self._forward(topic_uid, columns),
                intake=self._intake,
                here=lambda: self._here(topic_uid),
            ),
        )

    def forget(self, topic_uid: str) -> None:
        """The topic was deleted: its publisher stops."""
        publisher = self._publishers.remove(topic_uid)
        if publisher is not None:
            publisher.close()

    def shut(self) -> list[TopicPublisher]:
        """Take no more publishes; the publishers to close."""
        return self._publishers.shut()
