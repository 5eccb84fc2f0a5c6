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

import itertools
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
# Where each delivery of a piece starts (one more than deliveries, from 0).
Offsets = npt.NDArray[np.int32] | Ints
Bytes = bytes | memoryview
Cut = Callable[[int, int], Bytes]
# A varint holds 7 bits a byte; lengths here stay far below 7 * _WIDEST bits.
_WIDEST = 5
_SHIFTS = np.arange(_WIDEST, dtype=np.int64) * 7
# The smallest value of each varint width past one byte.
_LIMITS = np.left_shift(1, _SHIFTS[1:])


# Runs shorter than this go one delivery at a time (``encode.received_messages``): a
# run's encoding costs about 0.16 ms before its first row (some 40 numpy and Arrow
# calls) and 0.4 µs a row; one delivery at a time, its message built from the run's
# row, about 2.5 µs each. They break even near 150 rows.
BULK_FROM = 150


def _const(value: bytes) -> pa.Scalar:
    return pa.scalar(value, _BINARY)


_EMPTY = _const(b"")


def _widths(values: Ints) -> Ints:
    """Bytes of each value's varint."""
    return np.searchsorted(_LIMITS, values, side="right") + 1


# A field of a column of records: its key byte, each row's length, and where it is
# present (None: every row).
Field = tuple[int, Ints, "npt.NDArray[np.bool_] | None"]


def _fields(*fields: Field) -> list[pa.Array]:
    """For each field, a column of its key byte and its length's varint on every row
    (nothing where it is not present): every field's rows at once, as one matrix
    of bytes, one row a field's row, whose bytes in use are kept in order."""
    n = len(fields[0][1])
    lengths = np.concatenate([f[1] for f in fields])
    present = np.concatenate([np.ones(n, np.bool_) if f[2] is None else f[2] for f in fields])
    widths = _widths(lengths)
    top = int(widths.max()) if len(lengths) else 0
    # Filled a column at a time: numpy is several times slower along a short axis.
    matrix = np.empty((len(lengths), 1 + top), np.uint8)
    keep = np.empty_like(matrix, np.bool_)
    matrix[:, 0] = np.repeat(np.array([f[0] for f in fields], np.uint8), n)
    keep[:, 0] = present
    for k in range(top):
        # byte k of every varint: its k-th group of 7 bits, high bit set if more follow
        matrix[:, k + 1] = ((lengths >> (7 * k)) & 0x7F) | ((widths > k + 1) << 7)
        keep[:, k + 1] = (widths > k) & present
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum((1 + widths) * present, out=offsets[1:])
    data = pa.py_buffer(matrix[keep])
    return [
        pa.Array.from_buffers(
            _BINARY, n, [None, pa.py_buffer(offsets[k * n : (k + 1) * n + 1]), data]
        )
        for k in range(len(fields))
    ]


def _offsets(column: pa.Array) -> npt.NDArray[np.int32]:
    """A binary or string column's value offsets (its rows' bounds in its data)."""
    raw = column.buffers()[1]
    return np.frombuffer(raw, np.int32, len(column) + 1, column.offset * 4)


def _lengths(column: pa.Array) -> Ints:
    """Each row's bytes (a column without nulls, or whose nulls are empty)."""
    return np.diff(_offsets(column)).astype(np.int64)


def _filled(column: pa.Array, empty: str | bytes) -> pa.Array:
    """A binary or string column with its nulls empty. All null (as ordering keys
    mostly are): built from zero offsets, 20 times faster than ``fill_null``."""
    if not column.null_count:
        return column
    if column.null_count < len(column):
        return column.fill_null(empty)
    zeros = pa.py_buffer(np.zeros(len(column) + 1, np.int32))
    return pa.Array.from_buffers(column.type, len(column), [None, zeros, pa.py_buffer(b"")])


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
    entry, key, value = _fields(
        (0x12, entry_lengths, None), (0x0A, key_lengths, None), (0x12, value_lengths, None)
    )
    encoded = pc.binary_join_element_wise(
        entry, key, keys.cast(_BINARY), value, values.cast(_BINARY), _EMPTY
    )
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
    equal times (every message of a publish commit has the same), repeated."""
    n = len(column)
    micros = np.frombuffer(column.buffers()[1], np.int64, n, column.offset * 8)
    firsts = np.concatenate(([0], np.flatnonzero(np.diff(micros)) + 1))
    repeats = np.diff(np.concatenate((firsts, [n]))).tolist()
    encoded = [timestamp(us) for us in micros[firsts].tolist()]
    sizes = np.repeat(np.array([len(e) for e in encoded], np.int64), repeats)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    data = b"".join([e * r for e, r in zip(encoded, repeats, strict=True)])
    stamps = pa.Array.from_buffers(_BINARY, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return stamps, sizes


def run_pieces(run: Run, *, attempts: bool) -> list[tuple[memoryview, Offsets]]:
    """A run's deliveries as ``received_messages`` entries (``encode.received_messages``
    for a run: every delivery is the message's first attempt), encoded at once: for
    each chunk of the run's ``data`` column in turn, its deliveries' bytes end to end
    and where each starts (one more offset than deliveries, from 0).

    Every other column is joined into one chunk first (a few bytes a row), but not
    the payloads: the final join reads them where they lie, chunk by chunk. A run
    handed out by the dispatcher is cut from several files; joining its payloads
    first copied them all once more, and encoding each chunk on its own paid the
    fixed cost of its numpy and Arrow calls once a chunk (``BULK_FROM``)."""
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
    acks = run.ack_id_column()
    ids = rest.column("message_id").chunk(0)
    keys = _filled(rest.column("ordering_key").chunk(0), "")
    attributes, attributes_len = _attributes(rest.column("attributes").chunk(0))
    stamps, stamps_len = _stamps(rest.column("publish_time").chunk(0))
    ack_len, id_len, key_len = (_lengths(c) for c in (acks, ids, keys))
    extra = b"\x18" + varint(1) if attempts else b""
    if attributes is _EMPTY and not key_len.any():
        laid = _laid_out(
            chunks, data_len, (acks, ack_len), (ids, id_len), (stamps, stamps_len), extra
        )
        if laid is not None:
            return [laid]
    has_data, has_key = data_len > 0, key_len > 0
    body_len = (
        np.where(has_data, 1 + _widths(data_len) + data_len, 0)
        + attributes_len
        + 1 + _widths(id_len) + id_len
        + stamps_len
        + np.where(has_key, 1 + _widths(key_len) + key_len, 0)
    )  # fmt: skip
    item_len = 1 + _widths(ack_len) + ack_len + 1 + _widths(body_len) + body_len + len(extra)
    # received_messages = 1 / ack_id = 1 / message = 2 / data = 1 / message_id = 3 /
    # ordering_key = 5
    item, ack, message, data_field, message_id, key = _fields(
        (0x0A, item_len, None),
        (0x0A, ack_len, None),
        (0x12, body_len, None),
        (0x0A, data_len, has_data),
        (0x1A, id_len, None),
        (0x2A, key_len, has_key),
    )
    joined = pc.binary_join_element_wise(
        item, ack, acks.cast(_BINARY),
        message, data_field, data, attributes, message_id, ids.cast(_BINARY), stamps,
        key, keys.cast(_BINARY),
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


# A run is laid out in stretches (``_laid_out``) when they hold this many rows or
# more on average: a stretch costs about 15 numpy calls.
ROWS_PER_STRETCH = 64

# A column and each row's length.
Sized = tuple[pa.Array, Ints]
# A field of every row of a stretch: the same bytes on every row, or the stretch's
# rows of a column (the column, the stretch's first row in it, each row's length).
Band = bytes | tuple[pa.Array, int, int]


def _laid_out(
    chunks: list[pa.Array], data_len: Ints, acks: Sized, ids: Sized, stamps: Sized, extra: bytes
) -> tuple[memoryview, Ints] | None:
    """A run's deliveries (``run_pieces``) when it has no attributes and no ordering
    keys, in stretches of rows that all have one layout: data of one length (in one
    chunk), ack ids, message ids and publish times each of one length. A stretch is
    then a matrix of bytes, one row a delivery, and each field a band of its
    columns, written with one numpy copy; the tags and lengths are the same on every
    row. None when the rows change layout too often (``ROWS_PER_STRETCH``).

    Written by hand for the common run, the messages of publishers that send one
    size: Arrow's element-wise join appends each row's 14 parts one at a time, about
    0.3 µs a row of a StreamingPull drain; this is about 0.15, most of it the copy
    of the data."""
    n = len(data_len)
    (ack_column, ack_len), (id_column, id_len), (stamp_column, stamp_len) = acks, ids, stamps
    changes = np.diff(data_len) != 0
    for lengths in (ack_len, id_len, stamp_len):
        changes |= np.diff(lengths) != 0
    chunk_starts = np.cumsum([0, *(len(c) for c in chunks)]).tolist()
    bounds = np.union1d(np.flatnonzero(changes) + 1, chunk_starts).tolist()
    if len(bounds) - 1 > max(1, n // ROWS_PER_STRETCH):
        return None
    # Each stretch's first row, end, width (a delivery's bytes) and fields.
    stretches: list[tuple[int, int, int, list[Band]]] = []
    chunk = 0
    for lo, hi in itertools.pairwise(bounds):
        while lo >= chunk_starts[chunk + 1]:
            chunk += 1
        a, d, i, s = (int(x[lo]) for x in (ack_len, data_len, id_len, stamp_len))
        body = (1 + len(varint(d)) + d if d else 0) + 1 + len(varint(i)) + i + s
        item = 1 + len(varint(a)) + a + 1 + len(varint(body)) + body + len(extra)
        fields: list[Band] = [
            b"\x0a" + varint(item) + b"\x0a" + varint(a), (ack_column, lo, a),
            b"\x12" + varint(body) + (b"\x0a" + varint(d) if d else b""),
            (chunks[chunk], lo - chunk_starts[chunk], d),
            b"\x1a" + varint(i), (id_column, lo, i), (stamp_column, lo, s), extra,
        ]  # fmt: skip
        stretches.append((lo, hi, 1 + len(varint(item)) + item, fields))
    out = np.empty(sum((hi - lo) * width for lo, hi, width, _ in stretches), np.uint8)
    offsets = np.zeros(n + 1, np.int64)
    at = 0
    for lo, hi, width, fields in stretches:
        rows = out[at : at + (hi - lo) * width].reshape(hi - lo, width)
        offsets[lo + 1 : hi + 1] = np.arange(1, hi - lo + 1, dtype=np.int64) * width + at
        at += (hi - lo) * width
        band = 0
        for field in fields:
            if isinstance(field, bytes):
                rows[:, band : band + len(field)] = np.frombuffer(field, np.uint8)
                band += len(field)
            elif field[2]:
                column, first, size = field
                rows[:, band : band + size] = _matrix(column, first, hi - lo, size)
                band += size
    return out.data, offsets


def _matrix(column: pa.Array, first: int, rows: int, width: int) -> np.ndarray:
    """Rows ``[first, first + rows)`` of a binary or string column whose rows there
    are all ``width`` bytes, as a (rows, width) matrix of its bytes (no copy)."""
    start = int(_offsets(column)[first])
    return np.frombuffer(column.buffers()[2], np.uint8, rows * width, start).reshape(rows, width)


def run_messages(run: Run, *, attempts: bool) -> bytes:
    """``run_pieces``'s bytes."""
    return b"".join(piece for piece, _ in run_pieces(run, attempts=attempts))


def _batches(parts: list[Part]) -> Iterator[Part]:
    """The parts as they are encoded: a short run one delivery at a time
    (``BULK_FROM``), a long one whole (``run_pieces``)."""
    for part in parts:
        if isinstance(part, Run) and len(part) < BULK_FROM:
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
