"""Checkpoints written from lakepubsub's own log replay (``lakepubsub/_lake/checkpoints.py``)
hold what delta-rs's own checkpoint of the same version holds, in its layout, and
delta-rs opens tables from them. (``tests/spark/test_delta_conformance.py`` has
delta-spark read them.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from support import LakeSpec

from lakepubsub import constants
from lakepubsub._lake import Lake, TableLog, checkpoints, table_schemas
from lakepubsub._lake import checkpointer as background

SCHEMA = pa.schema([pa.field("offset", pa.int64(), nullable=False), pa.field("name", pa.string())])


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table(
        {"offset": pa.array(range(lo, hi), pa.int64()), "name": [f"m{i}" for i in range(lo, hi)]},
        schema=SCHEMA,
    )


def append(log: TableLog, batch: pa.Table, app: str, txn: int) -> None:
    actions = [log.write_file(batch), {"txn": {"appId": app, "version": txn}}]
    log.commit(actions, operation="WRITE", parameters={"mode": "Append"}, blind_append=True)


def checkpoint_rows(path: str) -> dict[str, list[Any]]:
    """A checkpoint's actions by kind, each kind sorted, map fields as dicts."""
    return sorted_rows(pq.read_table(path))


def sorted_rows(table: pa.Table) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for kind in table.column_names:
        values = [checkpoints._as_json(v) for v in table[kind].to_pylist() if v is not None]
        out[kind] = sorted(values, key=repr)
    return out


@pytest.fixture(autouse=True)
def no_background_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests write each checkpoint themselves."""
    monkeypatch.setattr(background._CHECKPOINTS, "request", lambda *args: None)


def build(
    lake_spec: LakeSpec, properties: dict[str, str] = table_schemas.LEASES_PROPERTIES
) -> tuple[Lake, TableLog, str]:
    """A table whose log has appends with transactions, a delete by delta-rs, a
    property change and more appends after it."""
    lake = Lake(lake_spec.settings())
    uri = lake.uri("t")
    lake.create(uri, SCHEMA, configuration=properties)
    log = TableLog(lake, uri, tracked=("offset",))
    for i in range(12):
        append(log, rows(i * 2, i * 2 + 2), "pub-a" if i % 2 else "pub-b", i)
    options = lake_spec.storage_options or None
    DeltaTable(uri, storage_options=options).delete("offset < 4")
    DeltaTable(uri, storage_options=options).alter.set_table_properties(
        {"delta.checkpointInterval": "7"}, raise_if_not_exists=False
    )
    log.tail()
    for i in range(12, 15):
        append(log, rows(i * 2, i * 2 + 2), "pub-a", i)
    return lake, log, uri


def test_a_checkpoint_holds_what_delta_rs_would_write(lake: LakeSpec) -> None:
    lake_, log, uri = build(lake)
    options = lake.storage_options or None
    name = f"{uri}/_delta_log/{log.version:020d}.checkpoint.parquet"
    pointer = f"{uri}/_delta_log/_last_checkpoint"
    local = lake.storage_options == {}
    if local:  # delta-rs's own checkpoint of the version, replayed from the JSON commits
        DeltaTable(uri, version=log.version).create_checkpoint()
        theirs = checkpoint_rows(name)
        Path(name).unlink()
        Path(pointer).unlink()
    replay = checkpoints.Replay(lake_.objects, uri)
    assert replay.state.version == -1  # no checkpoint to start from
    replay.advance(log.version)
    replay.write()
    if local:
        assert pq.read_schema(name).equals(checkpoints.SCHEMA)
        assert checkpoint_rows(name) == theirs
        assert set(theirs["remove"][0]) >= {"path", "deletionTimestamp", "size"}
    opened = DeltaTable(uri, storage_options=options)  # from our checkpoint
    assert opened.version() == log.version
    assert sorted(opened.to_pyarrow_table()["offset"].to_pylist()) == list(range(4, 30))
    assert opened.transaction_version("pub-a") == 14
    assert opened.transaction_version("pub-b") == 10
    assert opened.metadata().configuration["delta.checkpointInterval"] == "7"


def test_a_replay_continues_from_its_own_checkpoint(tmp_path: Path) -> None:
    lake_, log, uri = build(LakeSpec(str(tmp_path), {}))
    first = checkpoints.Replay(lake_.objects, uri)
    first.advance(log.version)
    first.write()
    for i in range(15, 18):
        append(log, rows(i * 2, i * 2 + 2), "pub-c", i)
    again = checkpoints.Replay(lake_.objects, uri)  # starts from the checkpoint
    assert again.state.version == log.version - 3
    again.advance(log.version)
    first.advance(log.version)
    now_ms = time.time_ns() // 1_000_000
    assert sorted_rows(again.state.rows(now_ms)) == sorted_rows(first.state.rows(now_ms))
    again.write()
    opened = DeltaTable(uri)
    assert opened.version() == log.version
    assert opened.transaction_version("pub-c") == 17
    assert opened.to_pyarrow_table().num_rows == 36 - 4


HOUR_MS = 3_600_000


@pytest.mark.parametrize(
    ("properties", "retention_ms"),
    [
        # Lease tables replace a file on every commit: an hour of tombstones.
        (table_schemas.LEASES_PROPERTIES, constants.LEASE_FILE_RETENTION_HOURS * HOUR_MS),
        # Messages tables keep Delta's default, a week.
        (table_schemas.MESSAGES_PROPERTIES, checkpoints.DEFAULT_TOMBSTONE_RETENTION_MS),
    ],
    ids=["leases", "messages"],
)
def test_tombstones_are_kept_for_their_retention(
    tmp_path: Path, properties: dict[str, str], retention_ms: int
) -> None:
    lake_, log, uri = build(LakeSpec(str(tmp_path), {}), properties)
    replay = checkpoints.Replay(lake_.objects, uri)
    replay.advance(log.version)
    now_ms = time.time_ns() // 1_000_000
    now = replay.state.rows(now_ms)
    removes = now.num_rows - now["remove"].null_count
    assert removes > 0  # the delete's
    almost = replay.state.rows(now_ms + retention_ms - 60_000)
    assert almost.num_rows - almost["remove"].null_count == removes  # still kept
    later = replay.state.rows(now_ms + retention_ms + 1)
    assert later["remove"].null_count == later.num_rows  # expired: left out
    live = now.num_rows - now["add"].null_count
    assert live > 0 and later.num_rows - later["add"].null_count == live  # files stay


def test_what_the_replay_does_not_model_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "p")
    write_deltalake(uri, rows(0, 4), partition_by=["name"])
    lake_ = Lake(LakeSpec(str(tmp_path), {}).settings())
    with pytest.raises(checkpoints.Unsupported):
        checkpoints.Replay(lake_.objects, uri).advance(0)
    with pytest.raises(checkpoints.Unsupported):
        checkpoints.LogState().apply([{"add": {"path": "x", "deletionVector": {"a": 1}}}])
    with pytest.raises(checkpoints.Unsupported):
        checkpoints.LogState().apply([{"domainMetadata": {"domain": "d"}}])


def test_the_background_checkpointer_uses_the_replay(tmp_path: Path) -> None:
    """The checkpointer of a process writes checkpoints that delta-rs opens."""
    lake_, log, uri = build(LakeSpec(str(tmp_path), {}))
    checkpointer = background._Checkpointer()
    try:
        checkpointer.request(uri, log.version, None, lake_.objects)
        checkpointer.settle()
    finally:
        checkpointer.stop()
    assert isinstance(checkpointer._tables[uri], checkpoints.Replay)
    pointer = (Path(uri) / "_delta_log" / "_last_checkpoint").read_text()
    assert f'"version":{log.version}' in pointer
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 26


def test_a_replay_whose_commits_were_cleaned_up_starts_again(tmp_path: Path) -> None:
    """Another process checkpointed and removed the commits the kept replay needs
    next: it starts again from that checkpoint; a table the replay cannot model is
    checkpointed by delta-rs."""
    lake_, log, uri = build(LakeSpec(str(tmp_path), {}))
    checkpointer = background._Checkpointer()
    try:
        checkpointer.request(uri, log.version, None, lake_.objects)
        checkpointer.settle()
        kept = checkpointer._tables[uri]
        for i in range(15, 18):
            append(log, rows(i * 2, i * 2 + 2), "pub-c", i)
        DeltaTable(uri, version=log.version - 1).create_checkpoint()
        for version in range(log.version - 1):
            (Path(uri) / "_delta_log" / f"{version:020d}.json").unlink(missing_ok=True)
        checkpointer.request(uri, log.version, None, lake_.objects)
        checkpointer.settle()
        again = checkpointer._tables[uri]
        assert isinstance(again, checkpoints.Replay) and again is not kept
        assert again.state.version == log.version
        assert DeltaTable(uri).to_pyarrow_table().num_rows == 36 - 4

        partitioned = str(tmp_path / "p")
        write_deltalake(partitioned, rows(0, 4), partition_by=["name"])
        checkpointer.request(partitioned, 0, None, lake_.objects)
        checkpointer.settle()
        assert isinstance(checkpointer._tables[partitioned], DeltaTable)
        assert (Path(partitioned) / "_delta_log" / "_last_checkpoint").exists()
    finally:
        checkpointer.stop()


def test_own_commits_reach_the_kept_replay_between_checkpoints_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commits this process makes are applied to the kept replay as they come,
    from the bytes it wrote, with no checkpoint requested; the next checkpoint then
    needs none of their files (here deleted) and delta-rs opens the table from it."""
    fresh = background._Checkpointer()
    monkeypatch.setattr(background, "_CHECKPOINTS", fresh)
    lake_, log, uri = build(LakeSpec(str(tmp_path), {}))
    log._checkpoint_interval = 10**9  # no requests but the test's own
    try:
        fresh.request(uri, log.version, None, lake_.objects)
        fresh.settle()
        first = log.version
        for i in range(15, 20):
            append(log, rows(i * 2, i * 2 + 2), "pub-c", i)
        deadline = time.monotonic() + 10
        while not applied(fresh, uri, log.version):
            assert time.monotonic() < deadline, "own commits were not applied"
            time.sleep(0.02)
        assert not fresh._known[uri], "applied, then let go"
        for version in range(first + 1, log.version + 1):
            (Path(uri) / "_delta_log" / f"{version:020d}.json").unlink()
        fresh.request(uri, log.version, None, lake_.objects)
        fresh.settle()
    finally:
        fresh.stop()
    pointer = (Path(uri) / "_delta_log" / "_last_checkpoint").read_text()
    assert f'"version":{log.version}' in pointer
    table = DeltaTable(uri)
    assert table.version() == log.version
    assert sorted(table.to_pyarrow_table()["offset"].to_pylist()) == list(range(4, 40))
    assert set(table.get_add_actions(flatten=True)["path"].to_pylist()) == set(log.files)


def applied(checkpointer: background._Checkpointer, uri: str, version: int) -> bool:
    """Whether the kept replay of ``uri`` reached ``version`` (it is out of the
    table while the thread applies commits to it)."""
    with checkpointer._cond:
        kept = checkpointer._tables.get(uri)
        return isinstance(kept, checkpoints.Replay) and kept.state.version >= version


def test_own_commits_are_kept_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table never checkpointed keeps at most CHECKPOINT_KNOWN_MAX of its commit
    files, at most CHECKPOINT_HANDLES tables keep any, and a forgotten table's are
    dropped."""
    monkeypatch.setattr(constants, "CHECKPOINT_KNOWN_MAX", 4)
    monkeypatch.setattr(constants, "CHECKPOINT_HANDLES", 3)
    fresh = background._Checkpointer()
    for version in range(10):
        fresh.committed("mem://a", version, b'{"commitInfo":{}}\n{"txn":{}}\n')
    assert 0 < len(fresh._known["mem://a"]) <= 4
    assert fresh._known["mem://a"][9] == b'{"txn":{}}\n', "kept without its commitInfo"
    for name in "bcd":
        fresh.committed(f"mem://{name}", 0, b"{}\n")
    assert list(fresh._known) == ["mem://b", "mem://c", "mem://d"]
    fresh.settle("mem://c", forget=True)
    assert list(fresh._known) == ["mem://b", "mem://d"]
