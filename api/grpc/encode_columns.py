"""Deliveries written in protobuf's wire format straight from the messages table's
columns, for a whole ``Run`` (``lakepubsub.messages``) at once.

``encode.received_messages`` writes one delivery at a time from Python objects;
this writes the same bytes (``tests/grpc/test_encode_columns.py`` compares them)
with one pass of Arrow's compute kernels and numpy per column, so a StreamingPull
drain builds no Python object per message on its way to the wire. Lengths are
columns of integers, their varints columns of bytes, and each delivery is the
element-wise join of its parts; the response is the joined column's data buffer.
A map's entries are encoded as one column and a row's attributes are the slice of
those bytes its map offsets bound (no copy per row). Written by hand because
neither protobuf nor Arrow encodes a column of records as protobuf messages.

The fields are those of ``encode.received_messages``: ``ReceivedMessage`` is
``ack_id = 1``, ``message = 2``, ``delivery_attempt = 3``; ``PubsubMessage`` is
``data = 1``, ``attributes = 2`` (entries of ``key = 1``, ``value = 2``),
``message_id = 3``, ``publish_time = 4``, ``ordering_key = 5``. Fields at their
default are left out, as protobuf does: empty data, no attributes, no ordering key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from api.grpc import encode
from api.grpc.encode import timestamp, varint
from lakepubsub.messages import Part, Received, ReceivedMessage, Run

_BINARY = pa.binary()
Ints = npt.NDArray[np.int64]
Offsets = npt.NDArray[np.int32]
Bytes = bytes | memoryview
Cut = Callable[[int, int], Bytes]
# A varint holds 7 bits a byte; lengths here stay far below 7 * _WIDEST bits.
_WIDEST = 5
_SHIFTS = np.arange(_WIDEST, dtype=np.int64) * 7
# The smallest value of each varint width past one byte.
_LIMITS = np.left_shift(1, _SHIFTS[1:])


# Runs shorter than this go one delivery at a time (``encode.received_messages``): a
# run's encoding costs about 0.45 ms before its first row (some 60 numpy and Arrow
# calls), and one delivery at a time about 1.6 µs each; they break even near 400.
BULK_FROM = 512


def _const(value: bytes) -> pa.Scalar:
    return pa.scalar(value, _BINARY)


_EMPTY = _const(b"")
_ITEM = _const(b"\x0a")  # received_messages = 1 / ack_id = 1 / data = 1 / key = 1
_MESSAGE = _const(b"\x12")  # message = 2 / attributes = 2 / value = 2
_MESSAGE_ID = _const(b"\x1a")


def _widths(values: Ints) -> Ints:
    """Bytes of each value's varint."""
    return np.searchsorted(_LIMITS, values, side="right") + 1


def _varints(values: Ints, present: npt.NDArray[np.bool_] | None = None) -> pa.Array:
    """Each value as a varint (non-negative, below 2**35); none where not ``present``."""
    n = len(values)
    widths = _widths(values)
    if present is not None:
        widths = np.where(present, widths, 0)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(widths, out=offsets[1:])
    low, top = (int(widths.min()), int(widths.max())) if n else (0, 0)
    # byte k of every value: its k-th group of 7 bits, high bit set if more follow
    groups = [
        (((values >> int(shift)) & 0x7F) | ((widths > k + 1) << 7)).astype(np.uint8)
        for k, shift in enumerate(_SHIFTS[:top])
    ]
    if low == top:  # one width (the usual case): the bytes interleave
        data = np.stack(groups, axis=1).ravel() if top else np.zeros(0, np.uint8)
    else:
        data = np.empty(int(offsets[-1]), np.uint8)
        starts = offsets[:-1]
        for k, group in enumerate(groups):
            has = widths > k
            data[starts[has] + k] = group[has]
    return pa.Array.from_buffers(_BINARY, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _offsets(column: pa.Array) -> npt.NDArray[np.int32]:
    """A binary or string column's value offsets (its rows' bounds in its data)."""
    raw = column.buffers()[1]
    return np.frombuffer(raw, np.int32, len(column) + 1, column.offset * 4)


def _lengths(column: pa.Array) -> Ints:
    """Each row's bytes (a column without nulls, or whose nulls are empty)."""
    return np.diff(_offsets(column)).astype(np.int64)


def _where(present: npt.NDArray[np.bool_], value: bytes) -> pa.Array:
    """A column of ``value`` where ``present``, else empty."""
    widths = np.where(present, len(value), 0).astype(np.int32)
    offsets = np.zeros(len(present) + 1, np.int32)
    np.cumsum(widths, out=offsets[1:])
    data = np.tile(np.frombuffer(value, np.uint8), int(np.count_nonzero(present)))
    return pa.Array.from_buffers(
        _BINARY, len(present), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _filled(column: pa.Array, empty: str | bytes) -> pa.Array:
    return column.fill_null(empty) if column.null_count else column


def _attributes(column: pa.Array) -> tuple[pa.Array | pa.Scalar, Ints]:
    """``attributes = 2`` of every row (a row's map entries) and each row's length."""
    n = len(column)
    if not n or column.null_count == n:
        return _EMPTY, np.zeros(n, np.int64)
    map_offsets = np.asarray(column.offsets.to_numpy(), dtype=np.int64)
    if column.null_count and np.diff(map_offsets)[~column.is_valid().to_numpy(False)].any():
        # a null row that spans entries (Arrow allows it): rebuilt without them
        column = pa.array(column.to_pylist(), column.type)
        map_offsets = np.asarray(column.offsets.to_numpy(), dtype=np.int64)
    first, last = int(map_offsets[0]), int(map_offsets[-1])
    if first == last:
        return _EMPTY, np.zeros(n, np.int64)
    entries = column.values.slice(first, last - first)  # these rows' entries, in order
    keys, values = entries.flatten()  # children with the slice applied (``field`` is not)
    values = _filled(values, "")
    key_lengths, value_lengths = _lengths(keys), _lengths(values)
    entry_lengths = 2 + _widths(key_lengths) + key_lengths + _widths(value_lengths) + value_lengths
    encoded = pc.binary_join_element_wise(
        _MESSAGE, _varints(entry_lengths),
        _ITEM, _varints(key_lengths), keys.cast(_BINARY),
        _MESSAGE, _varints(value_lengths), values.cast(_BINARY),
        _EMPTY,
    )  # fmt: skip
    # Every row's attributes are its entries' bytes, which lie together: the rows'
    # offsets are the entries' offsets at the map offsets.
    entry_offsets = np.frombuffer(
        encoded.buffers()[1], np.int32, encoded.offset + len(encoded) + 1
    )[encoded.offset :]
    row_offsets = entry_offsets[map_offsets - map_offsets[0]]
    rows = pa.Array.from_buffers(
        _BINARY, n, [None, pa.py_buffer(np.ascontiguousarray(row_offsets)), encoded.buffers()[2]]
    )
    return rows, np.diff(row_offsets).astype(np.int64)


def _stamps(column: pa.Array) -> tuple[pa.Array, Ints]:
    """``publish_time = 4`` of every row and its length: one encoding per run of
    equal times (every message of a publish commit has the same)."""
    micros = np.frombuffer(column.buffers()[1], np.int64, len(column), column.offset * 8)
    starts = np.flatnonzero(np.diff(micros)) + 1
    encoded = [timestamp(int(us)) for us in micros[np.concatenate(([0], starts))]]
    repeats = np.diff(np.concatenate(([0], starts, [len(micros)])))
    which = np.repeat(np.arange(len(encoded)), repeats)
    sizes = np.array([len(e) for e in encoded], np.int64)
    return pa.array(encoded, _BINARY).take(pa.array(which)), sizes[which]


def run_pieces(run: Run, *, attempts: bool) -> list[tuple[memoryview, Offsets]]:
    """A run's deliveries as ``received_messages`` entries (``encode.received_messages``
    for a run: every delivery is the message's first attempt), encoded at once: for
    each chunk of the run's ``data`` column in turn, its deliveries' bytes end to end
    and where each starts (one more offset than deliveries, from 0).

    Every other column is joined into one chunk first (a few bytes a row), but not
    the payloads: the final join reads them where they lie, chunk by chunk. A run
    handed out by the dispatcher is cut from several files; joining its payloads
    first copied them all once more, and encoding each chunk on its own paid the
    fixed cost of some 60 numpy and Arrow calls once a chunk (``BULK_FROM``)."""
    table = run.table
    n = table.num_rows
    if not n:
        return []
    payloads = table.column("data")
    if payloads.null_count:
        payloads = payloads.fill_null(b"")
    chunks = [c for c in payloads.chunks if len(c)]
    data: pa.Array | pa.ChunkedArray = chunks[0] if len(chunks) == 1 else payloads
    data_len = np.concatenate([_lengths(c) for c in chunks])
    rest = table.drop_columns(["data"]).combine_chunks()
    acks = pa.array(run.ack_ids, pa.string())
    ids = rest.column("message_id").chunk(0)
    keys = _filled(rest.column("ordering_key").chunk(0), "")
    attributes, attributes_len = _attributes(rest.column("attributes").chunk(0))
    stamps, stamps_len = _stamps(rest.column("publish_time").chunk(0))
    ack_len, id_len, key_len = (_lengths(c) for c in (acks, ids, keys))
    has_data, has_key = data_len > 0, key_len > 0
    body_len = (
        np.where(has_data, 1 + _widths(data_len) + data_len, 0)
        + attributes_len
        + 1 + _widths(id_len) + id_len
        + stamps_len
        + np.where(has_key, 1 + _widths(key_len) + key_len, 0)
    )  # fmt: skip
    extra = b"\x18" + varint(1) if attempts else b""
    item_len = 1 + _widths(ack_len) + ack_len + 1 + _widths(body_len) + body_len + len(extra)
    joined = pc.binary_join_element_wise(
        _ITEM, _varints(item_len),
        _ITEM, _varints(ack_len), acks.cast(_BINARY),
        _MESSAGE, _varints(body_len),
        _where(has_data, b"\x0a"), _varints(data_len, has_data), data,
        attributes,
        _MESSAGE_ID, _varints(id_len), ids.cast(_BINARY),
        stamps,
        _where(has_key, b"\x2a"), _varints(key_len, has_key), keys.cast(_BINARY),
        _const(extra),
        _EMPTY,
    )  # fmt: skip
    pieces = []
    for chunk in joined.chunks if isinstance(joined, pa.ChunkedArray) else [joined]:
        if not len(chunk):
            continue
        offsets = _offsets(chunk)
        start, end = int(offsets[0]), int(offsets[-1])
        pieces.append((memoryview(chunk.buffers()[2])[start:end], offsets - offsets[0]))
    return pieces


def run_messages(run: Run, *, attempts: bool) -> bytes:
    """``run_pieces``'s bytes."""
    return b"".join(piece for piece, _ in run_pieces(run, attempts=attempts))


def _batches(parts: list[Part]) -> Iterator[Part]:
    """The parts as they are encoded: a short run one delivery at a time
    (``BULK_FROM``), a long one whole (``run_pieces``)."""
    for part in parts:
        if isinstance(part, Run) and len(part.ack_ids) < BULK_FROM:
            yield part.received()
        else:
            yield part


def responses(
    received: Sequence[ReceivedMessage], *, limit: int, attempts: bool, then: bytes = b""
) -> Iterator[tuple[int, bytes]]:
    """``received`` as responses of at most ``limit`` deliveries, each followed by
    ``then`` (``encode.received_messages``), with how many deliveries were written by
    the end of each. A ``Received``'s runs are encoded whole, once, and cut."""
    pieces: list[bytes | memoryview] = []
    count = sent = 0
    for part in _batches(Received.of(received).parts):
        for size, cut in _encoded(part, attempts):
            at = 0
            while at < size:
                take = min(limit - count, size - at)
                pieces.append(cut(at, at + take))
                at, count = at + take, count + take
                if count == limit:
                    sent += count
                    yield sent, b"".join([*pieces, then])
                    pieces, count = [], 0
    if count:
        yield sent + count, b"".join([*pieces, then])


def _encoded(part: Part, attempts: bool) -> Iterator[tuple[int, Cut]]:
    """A part's deliveries in pieces: how many each holds, and how to cut deliveries
    ``[at, end)`` of it as bytes."""
    if not isinstance(part, Run):
        yield len(part), lambda at, end: encode.received_messages(part[at:end], attempts=attempts)
        return
    for rows, offsets in run_pieces(part, attempts=attempts):

        def cut(at: int, end: int, rows: memoryview = rows, offsets: Offsets = offsets) -> Bytes:
            return rows[int(offsets[at]) : int(offsets[end])]

        yield len(offsets) - 1, cut
