"""The streaming batch consumer: a topic's messages into a Delta table, exactly once,
across crashes, reruns, compaction, the truncation job's deletes and concurrent publishes."""

from __future__ import annotations

import json
import threading
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from jobtools import context, messages, publish_batches, topic_name
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from support import LakeSpec

from jobs import stream_consume
from jobs.cli import jobs as jobs_group
from jobs.examples import hourly_counts
from jobs.schedule import scheduled_tasks
from lakepubsub import Engine
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.topics import Topic
from lakepubsub.scheduler import NullProgress
from lakepubsub.settings.schedule import ScheduleSettings
from lakepubsub.spark.tables import spark_path

COPY = "SELECT offset, message_id, data FROM messages"
# Publishes (20 messages each, 0.1 s apart) racing one run.
PUBLISHES_DURING_A_RUN = 40


def _offsets(target: str) -> list[int]:
    """Every offset the target holds, sorted, duplicates kept."""
    rows = DeltaTable(target).to_pyarrow_table(columns=["offset"])
    return sorted(int(o) for o in rows.column("offset").to_pylist())


def _forget_batches(checkpoint: Path, *, commits_from: int, offsets_from: int) -> None:
    """Delete the checkpoint's entries of batches from these ids on (with their checksums)."""
    for log, first in (("commits", commits_from), ("offsets", offsets_from)):
        for entry in (checkpoint / log).iterdir():
            batch = entry.name.lstrip(".").split(".")[0]
            if batch.isdigit() and int(batch) >= first:
                entry.unlink()


def _options(tmp_path: Path, topic: str, **kwargs: object) -> stream_consume.StreamOptions:
    return stream_consume.StreamOptions(
        topic=topic,
        target=str(tmp_path / "copy"),
        checkpoint=str(tmp_path / "checkpoint"),
        **kwargs,  # type: ignore[arg-type]
    )


def test_every_message_once_across_runs(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("copied")))
    first = publish_batches(engine, topic.name, batches=3, per_batch=10)
    options = _options(tmp_path, topic.name.path, sql=COPY)

    with context(local_lake, spark) as ctx:
        one = stream_consume.run(ctx, options)
        again = stream_consume.run(ctx, options)
        more = publish_batches(engine, topic.name, batches=2, per_batch=7)
        two = stream_consume.run(ctx, options)
    assert (one.status, one.messages, one.rows_written) == ("written", 30, 30)
    assert (again.status, again.messages, again.rows_written) == ("nothing new", 0, 0)
    assert (two.status, two.messages, two.rows_written) == ("written", 14, 14)
    assert one.query_id == two.query_id  # the checkpoint keeps the consumer's identity
    assert _offsets(options.target) == sorted(first + more) == list(range(44))
    table = DeltaTable(options.target)
    app = stream_consume.app_id(one.query_id)
    assert table.transaction_version(app) is not None


def test_a_crash_between_the_write_and_the_checkpoint_writes_nothing_twice(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("crashy-stream")))
    publish_batches(engine, topic.name, batches=3, per_batch=10)
    options = _options(tmp_path, topic.name.path, sql=COPY, max_files_per_trigger=1)

    with context(local_lake, spark) as ctx:
        done = stream_consume.run(ctx, options)
        assert done.batches == 3
        # The state a process killed after the target's commit of the last batch
        # with data and before Spark marked it done leaves: the batch's offsets
        # entry, no commit entry, and no later batch.
        written = DeltaTable(options.target).transaction_version(
            stream_consume.app_id(done.query_id)
        )
        assert written is not None
        _forget_batches(Path(options.checkpoint), commits_from=written, offsets_from=written + 1)
        version_before = DeltaTable(options.target).version()
        publish_batches(engine, topic.name, batches=1, per_batch=5)
        rerun = stream_consume.run(ctx, options)
    # The rerun redid the last batch, its append skipped by the transaction id
    # (so not even read), then ran the new one.
    assert rerun.batches == 2
    assert rerun.messages == 5
    assert rerun.rows_written == 5
    assert DeltaTable(options.target).version() == version_before + 1
    assert _offsets(options.target) == list(range(35))


def test_a_run_that_dies_mid_way_resumes_where_it_stopped(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("dies")))
    publish_batches(engine, topic.name, batches=4, per_batch=10)
    options = _options(tmp_path, topic.name.path, max_files_per_trigger=1)
    seen: list[int] = []

    def dies_on_the_third_batch(frame: DataFrame) -> DataFrame:
        seen.append(1)
        if len(seen) == 3:
            raise RuntimeError("executor lost")
        return frame.select("offset", "data")

    with context(local_lake, spark) as ctx:
        with pytest.raises(StreamingQueryException, match="executor lost"):
            stream_consume.run(ctx, options, transform=dies_on_the_third_batch)
        assert _offsets(options.target) == list(range(20))
        resumed = stream_consume.run(ctx, options, transform=lambda f: f.select("offset", "data"))
    assert (resumed.batches, resumed.messages) == (2, 20)
    assert _offsets(options.target) == list(range(40))


def test_compaction_and_the_truncation_delete_between_runs(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("maintained")))
    publish_batches(engine, topic.name, batches=4, per_batch=10)
    options = _options(tmp_path, topic.name.path, sql=COPY)
    table = MessagesTable(engine.lake, topic.uid)
    plain_checkpoint = spark_path(str(tmp_path / "ignore-deletes"))

    def ignore_deletes_stream() -> None:
        """The same stream with ``ignoreDeletes`` instead of ``skipChangeCommits``."""
        query = (
            spark.readStream.format("delta")
            .option("ignoreDeletes", "true")
            .load(spark_path(table.uri))
            .writeStream.format("noop")
            .option("checkpointLocation", plain_checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    with context(local_lake, spark) as ctx:
        first = stream_consume.run(ctx, options)
        ignore_deletes_stream()
        publish_batches(engine, topic.name, batches=3, per_batch=10)  # 40..69, unread
        removed, added, _ = table.compact(target_bytes=1 << 30, min_small_files=2)
        assert (removed, added) == (7, 1)  # one file, rewritten with dataChange=false
        deleted, _ = table.delete_below(55)  # rewrites that file: rows 55..69 added again
        assert deleted == 55
        second = stream_consume.run(ctx, options)
        publish_batches(engine, topic.name, batches=1, per_batch=10)
        third = stream_consume.run(ctx, options)
        with pytest.raises(StreamingQueryException, match="DELTA_SOURCE_TABLE_IGNORE_CHANGES"):
            ignore_deletes_stream()
    assert first.messages == 40
    # 40..54 were deleted before this run read them: it reads them from the files
    # that added them (not yet vacuumed); the delete's commit, re-added rows and
    # all, is skipped.
    assert (second.messages, third.messages) == (30, 10)
    assert _offsets(options.target) == list(range(80))


def test_publishing_during_a_run(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("busy")))
    published = publish_batches(engine, topic.name, batches=4, per_batch=20)
    options = _options(tmp_path, topic.name.path, sql=COPY, max_files_per_trigger=1)
    stop = threading.Event()
    failures: list[BaseException] = []

    def publisher() -> None:
        try:
            for _ in range(PUBLISHES_DURING_A_RUN):
                if stop.wait(0.1):
                    return
                published.extend(int(o) for o in engine.publish(topic.name, messages(20)))
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    with context(local_lake, spark) as ctx:
        thread = threading.Thread(target=publisher)
        thread.start()
        try:
            during = stream_consume.run(ctx, options)
        finally:
            stop.set()
            thread.join()
        after = stream_consume.run(ctx, replace(options, max_files_per_trigger=None))
    assert not failures
    assert during.messages >= 80
    assert during.messages + after.messages == len(published)
    assert _offsets(options.target) == sorted(published) == list(range(len(published)))


def test_filter_transform_and_the_command(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    engine = local_engine
    topic = engine.create_topic(Topic(topic_name("clicks-stream")))
    engine.publish(topic.name, messages(9))  # k = v0, v1, v2, v0, ...
    engine.publish(topic.name, [PublishMessage(b"no attributes")])
    target = str(tmp_path / "hourly")
    with context(local_lake, spark) as ctx:
        report = stream_consume.run(
            ctx,
            stream_consume.StreamOptions(
                topic.name.path,
                target,
                str(tmp_path / "hourly-checkpoint"),
                transform="jobs.examples.hourly_counts:transform",
                filter='attributes.k = "v1" OR attributes.k = "v2"',
            ),
        )
    assert report.messages == 10  # read; the filter passed 6
    rows = DeltaTable(target).to_pyarrow_table().to_pylist()
    assert {(r["key"], r["value"], r["messages"]) for r in rows} == {("k", "v1", 3), ("k", "v2", 3)}

    command = [
        "run",
        "stream-consume",
        "--lake",
        local_lake.uri,
        "--topic",
        topic.name.path,
        "--target",
        str(tmp_path / "sql-copy"),
        "--checkpoint",
        str(tmp_path / "sql-checkpoint"),
        "--sql",
        hourly_counts.SQL,
        "--starting-offset",
        "5",
    ]
    result = CliRunner().invoke(jobs_group, command)
    assert result.exit_code == 0, result.output
    line = json.loads(result.output.strip().splitlines()[-1])
    assert line["messages"] == 10  # offsets 0..9 read, 5..9 kept
    total = DeltaTable(str(tmp_path / "sql-copy")).to_pyarrow_table().column("messages")
    assert sum(total.to_pylist()) == 5


def test_a_scheduled_stream_consumer(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    topic = local_engine.create_topic(Topic(topic_name("scheduled-stream")))
    publish_batches(local_engine, topic.name, batches=2, per_batch=4)
    config = tomllib.loads(
        "[[stream_consume]]\ninterval_s = 600\n"
        f'topic = "{topic.name.path}"\ntarget = "{tmp_path / "copy"}"\n'
        f'checkpoint = "{tmp_path / "checkpoint"}"\nsql = "{COPY}"\n'
    )
    with context(local_lake, spark) as ctx:
        tasks = scheduled_tasks(ctx, ScheduleSettings(), config)
        (task,) = [t for t in tasks if t.name.startswith("stream-consume")]
        assert (task.name, task.interval_s) == (f"stream-consume {topic.name.path}", 600)
        summary = task.run(NullProgress())
    assert summary == {"status": "written", "messages": 8, "rows_written": 8}
    assert _offsets(str(tmp_path / "copy")) == list(range(8))
