"""Snapshots: a subscription's acknowledgment state, kept to seek back to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lakepubsub.resources import catalog as cat
from lakepubsub.resources.names import SnapshotName, TopicName

# Pub/Sub keeps a snapshot for 7 days minus the age of its oldest unacked message.
SNAPSHOT_LIFETIME_US = 7 * 24 * 3600 * 1_000_000


@dataclass(frozen=True)
class Snapshot:
    """The captured state lives in ``{root}/snapshots/{uid}/leases``, in the lease-table
    schema: the cursor (frontier) and the outstanding messages at capture time."""

    name: SnapshotName
    topic: TopicName
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    expire_time_us: int = 0
    frontier: int = 0

    def spec(self) -> dict[str, Any]:
        return {
            "topic": self.topic.path,
            "labels": dict(self.labels),
            "expire_time_us": self.expire_time_us,
            "frontier": self.frontier,
        }

    @classmethod
    def from_entry(cls, entry: cat.Entry) -> Snapshot:
        spec = entry.spec
        return cls(
            name=SnapshotName(entry.project, entry.name),
            topic=TopicName.parse(spec["topic"]),
            uid=entry.uid,
            labels=dict(spec.get("labels") or {}),
            expire_time_us=int(spec.get("expire_time_us", 0)),
            frontier=int(spec.get("frontier", 0)),
        )
