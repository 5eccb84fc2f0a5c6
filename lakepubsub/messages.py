"""Messages as published and as received, and the limits a publish must respect."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakepubsub import constants, errors, schemas


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


@dataclass(frozen=True)
class Message:
    """A stored message."""

    offset: int
    message_id: str
    publish_time_us: int
    data: bytes
    attributes: Mapping[str, str]
    ordering_key: str
    size: int


@dataclass(frozen=True)
class ReceivedMessage:
    """One delivery: a message or an event, with the ack id that names this delivery."""

    ack_id: str
    delivery_attempt: int
    message: Message | None = None
    event: TruncationEvent | None = None


def validate_batch(messages: Sequence[PublishMessage]) -> int:
    """Check a publish request against Pub/Sub's limits; return its size in bytes."""
    if not messages:
        raise errors.InvalidArgument("The request contains no messages")
    if len(messages) > constants.MAX_MESSAGES_PER_PUBLISH:
        raise errors.InvalidArgument(
            f"The request contains {len(messages)} messages; the limit is "
            f"{constants.MAX_MESSAGES_PER_PUBLISH}"
        )
    total = 0
    for index, message in enumerate(messages):
        _validate_message(index, message)
        total += message.size
    if total > constants.MAX_PUBLISH_REQUEST_BYTES:
        raise errors.InvalidArgument(
            f"The request is {total} bytes; the limit is {constants.MAX_PUBLISH_REQUEST_BYTES}"
        )
    return total


def _validate_message(index: int, message: PublishMessage) -> None:
    where = f"messages[{index}]"
    if not message.data and not message.attributes:
        raise errors.InvalidArgument(f"{where}: a message needs non-empty data or an attribute")
    if len(message.attributes) > constants.MAX_ATTRIBUTES_PER_MESSAGE:
        raise errors.InvalidArgument(
            f"{where}: {len(message.attributes)} attributes; the limit is "
            f"{constants.MAX_ATTRIBUTES_PER_MESSAGE}"
        )
    for key, value in message.attributes.items():
        if not key:
            raise errors.InvalidArgument(f"{where}: attribute keys must not be empty")
        if key.startswith("goog"):
            raise errors.InvalidArgument(f"{where}: attribute key {key!r} is reserved ('goog')")
        if len(key.encode()) > constants.MAX_ATTRIBUTE_KEY_BYTES:
            raise errors.InvalidArgument(
                f"{where}: attribute key of {len(key.encode())} bytes; the limit is "
                f"{constants.MAX_ATTRIBUTE_KEY_BYTES}"
            )
        if len(value.encode()) > constants.MAX_ATTRIBUTE_VALUE_BYTES:
            raise errors.InvalidArgument(
                f"{where}: value of attribute {key!r} is {len(value.encode())} bytes; "
                f"the limit is {constants.MAX_ATTRIBUTE_VALUE_BYTES}"
            )
    if len(message.ordering_key.encode()) > constants.MAX_ORDERING_KEY_BYTES:
        raise errors.InvalidArgument(
            f"{where}: ordering key of {len(message.ordering_key.encode())} bytes; "
            f"the limit is {constants.MAX_ORDERING_KEY_BYTES}"
        )


def to_arrow(messages: Sequence[PublishMessage]) -> pa.Table:
    """The caller-side part of a messages-table batch: everything but offsets and time.

    Built in the publishing thread so the committer only numbers and concatenates.
    """
    return pa.table(
        {
            "data": pa.array([m.data for m in messages], pa.binary()),
            "attributes": pa.array(
                [list(m.attributes.items()) if m.attributes else None for m in messages],
                schemas.ATTRIBUTES,
            ),
            "ordering_key": pa.array([m.ordering_key or None for m in messages], pa.string()),
            "size": pa.array([m.size for m in messages], pa.int64()),
        }
    )


def from_arrow(table: pa.Table) -> list[Message]:
    """Messages-table rows as ``Message`` objects, in row order."""
    times_us = table.column("publish_time").cast(pa.int64()).to_pylist()
    columns = table.drop_columns(["publish_time"]).to_pydict()
    out = []
    for i in range(table.num_rows):
        attrs = columns["attributes"][i]
        out.append(
            Message(
                offset=columns["offset"][i],
                message_id=columns["message_id"][i],
                publish_time_us=times_us[i],
                data=columns["data"][i] or b"",
                attributes=dict(attrs) if attrs else {},
                ordering_key=columns["ordering_key"][i] or "",
                size=columns["size"][i],
            )
        )
    return out
