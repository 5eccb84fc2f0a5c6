"""Publish batches: checked lists become Arrow columns once per commit, in order."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakepubsub import errors
from lakepubsub.publish.batches import Batch, checked, combined


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
