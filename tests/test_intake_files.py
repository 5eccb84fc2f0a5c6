"""On S3 an intake commit's log entry carries its data file, written beside it: the
entry is the rows' durable record, other processes take the rows from it, and a
file missing after its entry landed is written again from it (real moto S3)."""

from __future__ import annotations

import base64
import io
import uuid

import orjson
import pyarrow.parquet as pq
import pytest
from support import LakeSpec, MotoServer

from lakepubsub import Engine, constants
from lakepubsub._lake.deltalog import FILE_FIELD
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic

pytestmark = pytest.mark.s3

TOPIC = TopicName("files", "topic")
SUB = SubscriptionName("files", "sub")


def _spec(moto_server: MotoServer) -> LakeSpec:
    return LakeSpec(f"s3://{moto_server.bucket}/{uuid.uuid4().hex}", moto_server.storage_options)


def _last_entry(engine: Engine) -> tuple[str, dict[str, object]]:
    """The newest intake commit's add path and its commitInfo."""
    lake = engine.lake
    uri = lake.intake_uri()
    version = lake.open(uri).version()
    body = lake.objects.read(f"{uri}/_delta_log/{version:020d}.json")
    assert body is not None
    actions = [orjson.loads(line) for line in body.splitlines()]
    (path,) = [a["add"]["path"] for a in actions if "add" in a]
    (info,) = [a["commitInfo"] for a in actions if "commitInfo" in a]
    return path, info


def _published(engine: Engine, n: int) -> None:
    engine.create_topic(Topic(TOPIC))
    engine.create_subscription(Subscription(SUB, TOPIC))
    for i in range(n):
        assert engine.publish(TOPIC, [PublishMessage(f"m{i}".encode())]) == [str(i)]


def _drained(engine: Engine, want: int) -> list[bytes]:
    got: list[bytes] = []
    for _ in range(50):
        received = engine.pull(SUB, max_messages=100)
        engine.acknowledge(SUB, [r.ack_id for r in received])
        got += [r.message.data for r in received]
        if len(got) >= want:
            break
    return got


def test_the_entry_carries_the_file_and_a_missing_file_is_written_again(
    moto_server: MotoServer,
) -> None:
    settings = _spec(moto_server).settings(intake=True, flush_ms=0.0, intake_move_s=3600.0)
    with Engine(settings) as engine:
        _published(engine, 3)
        path, info = _last_entry(engine)
        record = info[FILE_FIELD]
        assert isinstance(record, dict) and record["path"] == path
        carried = base64.b64decode(record["parquet"])
        assert pq.read_table(io.BytesIO(carried))["data"].to_pylist() == [b"m2"]
        file_uri = f"{engine.lake.intake_uri()}/{path}"
        # The entries hold the rows a second time: the intake keeps a day of them.
        properties = engine.lake.open(engine.lake.intake_uri()).metadata().configuration
        assert properties["delta.logRetentionDuration"] == constants.INTAKE_LOG_RETENTION
    # The process stopped after waiting for its files; remove the last one, as a
    # writer that died between its two PUTs leaves the lake.
    assert engine.lake.objects.read(file_uri) == carried
    engine.lake.objects.delete(file_uri)
    assert not engine.lake.objects.exists(file_uri)
    with Engine(settings) as engine:  # loads the intake: reads the files
        assert sorted(_drained(engine, 3)) == [b"m0", b"m1", b"m2"]
        assert engine.lake.objects.read(file_uri) == carried  # written again, same bytes


def test_another_process_takes_the_rows_from_the_entry(moto_server: MotoServer) -> None:
    settings = _spec(moto_server).settings(intake=True, flush_ms=0.0, intake_move_s=3600.0)
    with Engine(settings) as writer, Engine(settings) as reader:
        _published(writer, 2)
        assert reader.intake is not None
        path, _ = _last_entry(writer)
        file_uri = f"{writer.lake.intake_uri()}/{path}"
        writer.close()  # its files are all written
        writer.lake.objects.delete(file_uri)
        reader.intake.refresh()  # learns both commits from their entries
        assert reader.intake.read(writer.resources.topic_entry(TOPIC).uid, 0, 2)[
            "data"
        ].to_pylist() == [b"m0", b"m1"]
        # It never read the file (a read would have written it again).
        assert not reader.lake.objects.exists(file_uri)


def test_a_local_lake_commits_files_before_entries(tmp_path: object) -> None:
    """On a local disk a file write costs microseconds: the entry only names it."""
    settings = LakeSpec(str(tmp_path), {}).settings(intake=True, flush_ms=0.0)
    with Engine(settings) as engine:
        _published(engine, 1)
        _, info = _last_entry(engine)
        assert FILE_FIELD not in info
