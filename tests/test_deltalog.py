"""The direct Delta log: commits delta-rs reads back, conflicts, tailing others' commits."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from support import LakeSpec

from lakepubsub import errors
from lakepubsub._lake import Lake, TableLog, actions, table_schemas
from lakepubsub._lake.actions import ceil_ms

UTC_US = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("when", UTC_US),
        pa.field("tags", pa.map_(pa.string(), pa.string())),
    ]
)


def rows(lo: int, hi: int, when_us: int = 1_700_000_000_123_456) -> pa.Table:
    n = hi - lo
    return pa.table(
        {
            "offset": pa.array(range(lo, hi), pa.int64()),
            "name": [f"m{i}" for i in range(lo, hi)],
            "when": pa.array([when_us + i for i in range(n)], pa.int64()).cast(UTC_US),
            "tags": pa.array([[("k", str(i))] for i in range(n)], SCHEMA.field("tags").type),
        },
        schema=SCHEMA,
    )


def new_table(lake_spec: LakeSpec, name: str = "t") -> tuple[Lake, str]:
    lake = Lake(lake_spec.settings())
    uri = lake.uri(name)
    lake.create(uri, SCHEMA, configuration=table_schemas.LEASES_PROPERTIES)
    return lake, uri


def append(log: TableLog, batch: pa.Table) -> int:
    return log.commit(
        [log.write_file(batch)], operation="WRITE", parameters={"mode": "Append"}, blind_append=True
    )


def test_direct_commits_are_standard_delta(lake: LakeSpec) -> None:
    lake_, uri = new_table(lake)
    log = TableLog(lake_, uri, tracked=("offset", "when"))
    assert append(log, rows(0, 3)) == 1
    assert append(log, rows(3, 5)) == 2
    table = DeltaTable(uri, storage_options=lake.storage_options or None)
    assert table.version() == 2
    read = table.to_pyarrow_table().sort_by("offset")
    assert read.to_pylist() == pa.concat_tables([rows(0, 3), rows(3, 5)]).to_pylist()
    # delta-rs parses the statistics written here
    stats = pa.table(table.get_add_actions(flatten=True)).sort_by("min.offset")
    assert stats["min.offset"].to_pylist() == [0, 3]
    assert stats["max.offset"].to_pylist() == [2, 4]
    assert stats["num_records"].to_pylist() == [3, 2]
    assert [h["operation"] for h in table.history()][:2] == ["WRITE", "WRITE"]


def test_file_statistics_bound_the_data(lake: LakeSpec) -> None:
    lake_, uri = new_table(lake)
    log = TableLog(lake_, uri, tracked=("offset", "when"))
    append(log, rows(10, 20, when_us=1_700_000_000_000_500))
    (only,) = log.files.values()
    assert (only.mins["offset"], only.maxs["offset"], only.rows) == (10, 19, 10)
    # Statistics keep milliseconds: the minimum rounds down, the maximum up.
    assert only.mins["when"] <= 1_700_000_000_000_500
    assert only.maxs["when"] >= 1_700_000_000_000_509
    # A second view reads the same bounds back from the log.
    again = TableLog(lake_, uri, tracked=("offset", "when"))
    assert again.files[only.path].maxs["when"] >= 1_700_000_000_000_509
    assert ceil_ms(1_700_000_000_000_000) == 1_700_000_000_000_999


def test_a_commit_on_a_stale_version_fails_and_leaves_no_file(lake: LakeSpec) -> None:
    lake_, uri = new_table(lake)
    first, second = TableLog(lake_, uri), TableLog(lake_, uri)
    append(first, rows(0, 1))
    add = second.write_file(rows(1, 2))
    with pytest.raises(CommitFailedError):
        second.commit([add], operation="WRITE", parameters={}, blind_append=True)
    assert not lake_.objects.exists(second.path_of(add["add"]["path"]))
    assert second.tail()
    assert second.version == 1
    assert append(second, rows(1, 2)) == 2
    assert DeltaTable(uri, storage_options=lake.storage_options or None).version() == 2


def test_racing_writers_each_version_is_won_once(lake: LakeSpec) -> None:
    lake_, uri = new_table(lake)
    won: list[int] = []
    lost = [0]
    lock = threading.Lock()

    def writer(i: int) -> None:
        log = TableLog(lake_, uri)
        for j in range(5):
            while True:
                try:
                    version = append(log, rows(100 * i + j, 100 * i + j + 1))
                except CommitFailedError:
                    with lock:
                        lost[0] += 1
                    log.tail()
                    continue
                with lock:
                    won.append(version)
                break

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == list(range(1, 21))
    table = DeltaTable(uri, storage_options=lake.storage_options or None)
    assert table.to_pyarrow_table().num_rows == 20


def test_tailing_sees_appends_deletes_and_property_changes_by_delta_rs(lake: LakeSpec) -> None:
    lake_, uri = new_table(lake)
    options = lake.storage_options or None
    log = TableLog(lake_, uri, tracked=("offset",))
    assert not log.tail()
    write_deltalake(uri, rows(0, 4), mode="append", storage_options=options)
    generation = log.generation
    assert log.tail()
    assert sorted(f.mins["offset"] for f in log.files.values()) == [0]
    assert log.generation == generation  # only added files: indexes may extend
    append(log, rows(4, 6))
    assert [f.mins["offset"] for f in log.added] == [0, 4]  # in the order added
    assert log.generation == generation
    DeltaTable(uri, storage_options=options).delete("offset < 2")
    assert log.tail()
    assert log.generation != generation  # a file was removed: indexes rebuild
    assert sum(f.rows for f in log.files.values()) == 4
    assert log.added == list(log.files.values())
    DeltaTable(uri, storage_options=options).alter.set_table_properties(
        {"delta.checkpointInterval": "5"}, raise_if_not_exists=False
    )
    assert log.tail()  # a metadata change reloads through delta-rs
    assert log.version == DeltaTable(uri, storage_options=options).version()
    append(log, rows(6, 7))
    assert DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows == 5


def test_a_property_change_moves_past_appends_and_keeps_other_changes(lake: LakeSpec) -> None:
    lake_, uri = new_table(lake)
    options = lake.storage_options or None
    stale = TableLog(lake_, uri, tracked=("offset",))
    writer = TableLog(lake_, uri, tracked=("offset",))
    for lo in range(0, 6, 2):  # versions the stale view has not seen
        append(writer, rows(lo, lo + 2))
    DeltaTable(uri, storage_options=options).alter.set_table_properties(
        {"delta.checkpointInterval": "7"}, raise_if_not_exists=False
    )
    assert writer.tail()
    append(writer, rows(6, 8))
    assert stale.set_properties({"delta.logRetentionDuration": "interval 2 days"})
    table = DeltaTable(uri, storage_options=options)
    configuration = table.metadata().configuration
    assert configuration["delta.logRetentionDuration"] == "interval 2 days"
    assert configuration["delta.checkpointInterval"] == "7"  # the other change is kept
    for key, value in table_schemas.LEASES_PROPERTIES.items():
        assert configuration[key] == value or key in {
            "delta.logRetentionDuration",
            "delta.checkpointInterval",
        }
    assert sorted(table.to_pyarrow_table().column("offset").to_pylist()) == list(range(8))
    assert stale.version == table.version() and len(stale.files) == 4
    version = table.version()
    assert not stale.set_properties({"delta.checkpointInterval": "7"})  # holds: no commit
    assert DeltaTable(uri, storage_options=options).version() == version
    with pytest.raises(CommitFailedError):  # the writer's view is behind the change
        append(writer, rows(8, 9))
    assert writer.tail()
    append(writer, rows(8, 9))
    assert DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows == 9


def test_a_property_change_lands_while_a_writer_commits_without_pause(
    local_lake: LakeSpec,
) -> None:
    lake_, uri = new_table(local_lake)
    stop = threading.Event()
    committed: list[int] = []

    def hammer() -> None:
        writer = TableLog(lake_, uri, tracked=("offset",))
        offset = 0
        while not stop.is_set():
            try:
                append(writer, rows(offset, offset + 1))
            except CommitFailedError:
                writer.tail()
                continue
            committed.append(offset)
            offset += 1

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    try:
        while len(committed) < 20:
            time.sleep(0.01)
        assert TableLog(lake_, uri).set_properties({"delta.checkpointInterval": "11"})
        time.sleep(0.05)
    finally:
        stop.set()
        thread.join(10)
    table = DeltaTable(uri)
    assert table.metadata().configuration["delta.checkpointInterval"] == "11"
    assert sorted(table.to_pyarrow_table().column("offset").to_pylist()) == sorted(committed)


def test_payloads_and_nested_columns_carry_no_parquet_statistics(tmp_path: Path) -> None:
    """Nobody filters on a payload: its min and max would only repeat it in the file."""
    lake_ = Lake(LakeSpec(str(tmp_path), {}).settings())
    uri = lake_.uri("messages")
    lake_.create(uri, table_schemas.MESSAGES, configuration=table_schemas.MESSAGES_PROPERTIES)
    log = TableLog(lake_, uri, tracked=("offset",))
    payload = os.urandom(1024)  # incompressible
    batch = pa.table(
        {
            "offset": pa.array([7], pa.int64()),
            "message_id": ["7"],
            "publish_time": pa.array([1_700_000_000_000_000], table_schemas.UTC_US),
            "data": [payload],
            "attributes": pa.array([[("k", "v")]], table_schemas.MESSAGES.field("attributes").type),
            "ordering_key": ["key"],
            "size": pa.array([1024], pa.int64()),
        },
        schema=table_schemas.MESSAGES,
    )
    add = log.write_file(batch)["add"]
    meta = pq.ParquetFile(log.path_of(add["path"])).metadata.row_group(0)
    stats = {
        meta.column(i).path_in_schema.split(".")[0]: meta.column(i).statistics
        for i in range(meta.num_columns)
    }
    assert stats["offset"] is not None and stats["offset"].min == 7
    assert stats["ordering_key"] is not None and stats["ordering_key"].max == "key"
    assert stats["data"] is None or not stats["data"].has_min_max
    assert stats["attributes"] is None or not stats["attributes"].has_min_max
    assert add["size"] < 4 * len(payload)  # the payload once (it was 5 times), and the rest
    assert pq.read_table(log.path_of(add["path"])).equals(batch)


def test_payloads_that_do_not_compress_are_written_as_they_are(tmp_path: Path) -> None:
    """A file's payloads are snappy-compressed when a sample of them shrinks, and
    stored as they are when it does not; every other column is compressed."""
    lake_ = Lake(LakeSpec(str(tmp_path), {}).settings())
    uri = lake_.uri("messages")
    lake_.create(uri, table_schemas.MESSAGES, configuration=table_schemas.MESSAGES_PROPERTIES)
    log = TableLog(lake_, uri, tracked=("offset",))
    n = 200
    random_payloads = [os.urandom(1024) for _ in range(n)]
    text_payloads = [json.dumps({"n": i, "pad": "abc " * 250}).encode() for i in range(n)]
    codecs = {}
    for name, payloads in (("random", random_payloads), ("text", text_payloads)):
        batch = pa.table(
            {
                "offset": pa.array(range(n), pa.int64()),
                "message_id": [str(i) for i in range(n)],
                "publish_time": pa.array([1_700_000_000_000_000] * n, table_schemas.UTC_US),
                "data": payloads,
                "attributes": pa.array(
                    [[("k", "v")]] * n, table_schemas.MESSAGES.field("attributes").type
                ),
                "ordering_key": ["key"] * n,
                "size": pa.array([1024] * n, pa.int64()),
            },
            schema=table_schemas.MESSAGES,
        )
        path = log.path_of(log.write_file(batch)["add"]["path"])
        meta = pq.ParquetFile(path).metadata.row_group(0)
        codecs[name] = {
            meta.column(i).path_in_schema: meta.column(i).compression
            for i in range(meta.num_columns)
        }
        assert pq.read_table(path).equals(batch)
    assert codecs["random"].pop("data") == "UNCOMPRESSED"
    assert codecs["text"].pop("data") == "SNAPPY"
    assert "attributes.key_value.value" in codecs["random"]
    assert set(codecs["random"].values()) == set(codecs["text"].values()) == {"SNAPPY"}


def test_background_checkpoints_keep_opening_cheap(lake: LakeSpec) -> None:
    lake_, uri = new_table(lake)
    log = TableLog(lake_, uri)
    for i in range(25):
        append(log, rows(i, i + 1))
        time.sleep(0.02)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        checkpoint = lake_.objects.read(f"{uri}/_delta_log/_last_checkpoint")
        if checkpoint is not None and json.loads(checkpoint)["version"] >= 10:
            break
        time.sleep(0.1)
    assert checkpoint is not None, "the checkpoint thread wrote no checkpoint"
    table = DeltaTable(uri, storage_options=lake.storage_options or None)
    assert table.to_pyarrow_table().num_rows == 25


def test_a_view_whose_log_was_cleaned_up_reloads(tmp_path: Path) -> None:
    lake_, uri = new_table(LakeSpec(str(tmp_path), {}))
    behind = TableLog(lake_, uri)
    writer = lake_.open(uri)
    for i in range(25):  # delta-rs checkpoints at versions 9 and 19
        write_deltalake(writer, rows(i, i + 1), mode="append")
    log_dir = Path(uri) / "_delta_log"
    assert (log_dir / f"{19:020d}.checkpoint.parquet").exists()
    for version in range(19):  # what delta-rs's log cleanup removes
        os.remove(log_dir / f"{version:020d}.json")
    assert behind.tail()
    assert behind.version == 25
    assert sum(f.rows for f in behind.files.values()) == 25


def test_tables_with_features_the_writer_lacks_are_refused(tmp_path: Path) -> None:
    lake_, uri = new_table(LakeSpec(str(tmp_path), {}))
    DeltaTable(uri).alter.add_constraint({"positive": "offset >= 0"})  # writer version 3
    log = TableLog(lake_, uri)
    with pytest.raises(errors.FailedPrecondition, match="protocol"):
        log.write_file(rows(0, 1))
    appendonly = lake_.uri("appendonly")
    lake_.create(appendonly, SCHEMA, configuration={"delta.appendOnly": "true"})
    log = TableLog(lake_, appendonly)
    append(log, rows(0, 1))
    with pytest.raises(errors.FailedPrecondition, match="append-only"):
        log.remove(next(iter(log.files)))


@pytest.mark.parametrize("rows", [1, 3, 200])
def test_file_statistics_are_the_same_below_and_above_the_small_table_cutoff(
    rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small files take their min/max in Python, large ones with pyarrow.compute:
    both give the same statistics (integers, strings by UTF-8 order, timestamps
    of two units, nulls)."""
    keys = ["b", "\u00e9t\u00e9", None, "Z", "\U0001f600", "a"]
    table = pa.table(
        {
            "offset": pa.array([(i * 7919) % 1000 - 500 for i in range(rows)], pa.int64()),
            "key": pa.array([keys[i % len(keys)] for i in range(rows)], pa.string()),
            "at": pa.array(
                [1_764_000_000_000_000 + i * 1_337 for i in range(rows)], pa.int64()
            ).cast(table_schemas.UTC_US),
            "at_ns": pa.array(
                [1_764_000_000_000_000_000 - i * 1_000 for i in range(rows)], pa.int64()
            ).cast(pa.timestamp("ns", tz="UTC")),
            "empty": pa.array([None] * rows, pa.string()),
        }
    )
    small = actions.stats(table)
    monkeypatch.setattr(actions, "SMALL_STATS_ROWS", -1)  # pyarrow.compute only
    assert small == actions.stats(table)
    assert small["numRecords"] == rows
    assert small["minValues"]["offset"] == min(table["offset"].to_pylist())


def test_files_are_stamped_in_commit_order(tmp_path: Path) -> None:
    """Spark's Delta streaming source reads a first snapshot in (modificationTime,
    path) order, and names are random: commits within one millisecond must still
    get increasing times, or a stream reads them out of order."""
    lake_, uri = new_table(LakeSpec(str(tmp_path), {}))
    log = TableLog(lake_, uri, tracked=("offset",))
    for i in range(50):
        append(log, rows(i, i + 1))
    table = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    by_offset = sorted(
        zip(table["min.offset"].to_pylist(), table["modification_time"].to_pylist(), strict=True)
    )
    stamps = [stamp for _, stamp in by_offset]
    assert len(stamps) == 50 and stamps == sorted(stamps) and len(set(stamps)) == 50
