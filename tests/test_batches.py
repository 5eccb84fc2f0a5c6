"""Publish batches: checked lists become Arrow columns once per commit, in order."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakepubsub import errors
from lakepubsub.publish.batches import Batch, checked, combined, sliced


def three() -> list[Batch]:
    return [
        checked([b"a", b"bb"], [None, [("k", "v")]], [None, "key"]),
        checked([b"ccc"], [[("x", "yz")]], [None]),
        checked([b"d", b"e", b"f"], [None, None, None], ["o", None, "o"]),
    ]


def test_a_checked_batch_counts_and_sizes_without_columns() -> None:
    batch = checked([b"ab", b""], [None, [("key", "value")]], ["k", None])
    assert batch.count == 2
    assert batch.size == 2 + 1 + len("key") + len("value")
    assert batch.columns.column("size").to_pylist() == [3, 8]
    assert batch.columns.column("attributes").to_pylist() == [None, [("key", "value")]]


def test_batches_in_lists_combine_into_the_columns_of_each_in_order() -> None:
    table = combined(three())
    assert table.equals(pa.concat_tables([b.columns for b in three()]))
    assert table.column("data").to_pylist() == [b"a", b"bb", b"ccc", b"d", b"e", b"f"]
    assert table.column("ordering_key").to_pylist() == [None, "key", None, "o", None, "o"]
    assert table.column("size").to_pylist() == [1, 2 + 1 + 1 + 3, 3 + 1 + 2, 2, 1, 2]


def test_a_batch_of_columns_among_lists_keeps_its_place() -> None:
    first, middle, last = three()
    forwarded = Batch(middle.columns, middle.size)  # as a peer hands a group over
    table = combined([first, forwarded, last])
    assert table.column("data").to_pylist() == [b"a", b"bb", b"ccc", b"d", b"e", b"f"]
    assert table.equals(combined(three()))


def test_a_batch_is_columns_or_lists() -> None:
    with pytest.raises(ValueError):
        Batch(None, 0)
    columns = checked([b"a"], [None], [None]).columns
    with pytest.raises(ValueError):
        Batch(columns, 1, ([b"a"], [None], [None], [1]))


def test_what_arrow_would_refuse_is_refused_when_checked() -> None:
    """Columns are built on the publisher's thread for a whole commit, so nothing a
    client sends may fail there: each kind of bad value fails ``checked`` first."""
    bad: list[tuple[list[object], list[object], list[object]]] = [
        (["text"], [None], [None]),
        ([b"a"], [[("k", 1)]], [None]),
        ([b"a"], [[("k", "\ud800")]], [None]),
        ([b"a"], [None], [7]),
        ([b"a"], [None], ["\ud800"]),
    ]
    for data, attributes, keys in bad:
        with pytest.raises(errors.InvalidArgument):
            checked(data, attributes, keys)  # type: ignore[arg-type]


def slices_of(data: list[bytes], gap: bytes = b"<>") -> tuple[bytes, list[int], list[int]]:
    """``data`` laid out one after another in one buffer, ``gap`` before each."""
    buffer, starts = b"head", []
    for blob in data:
        buffer += gap
        starts.append(len(buffer))
        buffer += blob
    return buffer + b"tail", starts, [len(blob) for blob in data]


def test_a_batch_of_slices_holds_the_data_it_points_at() -> None:
    data = [b"a", b"bb" * 300, b"ccc"]
    batch = sliced(*slices_of(data))
    assert (batch.count, batch.size) == (3, 1 + 600 + 3)
    columns = batch.columns
    assert columns.schema == checked(data, [None] * 3, [None] * 3).columns.schema
    assert columns.column("data").to_pylist() == data
    assert columns.column("size").to_pylist() == [1, 600, 3]
    assert columns.column("attributes").null_count == 3
    assert columns.column("ordering_key").null_count == 3


def test_slices_of_one_size_at_a_stride_are_copied_alike() -> None:
    data = [bytes([i]) * 5 for i in range(1, 8)]
    buffer, starts, lengths = slices_of(data, gap=b"###")
    stride = starts[1] - starts[0]
    strided = sliced(buffer, range(starts[0], starts[-1] + 1, stride), lengths)
    assert strided.columns.column("data").to_pylist() == data
    # the first slice at the buffer's start, with no gap before it
    at_start = sliced(b"xxxx##yyyy", range(0, 7, 6), [4, 4])
    assert at_start.columns.column("data").to_pylist() == [b"xxxx", b"yyyy"]


def test_slices_lists_and_columns_combine_in_order() -> None:
    first, middle, last = three()
    buffer, starts, lengths = slices_of([b"s1", b"s2"])
    stride = starts[1] - starts[0]
    batches = [
        sliced(*slices_of([b"v", b"ww"])),
        first,
        sliced(buffer, range(starts[0], starts[-1] + 1, stride), lengths),
        sliced(buffer, range(starts[0], starts[-1] + 1, stride), lengths),
        sliced(*slices_of([b"x"])),
        last,
    ]
    table = combined(batches)
    assert table.column("data").to_pylist() == [
        b"v", b"ww", b"a", b"bb", b"s1", b"s2", b"s1", b"s2", b"x", b"d", b"e", b"f"
    ]  # fmt: skip
    assert table.column("ordering_key").to_pylist() == [None] * 3 + ["key"] + [None] * 5 + [
        "o",
        None,
        "o",
    ]
    assert table.column("size").to_pylist()[:5] == [1, 2, 1, 2 + 1 + 1 + 3, 2]
    assert table.equals(pa.concat_tables([batch.columns for batch in batches]))
    with_columns = [*batches[:3], Batch(middle.columns, middle.size), *batches[3:]]
    assert combined(with_columns).column("data").to_pylist()[4:7] == [b"s1", b"s2", b"ccc"]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ([b""], "messages\\[0\\]: a message needs non-empty data"),
        ([b"a", b""], "messages\\[1\\]: a message needs non-empty data"),
        ([b"a"] * 1001, "1001 messages; the limit is 1000"),
        ([b"x" * 5_000_000, b"y" * 5_000_001], "10000001 bytes; the limit is 10000000"),
    ],
)
def test_slices_are_checked_as_lists_are(data: list[bytes], why: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=why):
        sliced(*slices_of(data))
    with pytest.raises(errors.InvalidArgument, match=why):
        checked(data, [None] * len(data), [None] * len(data))


def test_slices_outside_their_buffer_are_a_caller_error() -> None:
    buffer, starts, lengths = slices_of([b"abc", b"de"])
    with pytest.raises(ValueError):
        sliced(buffer, starts, [3, len(buffer)])
    with pytest.raises(ValueError):
        sliced(buffer, [-1, 5], lengths)
    with pytest.raises(ValueError):
        sliced(buffer, range(0, 4, 2), [3, 3])  # a stride shorter than the data
    with pytest.raises(ValueError):
        sliced(buffer, range(0, 8, 4), [3, 2])  # a stride with sizes that differ
