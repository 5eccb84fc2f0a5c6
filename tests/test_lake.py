"""The storage layer's table handles: properties of new tables, catching up after log cleanup."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from lakepubsub import constants, schemas
from lakepubsub._lake import Lake
from lakepubsub.settings import Settings

ROW = pa.table({"n": pa.array([1], pa.int64())})


def _lake(path: Path) -> Lake:
    return Lake(Settings.from_env({"LAKEPUBSUB_LAKE": str(path)}))


def test_local_tables_keep_a_short_log(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    table = lake.create(lake.uri("t"), ROW.schema, configuration=schemas.LEASES_PROPERTIES)
    properties = table.metadata().configuration
    assert properties["delta.logRetentionDuration"] == constants.LOCAL_LOG_RETENTION
    assert properties["delta.checkpointInterval"] == constants.CHECKPOINT_INTERVAL


def test_a_handle_catches_up_after_its_log_was_cleaned(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    uri = lake.uri("t")
    lake.create_with(uri, ROW, configuration=schemas.LEASES_PROPERTIES)
    behind = lake.open(uri)
    writer = lake.open(uri)
    for _ in range(25):  # checkpoints at versions 9 and 19
        write_deltalake(writer, ROW, mode="append")
    log = Path(uri) / "_delta_log"
    assert (log / f"{19:020d}.checkpoint.parquet").exists()
    for version in range(19):  # what delta-rs's log cleanup removes
        os.remove(log / f"{version:020d}.json")

    assert lake.moved(behind)
    assert behind.version() == 25
    assert behind.to_pyarrow_table().num_rows == 26
    assert not lake.moved(behind)


def test_rows_read_come_sorted_by_offset() -> None:
    from lakepubsub.topic_table import _by_offset

    shuffled = pa.table(
        {"offset": pa.chunked_array([[3, 4], [1, 2]]), "d": [b"c", b"d", b"a", b"b"]}
    )
    assert _by_offset(shuffled)["d"].to_pylist() == [b"a", b"b", b"c", b"d"]
    ordered = shuffled.sort_by("offset")
    assert _by_offset(ordered) is ordered  # already sorted: no copy
