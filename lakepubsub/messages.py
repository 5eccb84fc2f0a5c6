"""Messages as published and as received, and the limits a publish must respect."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pyarrow as pa

from lakepubsub.constants import US_PER_S

# The attribute that marks a delivered truncation event, for clients that know only
# Pub/Sub (every door and push deliver an event as a message without data).
EVENT_ATTRIBUTE = "lakepubsub.event"


@dataclass(frozen=True)
class PublishMessage:
    """One message to publish: data and/or attributes, and an optional ordering key."""

    data: bytes = b""
    attributes: Mapping[str, str] = field(default_factory=dict)
    ordering_key: str = ""

    @property
    def size(self) -> int:
        """Bytes as Pub/Sub counts them: data, attribute keys and values, ordering key."""
        attrs = sum(len(k.encode()) + len(v.encode()) for k, v in self.attributes.items())
        return len(self.data) + attrs + len(self.ordering_key.encode())


@dataclass(frozen=True)
class Pull:
    """A checked pull, as the dispatcher that serves it takes it (here or at the
    topic's owner): at most ``max_messages``, waiting up to ``wait_s`` for them,
    leased for ``ack_deadline_s`` (None: the subscription's ack deadline)."""

    max_messages: int
    wait_s: float
    ack_deadline_s: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Pull:
        return cls(int(doc["max_messages"]), float(doc["wait_s"]), doc["ack_deadline_s"])


@dataclass(frozen=True)
class TruncationEvent:
    """Seed 000's PubsubEvent.truncated: messages were dropped from the subscription."""

    first_offset: int
    end_offset: int
    reason: str
    time_us: int

    def to_json(self) -> dict[str, Any]:
        return {
            "truncated": True,
            "firstOffset": self.first_offset,
            "endOffset": self.end_offset,
            "reason": self.reason,
            "timeUs": self.time_us,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TruncationEvent:
        return cls(
            first_offset=int(doc["firstOffset"]),
            end_offset=int(doc["endOffset"]),
            reason=str(doc["reason"]),
            time_us=int(doc["timeUs"]),
        )

    def attributes(self) -> dict[str, str]:
        """How the event looks to a client that knows only Pub/Sub: the attributes of
        a message without data that say what happened."""
        return {
            EVENT_ATTRIBUTE: "truncated",
            "lakepubsub.first_offset": str(self.first_offset),
            "lakepubsub.end_offset": str(self.end_offset),
            "lakepubsub.reason": self.reason,
        }


@functools.lru_cache(maxsize=4096)
def format_time_us(us: int) -> str:
    """RFC 3339 UTC with microseconds, as publish times appear in every door's answers
    and push requests. Cached: every message of one publish commit has the same time."""
    stamp = datetime.fromtimestamp(us // US_PER_S, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{us % US_PER_S:06d}Z"


class Message(NamedTuple):
    """A stored message. This and ``ReceivedMessage`` are named tuples, not frozen
    dataclasses: every delivery builds one of each, and tuples build faster."""

    offset: int
    message_id: str
    publish_time_us: int
    data: bytes
    attributes: Mapping[str, str]
    ordering_key: str
    size: int


class ReceivedMessage(NamedTuple):
    """One delivery: a message or an event, with the ack id that names this delivery."""

    ack_id: str
    delivery_attempt: int
    message: Message | None = None
    event: TruncationEvent | None = None


def from_arrow(table: pa.Table) -> list[Message]:
    """Messages-table rows as ``Message`` objects, in row order."""
    if not table.num_rows:
        return []
    new = tuple.__new__
    return [
        new(
            Message,
            (offset, message_id, us, data or b"", dict(attrs) if attrs else {}, key or "", size),
        )
        for offset, message_id, us, data, attrs, key, size in zip(
            table.column("offset").to_pylist(),
            table.column("message_id").to_pylist(),
            # int64 microseconds through numpy, a view of the same buffer: pyarrow's
            # cast costs about 8 µs a call, and a dispatcher's cycle makes one.
            table.column("publish_time").to_numpy().view("int64").tolist(),
            table.column("data").to_pylist(),
            table.column("attributes").to_pylist(),
            table.column("ordering_key").to_pylist(),
            table.column("size").to_pylist(),
            strict=True,
        )
    ]
