"""Data files on S3 are read through obstore (``Objects.open_read``): a small file in
one GET, a large one by the ranges parquet asks for, a file this process wrote
from memory, and a missing one as a storage error (real moto S3)."""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.harness.s3_proxy import S3Proxy
from lakepubsub import errors
from lakepubsub._lake import Lake, objects
from lakepubsub._lake.objects import split_s3
from lakepubsub._lake.storage import storage_errors

pytestmark = pytest.mark.s3

ROWS = 2_000


def _parquet() -> tuple[pa.Table, bytes]:
    """Rows in several row groups, with payloads that do not compress."""
    offsets = pa.array(range(ROWS), pa.int64())
    table = pa.table({"offset": offsets, "data": [os.urandom(512) for _ in range(ROWS)]})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=500)
    return table, sink.getvalue().to_pybytes()


def _stored(lake: Lake, data: bytes) -> str:
    """``data`` at a fresh key, written by another client (this process keeps nothing)."""
    uri = lake.uri("topics", uuid.uuid4().hex, "part-0.parquet")
    bucket, key = split_s3(uri)
    lake.s3_client().put_object(Bucket=bucket, Key=key, Body=data)
    return uri


def _gets(proxy: S3Proxy) -> tuple[int, int]:
    """GETs and HEADs since the last call."""
    kinds = {k: int(v) for k, v in dict(proxy.reset()["kinds"]).items()}  # type: ignore[call-overload]
    return kinds.get("get", 0), kinds.get("head", 0)


def test_a_small_file_is_one_get_and_a_large_one_is_read_by_ranges(
    proxied_lake: tuple[Lake, S3Proxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    lake, proxy = proxied_lake
    table, data = _parquet()
    uri = _stored(lake, data)

    proxy.reset()
    assert pq.read_table(lake.objects.open_read(uri, len(data))).equals(table)
    assert _gets(proxy) == (1, 0)
    assert pq.read_table(lake.objects.open_read(uri)).equals(table)  # size unknown: a HEAD
    assert _gets(proxy) == (1, 1)

    monkeypatch.setattr(objects, "WHOLE_READ_BYTES", 1024)
    parquet = pq.ParquetFile(lake.objects.open_read(uri, len(data)))
    assert parquet.metadata.num_row_groups == ROWS // 500
    assert parquet.read_row_groups([2], use_threads=False).equals(table.slice(1000, 500))
    footer_and_group, heads = _gets(proxy)
    assert heads == 0 and 2 <= footer_and_group <= 4  # not the whole file's worth
    assert pq.read_table(lake.objects.open_read(uri, len(data))).equals(table)


def test_a_file_this_process_wrote_is_read_from_memory(proxied_lake: tuple[Lake, S3Proxy]) -> None:
    lake, proxy = proxied_lake
    table, data = _parquet()
    uri = lake.uri("topics", uuid.uuid4().hex, "part-0.parquet")
    lake.objects.put(uri, data)
    proxy.reset()
    assert pq.read_table(lake.objects.open_read(uri, len(data))).equals(table)
    assert _gets(proxy) == (0, 0)


def test_a_missing_file_is_a_storage_error(proxied_lake: tuple[Lake, S3Proxy]) -> None:
    lake, _ = proxied_lake
    uri = lake.uri("topics", uuid.uuid4().hex, "part-0.parquet")
    for size in (None, 100, objects.WHOLE_READ_BYTES + 1):
        with pytest.raises(errors.Unavailable), storage_errors(uri):
            pq.read_table(lake.objects.open_read(uri, size))
