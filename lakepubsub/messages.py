"""Messages as published and as received, and the limits a publish must respect."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, overload

import numpy as np
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


# Runs at least this long sum their sizes with numpy (its fixed cost is about 20 µs).
NUMPY_FROM = 256


def message_ack_ids(tag: str, offsets: Iterable[int], deliveries: Iterable[int]) -> list[str]:
    """The ack ids of messages delivered under a subscription's ``tag``: ``{tag}-m
    {offset}-{delivery id}`` (``delivery.ackids.AckId``)."""
    return [f"{tag}-m{o}-{d}" for o, d in zip(offsets, deliveries, strict=True)]


class Run:
    """New messages delivered together on their first attempt, kept in their stored
    columns (the messages table's schema, as ``MessagesTable.read_range`` returns
    them), with their ack ids in row order: given as text, or made from the
    subscription's tag and the run's delivery ids (a dispatcher numbers a run's
    deliveries consecutively), as text only when asked for (``ack_ids``) and as an
    Arrow column in bulk (``ack_id_column``). The gRPC door routes acks by the
    numbers (``api/grpc/streams.py``). A door that can encode columns in bulk (the
    gRPC door, ``api/grpc/encode_columns.py``) never builds a ``Message`` for them;
    anything else sees ``ReceivedMessage`` objects built on demand."""

    __slots__ = ("_ack_ids", "deliveries", "table", "tag")

    def __init__(
        self,
        table: pa.Table,
        ack_ids: list[str] | None = None,
        deliveries: range | None = None,
        tag: str = "",
    ) -> None:
        if ack_ids is None and (deliveries is None or not tag):
            raise ValueError("a run needs its ack ids, or its tag and delivery ids")
        self.table = table
        self._ack_ids = ack_ids
        self.deliveries = deliveries
        self.tag = tag

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def __repr__(self) -> str:
        return f"Run({self.table.num_rows} rows, {self.tag!r}, {self.deliveries!r})"

    @property
    def ack_ids(self) -> list[str]:
        if self._ack_ids is None:
            assert self.deliveries is not None
            offsets = self.table.column("offset").to_pylist()
            self._ack_ids = message_ack_ids(self.tag, offsets, self.deliveries)
        return self._ack_ids

    def ack_id_column(self) -> pa.StringArray:
        """The ack ids as an Arrow column: made from the numbers in bulk when the run
        has them, and their text is not made yet."""
        if self._ack_ids is None and self.deliveries is not None and len(self):
            offsets = self.table.column("offset").to_numpy()
            column = _ack_id_column(self.tag, offsets, self.deliveries)
            if column is not None:
                return column
        return pa.array(self.ack_ids, pa.string())

    def slice(self, start: int, stop: int) -> Run:
        return Run(
            self.table.slice(start, stop - start),
            None if self._ack_ids is None else self._ack_ids[start:stop],
            None if self.deliveries is None else self.deliveries[start:stop],
            self.tag,
        )

    def received(self) -> list[ReceivedMessage]:
        new = tuple.__new__
        return [
            new(ReceivedMessage, (ack_id, 1, message, None))
            for ack_id, message in zip(self.ack_ids, from_arrow(self.table), strict=True)
        ]

    def size(self) -> int:
        """Bytes as Pub/Sub counts them (the ``size`` column)."""
        # No Arrow compute call (tens of µs even for the one message of a latency-bound
        # pull): Python's sum of the column, or numpy's of a long run.
        column = self.table.column("size")
        if len(column) < NUMPY_FROM:
            return sum(column.to_pylist())
        return int(column.to_numpy().sum())


# Every number below 10,000 as its four digits (zero-padded): ``_digits`` writes
# numbers four digits at a time.
_FOUR_DIGITS = np.frombuffer(
    "".join(f"{n:04d}" for n in range(10_000)).encode(), dtype=np.uint8
).reshape(10_000, 4)


def _ack_id_column(tag: str, offsets: np.ndarray, deliveries: range) -> pa.StringArray | None:
    """``message_ack_ids`` as an Arrow column, every id the same length: each row of
    a byte matrix is ``{tag}-m``, the offset's digits, a dash, the delivery id's
    digits, filled a column of digits at a time. None when the offsets (ascending)
    or the delivery ids do not all have as many digits (a run that crosses a power
    of ten): the caller makes them as text then.

    Written by hand because an f-string per delivery (with Arrow's copy of the list)
    was about 0.2 µs of every message of a StreamingPull drain, and Arrow's own cast
    of numbers to text and element-wise join about 0.12; this is about 0.04."""
    first, last = int(offsets[0]), int(offsets[-1])
    offset_width, delivery_width = len(str(first)), len(str(deliveries[0]))
    if (
        min(first, deliveries[0]) < 0
        or len(str(last)) != offset_width
        or len(str(deliveries[-1])) != delivery_width
    ):
        return None
    prefix = f"{tag}-m".encode()
    width = len(prefix) + offset_width + 1 + delivery_width
    rows = np.empty((len(offsets), width), dtype=np.uint8)
    rows[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    at = len(prefix) + offset_width
    _digits(offsets, rows[:, len(prefix) : at])
    rows[:, at] = ord("-")
    numbers = np.arange(deliveries.start, deliveries.stop, dtype=np.int64)
    _digits(numbers, rows[:, at + 1 :])
    ends = np.arange(0, (len(offsets) + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(len(offsets), pa.py_buffer(ends), pa.py_buffer(rows))


def _digits(numbers: np.ndarray, out: np.ndarray) -> None:
    """Write ``numbers`` (each as many digits as ``out`` has columns) into ``out``."""
    width = out.shape[1]
    rest = numbers
    while width > 0:
        rest, low = np.divmod(rest, 10_000)
        take = min(4, width)
        out[:, width - take : width] = _FOUR_DIGITS[low, 4 - take :]
        width -= take


Part = list[ReceivedMessage] | Run


class Received(Sequence[ReceivedMessage]):
    """The deliveries of one pull's answer, in order: ``ReceivedMessage`` objects and
    ``Run``s of new messages still in their stored columns. It reads as a sequence
    of ``ReceivedMessage`` (a run's are built when first looked at, and kept);
    ``parts`` gives the runs to code that handles them whole.

    Written by hand because building a ``Message`` and a ``ReceivedMessage`` for every
    message of a StreamingPull drain, only for the door to take them apart again
    into protobuf's wire format, was about a fifth of the server's CPU per message."""

    __slots__ = ("_length", "_parts")

    def __init__(self, parts: Iterable[Part] = ()) -> None:
        self._parts: list[Part] = [p for p in parts if _part_len(p)]
        self._length = sum(_part_len(p) for p in self._parts)

    @classmethod
    def of(cls, items: Sequence[ReceivedMessage]) -> Received:
        """``items`` as a ``Received``: itself if it is one (its runs kept)."""
        return items if isinstance(items, Received) else cls([list(items)])

    @property
    def parts(self) -> list[Part]:
        return list(self._parts)

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[ReceivedMessage]:
        for at in range(len(self._parts)):
            yield from self._built(at)

    def _built(self, at: int) -> list[ReceivedMessage]:
        """Part ``at`` as ``ReceivedMessage`` objects (a run's are built once, and kept)."""
        part = self._parts[at]
        if isinstance(part, Run):
            part = self._parts[at] = part.received()
        return part

    @overload
    def __getitem__(self, index: int) -> ReceivedMessage: ...

    @overload
    def __getitem__(self, index: slice) -> Received: ...

    def __getitem__(self, index: int | slice) -> ReceivedMessage | Received:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                return Received([list(self)[index]])
            return Received(self._slice(start, stop))
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("Received index out of range")
        for at, part in enumerate(self._parts):
            size = _part_len(part)
            if index < size:
                return self._built(at)[index]
            index -= size
        raise IndexError("Received index out of range")  # pragma: no cover (checked above)

    def _slice(self, start: int, stop: int) -> list[Part]:
        out: list[Part] = []
        at = 0
        for part in self._parts:
            size = _part_len(part)
            lo, hi = max(start - at, 0), min(stop - at, size)
            if lo < hi:
                if isinstance(part, Run):
                    out.append(part.slice(lo, hi))
                else:
                    out.append(part[lo:hi])
            at += size
        return out

    def __add__(self, other: Sequence[ReceivedMessage]) -> Received:
        return Received([*self._parts, *Received.of(other).parts])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Received | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Received({list(self)!r})"

    def ack_ids(self) -> list[str]:
        """Every delivery's ack id, in order, without building a run's messages."""
        out: list[str] = []
        for part in self._parts:
            out += part.ack_ids if isinstance(part, Run) else [r.ack_id for r in part]
        return out

    def size(self) -> int:
        """The messages' bytes as Pub/Sub counts them (events count none)."""
        return sum(
            part.size()
            if isinstance(part, Run)
            else sum(r.message.size for r in part if r.message is not None)
            for part in self._parts
        )


def _part_len(part: Part) -> int:
    return len(part)
