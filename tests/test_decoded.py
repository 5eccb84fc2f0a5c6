"""The process's decoded messages files (lakepubsub/publish/decoded.py): a read of
rows this process wrote or already decoded decodes nothing and answers the same
rows as a decode would, and the cache stays within its bytes."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from support import LakeSpec

from lakepubsub import metrics
from lakepubsub._lake import Lake, table_schemas
from lakepubsub.publish.decoded import DECODED, READ_AHEAD, DecodedFiles, ReadAhead
from lakepubsub.publish.messages_table import MessagesTable, create_table
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
    create_table(lake, "t")
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
    cache = DecodedFiles(max_bytes=one.get_total_buffer_size() * 5)
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


def _read_aheads() -> float:
    return float(metrics.READ_AHEADS.collect()[0].samples[0].value)


def _forget(uri: str) -> None:
    for key in list(DECODED._rows):
        if key[0] == uri:
            DECODED._rows.pop(key)


def test_a_reader_of_ranges_on_s3_finds_the_next_files_decoded(lake: LakeSpec) -> None:
    """On S3, reading a range starts decoding the files after it; the reader's own
    reads of them then decode nothing and answer the same rows. A local lake reads
    nothing ahead (there a decode is CPU, which another thread only moves)."""
    store = Lake(lake.settings())
    create_table(store, "t")
    writer = MessagesTable(store, "t")
    for i in range(4):
        writer.append(_batch(i * 100, 100), app_id="test", txn_version=i)
    _forget(writer.uri)  # a reader in another process, or after a restart
    store.objects.written._items.clear()
    reader = MessagesTable(store, "t")
    reader.refresh()
    started = _read_aheads()
    hits, misses = _hits()
    assert reader.read_range(0, 100)["offset"].to_pylist() == list(range(100))
    assert _hits() == (hits, misses + 1)
    ahead = 3 if store.is_s3 else 0  # the three files after it
    assert _read_aheads() == started + ahead
    rest = reader.read_range(100, 400)
    assert rest["offset"].to_pylist() == list(range(100, 400))
    assert rest["data"].to_pylist() == [b"m%d" % o for o in range(100, 400)]
    # On S3 each was decoded once, ahead, and found kept or waited for: no miss.
    assert _hits()[1] == misses + 1 + (3 - ahead)
    deadline = time.monotonic() + 5
    while READ_AHEAD._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not READ_AHEAD._pending


def test_what_is_read_ahead_and_unread_stays_within_the_budget() -> None:
    cache = DecodedFiles(max_bytes=10_000)
    ahead = ReadAhead(cache, budget=300)
    rows = _batch(0, 10)

    def decode(path: str):  # type: ignore[no-untyped-def]
        def keep() -> pa.Table:
            cache.put("uri", path, rows)
            return rows

        return keep

    assert ahead.start("uri", "f1", 200, decode("f1"))
    assert not ahead.start("uri", "f2", 200, decode("f2"))  # 400 > 300: not read ahead
    assert ahead.read("uri", "f1") is not None  # read: its bytes free
    assert ahead.start("uri", "f2", 200, decode("f2"))
    assert ahead.read("uri", "f2") is not None
    assert ahead.read("uri", "f3") is None  # never read ahead: the reader decodes it
    # A file pushed out of the cache before it was read frees its share too.
    assert ahead.start("uri", "f4", 200, decode("f4"))
    deadline = time.monotonic() + 5
    while ahead._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    cache._rows.pop(("uri", "f4"))
    assert ahead.start("uri", "f5", 200, decode("f5"))


def test_files_too_big_to_keep_decoded_are_not_read_ahead(lake: LakeSpec, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A file read ahead is decoded whole: one too big to keep would be read twice.
    monkeypatch.setattr("lakepubsub.publish.messages_table.READ_AHEAD_FILE_BYTES", 1)
    store = Lake(lake.settings())
    create_table(store, "t")
    writer = MessagesTable(store, "t")
    for i in range(2):
        writer.append(_batch(i * 100, 100), app_id="test", txn_version=i)
    _forget(writer.uri)
    reader = MessagesTable(store, "t")
    reader.refresh()
    started = _read_aheads()
    reader.read_range(0, 100)
    assert _read_aheads() == started


def test_a_range_is_cut_from_files_in_or_out_of_offset_order(tmp_path: Path) -> None:
    lake = Lake(Settings(lake=str(tmp_path)))
    create_table(lake, "t")
    writer = MessagesTable(lake, "t")
    writer.append(_batch(0, 100), app_id="test", txn_version=0)
    # Another writer may leave a file's rows out of offset order: it is filtered, not cut.
    backwards = _batch(100, 100)
    writer.append(backwards.take(list(range(99, -1, -1))), app_id="test", txn_version=1)
    writer.append(_batch(200, 100), app_id="test", txn_version=2)
    reader = MessagesTable(lake, "t")
    reader.refresh()
    for lo, hi in ((10, 20), (90, 110), (150, 151), (180, 250), (0, 300), (299, 400)):
        rows = reader.read_range(lo, hi)
        assert rows["offset"].to_pylist() == list(range(lo, min(hi, 300))), (lo, hi)
        assert rows["data"].to_pylist() == [b"m%d" % o for o in range(lo, min(hi, 300))]
