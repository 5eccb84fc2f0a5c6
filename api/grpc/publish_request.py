"""A Publish request read into what a batch is made of, with as few protobuf
objects as the request allows; its answer written as protobuf's encoding directly
(``answer``).

The most common request holds a topic and messages of data alone. Its bytes are
walked here (``data_only``): the batch keeps the request's bytes and where each
message's data lies in them, and the publisher's thread copies the data into an
Arrow column in C (``batches.sliced``). Why by hand, when protobuf reads the same
request: upb copies the request into an arena of some 14 blocks, makes an object
and a ``bytes`` per message, and the batch then converts those ``bytes`` to Arrow
one by one. The walk and the batch's checks cost 0.10 µs a message when the
messages are alike in size (one comparison of their headers, ``_repeats``) and 0.5
when not, against 0.58 for upb's read and the checks (100 messages of about 1 KiB);
and the walk frees no upb arena, which matters too:
every 10,000 arena-block frees upb calls ``malloc_trim(0)``, which hands every free
page of every malloc arena back to the kernel, for the next allocations to fault
in again (measured: a trim every ~70,000 messages published, about 7,500 page
faults each). The walk accepts only that exact shape, every length checked; any
other request (attributes, an ordering key, any other field, a longer encoding,
anything malformed) is read by protobuf, as below.

Reading a message's map field that is empty (``msg.attributes`` of a message with
none) makes upb give that message a table of unset fields in an arena of its own,
freed with the request. ``door.check_known`` also serializes the whole request
twice, into fresh buffers.

A request of a topic and messages of data and perhaps an ordering key, nothing
else, has exactly the size those take in protobuf's encoding. Anything else in it
(attributes, a message id, a field the message type does not have, a value written
longer than it needs) adds bytes. So a request of that size is read without
looking at attributes and without the unknown-field check; any other takes the
general way, the check and then each message's attributes. protobuf has no call
that answers "is anything else set" without either of those costs, hence this
arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.pubsub_v1.types import pubsub as ps

from api.grpc.door import check_known, decoded
from api.grpc.wire import pb
from lakepubsub.publish import batches
from lakepubsub.publish.batches import Attributes, Batch

PUBLISH_REQUEST = pb(ps.PublishRequest)
# Any: types-protobuf gives Message no keyword arguments.
_PUBLISH_RESPONSE: Any = pb(ps.PublishResponse)

_Lists = tuple[list[bytes], list[Attributes], list[str | None]]
_Slices = tuple[bytes, Sequence[int], list[int]]
# Tags (field number << 3 | 2, length-delimited) of PublishRequest.topic,
# PublishRequest.messages and PubsubMessage.data.
_TOPIC, _MESSAGE, _DATA = 0x0A, 0x12, 0x0A
_LOW_BITS = 0x7F  # a varint's value bits in a byte; a byte up to it is the last
_MAX_VARINT_BYTES = 10


@dataclass(frozen=True, slots=True)
class PublishBody:
    """A Publish request's topic and its messages: the lists of their data,
    attributes and ordering keys, or, for messages of data alone, the request's
    bytes with where each one's data starts and its length."""

    topic: str
    lists: _Lists | None = None
    slices: _Slices | None = None

    def batch(self) -> Batch:
        """The messages as a batch, if they respect the publish limits (else
        INVALID_ARGUMENT, as ``batches.checked``)."""
        if self.slices is not None:
            return batches.sliced(*self.slices)
        assert self.lists is not None  # a body has one or the other
        return batches.checked(*self.lists)


def read(raw: bytes) -> PublishBody:
    """The request in ``raw``; INVALID_ARGUMENT when malformed or when it holds a field
    its message types do not have (as ``door.parse``)."""
    walked = data_only(raw)
    if walked is not None:
        return PublishBody(walked[0], slices=(raw, walked[1], walked[2]))
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
    return PublishBody(request.topic, lists=(data, attributes, [key or None for key in keys]))


def data_only(raw: bytes) -> tuple[str, Sequence[int], list[int]] | None:
    """The topic, and where each message's data starts in ``raw`` and its length, if
    ``raw`` is a PublishRequest of its topic then messages of non-empty data alone,
    each field written as protobuf writes it; None for any other bytes. The starts
    are a range when the messages are all alike in size (``_repeats``)."""
    # Locals, not globals, in the loop: 0.34 against 0.8 µs a message with the
    # lookups and a call per length.
    message, data, low, shift = _MESSAGE, _DATA, _LOW_BITS, 7
    starts: list[int] = []
    lengths: list[int] = []
    add_start, add_length = starts.append, lengths.append
    try:
        if raw[0] != _TOPIC:
            return None
        size, at = _varint(raw, 1)
        pos = at + size
        topic = raw[at:pos].decode()
        end, first = len(raw), pos
        while pos < end:
            # A message's tag and length, then its data's tag and length; a length of
            # one or two bytes (below 16 KiB) read here, a longer one by _varint.
            if raw[pos] != message:
                return None
            size = raw[pos + 1]
            if size <= low:
                at = pos + 2
            elif raw[pos + 2] <= low:
                size = (size & low) | raw[pos + 2] << shift
                at = pos + 3
            else:
                size, at = _varint(raw, pos + 1)
            pos = at + size
            if raw[at] != data or pos > end:
                return None
            n = raw[at + 1]
            if n <= low:
                at += 2
            elif raw[at + 2] <= low:
                n = (n & low) | raw[at + 2] << shift
                at += 3
            else:
                n, at = _varint(raw, at + 1)
            if at + n != pos or not n:
                return None
            if not starts:
                stride = pos - first
                count, rest = divmod(end - first, stride)
                if not rest and _repeats(raw, first, at - first, stride, count):
                    return topic, range(at, end, stride), [n] * count
            add_start(at)
            add_length(n)
    except (IndexError, UnicodeDecodeError):
        return None
    return (topic, starts, lengths) if starts else None


def _repeats(raw: bytes, first: int, header: int, stride: int, count: int) -> bool:
    """Whether each of the ``count`` messages from ``raw[first]`` on, ``stride`` bytes
    apart, starts with the same ``header`` bytes as the first: their tags and lengths
    are then the first's, and the walk would read each as it read the first (a
    few slices of ``count`` bytes, not a loop over the messages)."""
    end = first + stride * count
    return all(
        raw[first + i : end : stride] == raw[first + i : first + i + 1] * count
        for i in range(header)
    )


def _varint(raw: bytes, at: int) -> tuple[int, int]:
    """The varint at ``raw[at]`` and the index after it (IndexError past the end; a
    value too large for any length when it runs past ten bytes)."""
    value = shift = 0
    for i in range(at, at + _MAX_VARINT_BYTES):
        byte = raw[i]
        value |= (byte & _LOW_BITS) << shift
        if byte <= _LOW_BITS:
            return value, i + 1
        shift += 7
    return len(raw) + 1, at


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


def answer(ids: list[str]) -> bytes:
    """The PublishResponse holding ``ids``, encoded.

    Message ids are offsets in decimal, and a batch's ids nearly always have as many
    digits each. Those are encoded here with one join: each id is field 1's tag
    (``0x0a``) and its length in one byte, then its ASCII text. The bytes are
    protobuf's own (tested), at the same cost as building and serializing the
    message. The point is what this does not do: a protobuf message built and
    serialized takes two upb arenas, and upb trims every malloc arena after each
    10,000 arena-block frees (``malloc_trim(0)``: every free page goes back to the
    kernel, and the next allocations fault them in again). A Publish answered through
    protobuf was 2 of the ~4 arenas a request took. Other ids go through protobuf.
    """
    lengths = set(map(len, ids))
    if len(lengths) == 1:
        size = lengths.pop()
        if size <= _LOW_BITS:  # one byte of length
            tag = "\n" + chr(size)
            encoded = (tag + tag.join(ids)).encode()
            if len(encoded) == len(ids) * (2 + size):  # every id was ASCII
                return encoded
    return bytes(_PUBLISH_RESPONSE(message_ids=ids).SerializeToString())
