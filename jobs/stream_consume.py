"""Scheduled batch consumer on Structured Streaming: a topic's messages into a Delta table.

    spark-submit jobs/stream_consume.py --topic projects/P/topics/T \\
        --target PATH_OR_URI --checkpoint PATH_OR_URI \\
        (--sql "SELECT … FROM messages" | --transform MODULE:FUNCTION) [--filter EXPR]
    lakepubsub jobs run stream-consume … (the same options)

Each run is a standard Spark stream,
``spark.readStream.format("delta").load(<the topic's messages table>)``
(``lakepubsub.spark.streams.topic_stream``), with an available-now trigger: it
processes every message committed since the checkpoint's last run (on the
first run, every message the table holds, or those from
``--starting-offset``), in micro-batches, then stops. Each micro-batch goes
through the transformation (a SQL statement over the view ``messages``, or a
function ``DataFrame -> DataFrame``, as ``jobs/batch_consume.py`` takes them)
and is appended to the target by delta-spark, which is fine: the target is
the consumer's own table, not one of the lake's.

Exactly once, across crashes and reruns: Spark writes a micro-batch's offsets
to the checkpoint before running it and marks it done after, and a crash
in between reruns the same batch; its append carries the Delta transaction
``(app id "lakepubsub-stream-{query id}", version batch id)``, so a rerun of
a batch the target already holds writes nothing. The query id lives in the
checkpoint: a new checkpoint is a new consumer, starting again from the oldest
message.

It reads no subscription: the checkpoint is its cursor, so nothing is
acknowledged and nothing holds back the truncation job, which deletes
messages past the topic's retention (7 days unless set) that no subscription
needs. Run it more often than that, and more often than the topic's table
keeps its log (7 days on S3, 30 seconds on a local lake): a stream resumes
from the table version its checkpoint reached and needs every commit since.
A run that finds the log gone fails with a one-line error and writes nothing.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltalake import DeltaTable

from jobs.batch_consume import ConsumeReport, Transform, chosen_transform
from jobs.common import FileStats, JobContext, Stopwatch
from jobs.script import main_for
from lakepubsub import errors
from lakepubsub.resources.names import TopicName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lakepubsub.jobs.stream_consume")

APP_ID_PREFIX = "lakepubsub-stream-"
# How long a micro-batch waits for the query to say its id (it does as soon as it starts).
QUERY_ID_WAIT_S = 60.0
# delta-spark's errors when the log no longer holds the versions after the checkpoint's.
_LOG_GONE = ("DELTA_LOG_FILE_NOT_FOUND", "failOnDataLoss")


@dataclass(frozen=True)
class StreamOptions:
    """One streaming consumer: the topic, its checkpoint, where to write, what to do."""

    topic: str  # projects/{project}/topics/{id}
    target: str  # a local path or s3:// URI of a Delta table (created on first write)
    checkpoint: str  # a local path or s3:// URI, this consumer's own
    sql: str | None = None  # over the view ``messages``
    transform: str | None = None  # "package.module:function" or "path/file.py:function"
    filter: str = ""  # a Pub/Sub subscription filter over the attributes
    starting_offset: int | None = None  # a new checkpoint's first offset
    max_files_per_trigger: int | None = None  # files of the topic per micro-batch
    partition_by: tuple[str, ...] = ()  # when the first write creates the target


@dataclass
class StreamReport(ConsumeReport):
    job: str = "stream-consume"
    topic: str = ""
    query_id: str = ""
    batches: int = 0  # micro-batches run, a batch redone after a crash included
    messages: int = 0  # read from the topic (before the filter)

    def messages_read(self) -> int:
        return self.messages


def app_id(query_id: str) -> str:
    """The Delta transaction id the consumer with this checkpoint writes under."""
    return APP_ID_PREFIX + query_id


def run(
    ctx: JobContext, options: StreamOptions, transform: Transform | None = None
) -> StreamReport:
    """Consume everything new since the checkpoint's last run, in micro-batches, exactly once."""
    from pyspark.errors import StreamingQueryException  # noqa: PLC0415 — PySpark loads when the job runs, not when the CLI imports this

    from lakepubsub.spark.streams import topic_stream  # noqa: PLC0415 — likewise
    from lakepubsub.spark.tables import configure_storage, spark_path  # noqa: PLC0415 — likewise

    apply = chosen_transform(options.sql, options.transform, transform)
    watch = Stopwatch()
    spark = ctx.spark
    name = TopicName.parse(options.topic)
    storage = ctx.lake.storage_options
    stream = topic_stream(
        spark,
        ctx.settings,
        name,
        filter=options.filter,
        starting_offset=options.starting_offset,
        max_files_per_trigger=options.max_files_per_trigger,
    )
    for location in (options.target, options.checkpoint):
        configure_storage(spark, location, storage)
    target = spark_path(options.target)
    started = threading.Event()
    query_id: list[str] = []
    batch_ids: list[int] = []

    def each_batch(frame: DataFrame, batch_id: int) -> None:
        if not started.wait(QUERY_ID_WAIT_S):
            raise errors.Unavailable("the streaming query did not start")
        batch_ids.append(batch_id)
        writer = (
            apply(frame)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", app_id(query_id[0]))
            .option("txnVersion", str(batch_id))
        )
        if options.partition_by:
            writer = writer.partitionBy(*options.partition_by)
        writer.save(target)

    report = StreamReport(topic=name.path)
    rows_before = _rows(options.target, storage)
    query = (
        stream.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", spark_path(options.checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query_id.append(str(query.id))
    started.set()
    try:
        query.awaitTermination()
    except StreamingQueryException as exc:
        text = str(exc)
        if any(marker in text for marker in _LOG_GONE):
            raise errors.FailedPrecondition(
                f"{name.path}: the topic's log no longer holds the version the checkpoint"
                f" {options.checkpoint} reached (run the consumer more often than the log"
                " retention, or start a new checkpoint with --starting-offset)"
            ) from exc
        raise
    report.query_id = query_id[0]
    report.batches = len(batch_ids)
    # Rows the batches read; a batch the target already held is not read again.
    report.messages = sum(
        int(p.numInputRows) for p in query.recentProgress if p.batchId in batch_ids
    )
    report.rows_written = _rows(options.target, storage) - rows_before
    report.status = "written" if report.batches else "nothing new"
    report.seconds = watch.seconds()
    log.info(
        "%s: %d messages in %d micro-batches -> %d rows in %s",
        name.path,
        report.messages,
        report.batches,
        report.rows_written,
        options.target,
    )
    return report


def _rows(target: str, storage: dict[str, str] | None) -> int:
    options = storage if target.startswith("s3") else None
    if not DeltaTable.is_deltatable(target, storage_options=options):
        return 0
    return FileStats.of(DeltaTable(target, storage_options=options)).rows


if __name__ == "__main__":
    main_for("stream-consume")
