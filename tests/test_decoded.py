"""The process's decoded messages files (lakepubsub/publish/decoded.py): a read of
rows this process wrote or already decoded decodes nothing and answers the same
rows as a decode would, and the cache stays within its bytes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lakepubsub import metrics
from lakepubsub._lake import Lake, table_schemas
from lakepubsub.publish.decoded import DECODED, DecodedFiles
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.settings import Settings

NOW_US = 1_700_000_000_000_000


def _batch(first: int, n: int) -> pa.Table:
    offsets = list(range(first, first + n))
    return pa.table(
        {
            "offset": offsets,
            "message_id": [str(o) for o in offsets],
            "publish_time": pa.array([NOW_US] * n, pa.int64()).cast(table_schemas.UTC_US),
            "data": [b"m%d" % o for o in offsets],
            "attributes": pa.array([[("k", str(o))] for o in offsets], table_schemas.ATTRIBUTES),
            "ordering_key": [None] * n,
            "size": [10] * n,
        },
        schema=table_schemas.MESSAGES,
    )


def _hits() -> tuple[float, float]:
    sample = {
        s.name: s.value
        for m in (metrics.DECODED_HITS, metrics.DECODED_MISSES)
        for s in m.collect()[0].samples
    }
    return sample["lakepubsub_decoded_file_hits_total"], sample[
        "lakepubsub_decoded_file_misses_total"
    ]


def test_a_read_of_what_this_process_wrote_decodes_nothing(tmp_path: Path) -> None:
    lake = Lake(Settings(lake=str(tmp_path)))
    MessagesTable.create(lake, "t")
    writer = MessagesTable(lake, "t")
    for i in range(3):
        writer.append(_batch(i * 100, 100), app_id="test", txn_version=i)
    reader = MessagesTable(lake, "t")  # another handle, as a dispatcher's
    reader.refresh()
    hits, misses = _hits()
    rows = reader.read_range(50, 250)
    assert _hits() == (hits + 3, misses)
    assert rows["offset"].to_pylist() == list(range(50, 250))
    # Forgotten, the files are decoded again, to the same rows, and kept again.
    for key in list(DECODED._rows):
        if key[0] == reader.uri:
            DECODED._rows.pop(key)
    decoded = MessagesTable(lake, "t")
    decoded.refresh()
    assert decoded.read_range(50, 250).equals(rows)
    assert _hits() == (hits + 3, misses + 3)
    assert decoded.read_offsets([7, 150, 299]).column("data").to_pylist() == [
        b"m7",
        b"m150",
        b"m299",
    ]
    assert _hits() == (hits + 6, misses + 3)


def test_the_cache_keeps_within_its_bytes_and_drops_the_oldest() -> None:
    one = _batch(0, 1000)
    cache = DecodedFiles(max_bytes=one.nbytes * 5)
    for i in range(8):
        cache.put("uri", f"f{i}", _batch(i * 1000, 1000))
        assert cache._bytes <= cache.max_bytes
    assert cache.get("uri", "f0") is None
    assert cache.get("uri", "f7") is not None
    cache.get("uri", "f4")  # used: the next one dropped is f5
    cache.put("uri", "f8", _batch(8000, 1000))
    assert cache.get("uri", "f4") is not None and cache.get("uri", "f5") is None
    # A file bigger than a quarter of the cache is not kept: it would push out the rest.
    cache.put("uri", "big", _batch(0, 2000))
    assert cache.get("uri", "big") is None
