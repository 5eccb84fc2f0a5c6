"""A Publish request read into the lists a batch is made of (data, attributes,
ordering keys), with as few protobuf objects as the request allows.

Reading a message's map field that is empty (``msg.attributes`` of a message with
none) makes upb, protobuf's Python runtime, give that message a table of unset
fields in an arena of its own, freed with the request. And every 10,000 arena
frees upb calls ``malloc_trim(0)``, which hands every free page of every malloc
arena back to the kernel, for the next allocations to fault in again. At 100
messages a request that was a trim every 86 requests in the gRPC bench's batched
publish (Google's Go client, 8 publishers): about a page fault per message
published, most of them in the door's own copies. ``door.check_known`` also
serializes the whole request twice, into fresh buffers.

The common request has a topic and messages holding data and perhaps an ordering
key, nothing else; its size is then exactly what those take in protobuf's
encoding. Anything else in it (attributes, a message id, a field the message type
does not have, a value written longer than it needs) adds bytes. So a request of
that size is read without looking at attributes and without the unknown-field
check; any other takes the general way, the check and then each message's
attributes. protobuf has no call that answers "is anything else set" without
either of those costs, hence this arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.pubsub_v1.types import pubsub as ps

from api.grpc.door import check_known, decoded
from api.grpc.wire import pb
from lakepubsub.publish.batches import Attributes

PUBLISH_REQUEST = pb(ps.PublishRequest)


@dataclass(frozen=True, slots=True)
class PublishBody:
    """A Publish request's topic and its messages' columns."""

    topic: str
    data: list[bytes]
    attributes: list[Attributes]
    ordering_keys: list[str | None]


def read(raw: bytes) -> PublishBody:
    """The request in ``raw``; INVALID_ARGUMENT when malformed or when it holds a field
    its message types do not have (as ``door.parse``)."""
    request: Any = decoded(PUBLISH_REQUEST, raw)
    # A list first: iterating the repeated field makes a wrapper per message each time.
    messages = list(request.messages)
    data = [msg.data for msg in messages]
    keys = [msg.ordering_key for msg in messages]
    attributes: list[Attributes]
    if len(raw) == plain_size(request.topic, data, keys):
        attributes = [None] * len(messages)
    else:
        check_known(request, raw)
        # The truth test first: items() of a protobuf map goes through Python's
        # Mapping views, 0.5 us a message even when it is empty.
        attributes = [list(msg.attributes.items()) if msg.attributes else None for msg in messages]
    return PublishBody(request.topic, data, attributes, [key or None for key in keys])


def plain_size(topic: str, data: Sequence[bytes], keys: Sequence[str]) -> int:
    """The bytes of a PublishRequest holding ``topic`` and one message per item of
    ``data`` and ``keys`` with those fields alone, as protobuf encodes it (every
    field's tag is one byte: the numbers are below 16)."""
    size = _field(len(topic.encode())) if topic else 0
    for blob, key in zip(data, keys, strict=True):
        n = len(blob)
        message = _field(n) if n else 0
        if key:
            message += _field(len(key.encode()))
        size += _field(message)
    return size


def _field(n: int) -> int:
    """A length-delimited field of ``n`` bytes: its tag, its length's varint, the bytes."""
    return 1 + ((n.bit_length() + 6) // 7 or 1) + n
