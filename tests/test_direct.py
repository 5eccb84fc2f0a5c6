"""Large data files of a local lake written and read past the page cache
(lakepubsub/_lake/direct.py): every byte lands, whatever the size and the
alignment of the memory it comes from, the page cache keeps at most the last
page of such a file, reading it back leaves the cache as it was, and Delta
readers read the tables whole."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakepubsub import Engine
from lakepubsub._lake import actions, direct
from lakepubsub._lake.objects import Objects
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.decoded import DECODED
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.names import TopicName
from lakepubsub.resources.topics import Topic
from lakepubsub.settings import Settings

SIZES = (
    10,
    direct.DIRECT_MIN_BYTES - 1,
    direct.DIRECT_MIN_BYTES,
    direct.DIRECT_MIN_BYTES + direct.BLOCK + 1,
    3 * 1024 * 1024 + 17,
)


def _sources(raw: bytes) -> dict[str, bytes | pa.Buffer]:
    """The same bytes as ``bytes``, as an Arrow buffer, and as one that starts
    one byte past an allocation (never aligned to a block)."""
    return {
        "bytes": raw,
        "buffer": pa.py_buffer(raw),
        "unaligned": pa.py_buffer(b"\0" + raw).slice(1),
    }


def _resident_pages(path: Path) -> int | None:
    """Pages of ``path`` in the page cache (util-linux's fincore), None without it."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(
        ["fincore", "--noheadings", "--output", "PAGES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


@pytest.mark.parametrize("direct_writes", [True, False])
def test_every_byte_lands_and_large_files_skip_the_page_cache(
    tmp_path: Path, direct_writes: bool
) -> None:
    objects = Objects(False, None, direct=direct_writes)
    for size in SIZES:
        raw = os.urandom(size)
        for kind, data in _sources(raw).items():
            path = tmp_path / "a" / f"{size}-{kind}.parquet"  # "a" is made by the first put
            objects.put(str(path), data)
            pages = _resident_pages(path)
            assert path.read_bytes() == raw, (size, kind)
            if pages is None:
                continue
            whole = -(-size // direct.BLOCK)
            if direct_writes and size >= direct.DIRECT_MIN_BYTES:
                assert pages <= 1, (size, kind, pages)  # the tail's page at most
            else:
                assert pages == whole, (size, kind, pages)
    assert str(tmp_path / "a") not in direct._refused


def test_a_file_written_again_over_a_longer_one_is_only_the_new_bytes(tmp_path: Path) -> None:
    objects = Objects(False, None)
    path = tmp_path / "f"
    objects.put(str(path), os.urandom(2 * direct.DIRECT_MIN_BYTES))
    shorter = os.urandom(direct.DIRECT_MIN_BYTES + 5)
    objects.put(str(path), shorter)
    assert path.read_bytes() == shorter


def test_delta_readers_read_batches_written_past_the_page_cache(tmp_path: Path) -> None:
    """Three publishes of 400 messages of 1 KiB: data files of about 400 KiB, each
    written directly; delta-rs reads every message back."""
    engine = Engine(Settings(lake=str(tmp_path / "lake")))
    try:
        name = TopicName("proj", "direct-writes")
        engine.create_topic(Topic(name))
        sent = [os.urandom(1024) for _ in range(1200)]
        for start in range(0, len(sent), 400):
            engine.publish(name, [PublishMessage(data=d) for d in sent[start : start + 400]])
        uid = engine.resources.topic_entry(name).uid
        table = DeltaTable(engine.lake.uri("topics", uid, "messages"))
        sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist()
        assert len(sizes) == 3 and min(sizes) >= direct.DIRECT_MIN_BYTES
        # Our own reader first, with nothing kept decoded: the same rows, and the
        # files' pages stay out of the page cache (the tail's page at most).
        DECODED.clear()
        ours = MessagesTable(engine.lake, uid).read_range(0, len(sent))
        assert ours.column("data").to_pylist() == sent
        for path in (Path(table.table_uri) / f for f in table.file_uris()):
            pages = _resident_pages(path)
            assert pages is None or pages <= 1, (path, pages)
        rows = table.to_pyarrow_table().sort_by("offset")
        assert rows.column("data").to_pylist() == sent
    finally:
        engine.close()


def test_large_files_are_encoded_into_aligned_memory_and_small_room_falls_back() -> None:
    """A file of ``DIRECT_MIN_BYTES`` or more is encoded straight into memory aligned
    for ``O_DIRECT`` (so it is written without another copy), with the same bytes as
    pyarrow's growing stream makes; one that outgrows its room is refused."""
    n = 600
    rows = pa.table(
        {
            "offset": pa.array(range(n), pa.int64()),
            "data": pa.array([os.urandom(1024) for _ in range(n)], pa.binary()),
        }
    )
    made = actions.parquet_file(rows, row_group_rows=None)
    assert made.size >= direct.DIRECT_MIN_BYTES and made.address % direct.BLOCK == 0
    stream = pa.BufferOutputStream()
    actions._write(rows, stream, None)
    assert made.equals(stream.getvalue())
    assert pq.read_table(pa.BufferReader(made)).equals(rows)
    assert actions._into_aligned(rows, None, size=0) is None
