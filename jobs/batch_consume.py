"""Scheduled batch consumer: a subscription's new messages, through Spark, into a Delta table.

    spark-submit jobs/batch_consume.py --subscription projects/P/subscriptions/S \\
        --target PATH_OR_URI (--sql "SELECT … FROM messages" | --transform MODULE:FUNCTION)
    lakepubsub jobs run batch-consume … (the same options)

Each run reads the subscription's messages from its cursor to the topic head as
a Spark DataFrame (straight from the messages table, not over HTTP), applies
the transformation (a SQL statement over the temporary view ``messages``, or
a Python function ``DataFrame -> DataFrame``), appends the result to the
target Delta table and acknowledges what it read. The DataFrame has the
messages table's columns: offset, message_id, publish_time, data, attributes,
ordering_key, size. A subscription filter is applied as the API applies it.

Exactly once, across crashes and reruns: the batch is ``[start, end)`` with
``end`` the head (or ``start + max_messages``), and the append records the
Delta transaction ``(app id "lakepubsub-batch-{subscription uid}", version
end)`` in the same commit as its rows. A run first asks the target which
version it last recorded; anything the target already holds beyond the
subscription's cursor was written by a run that crashed before acknowledging,
so it is acknowledged now and the next batch starts after it. A run that
crashes before its commit wrote nothing (the writer deletes its files), and
the rerun reads the same start. So no message is written twice or skipped.

The contract: the subscription is dedicated to this consumer. Do not pull
from it (messages out on a lease when a run acknowledges are acknowledged
without being written), run one consumer per subscription at a time (the
scheduler and cron never overlap runs of one job), and write each
subscription to its own target (or one target per subscription uid). A
truncation policy on it drops messages as for any subscription; its events
are not delivered to the batch consumer.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from deltalake import DeltaTable

from jobs.common import FileStats, JobContext, Stopwatch
from jobs.script import main_for
from lakepubsub import errors
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.names import SubscriptionName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lakepubsub.jobs.batch_consume")

APP_ID_PREFIX = "lakepubsub-batch-"
VIEW = "messages"

Transform = Callable[["DataFrame"], "DataFrame"]


@dataclass(frozen=True)
class BatchOptions:
    """One consumer: where to read, where to write, what to do in between."""

    subscription: str  # projects/{project}/subscriptions/{id}
    target: str  # a local path or s3:// URI of a Delta table (created on first write)
    sql: str | None = None  # over the view ``messages``
    transform: str | None = None  # "package.module:function" or "path/file.py:function"
    max_messages: int | None = None  # per run; None: everything up to the head
    partition_by: tuple[str, ...] = ()  # when the first write creates the target


@dataclass
class ConsumeReport:
    """What a consumer's run did (both consumers report so)."""

    status: str = ""  # written | nothing new
    rows_written: int = 0
    seconds: float = 0.0

    def messages_read(self) -> int:
        raise NotImplementedError

    def summary(self) -> dict[str, object]:
        return {
            "status": self.status,
            "messages": self.messages_read(),
            "rows_written": self.rows_written,
        }


@dataclass
class BatchReport(ConsumeReport):
    job: str = "batch-consume"
    subscription: str = ""
    start_offset: int = 0
    end_offset: int = 0
    recovered_to: int | None = None  # acknowledged what a crashed run had written

    def messages_read(self) -> int:
        return self.end_offset - self.start_offset


def app_id(subscription_uid: str) -> str:
    """The Delta transaction id a consumer of this subscription writes under."""
    return APP_ID_PREFIX + subscription_uid


def load_transform(spec: str) -> Transform:
    """``module:function`` or ``path/to/file.py:function`` as a callable."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise errors.InvalidArgument(f"transform {spec!r}: expected MODULE:FUNCTION")
    if where.endswith(".py"):
        path = Path(where)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise errors.InvalidArgument(f"transform {spec!r}: cannot load {where}")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    function = getattr(module, attr, None)
    if not callable(function):
        raise errors.InvalidArgument(f"transform {spec!r}: {attr} is not a function")
    transform: Transform = function
    return transform


def chosen_transform(sql: str | None, spec: str | None, transform: Transform | None) -> Transform:
    """What a consumer applies to each batch: exactly one of a SQL statement over the view
    ``messages``, a transform's ``spec`` (`load_transform`) or the function itself."""
    if sum(x is not None for x in (sql, spec, transform)) != 1:
        raise errors.InvalidArgument("give exactly one of a SQL statement or a transform")
    if transform is not None:
        return transform
    if spec is not None:
        return load_transform(spec)

    def select(frame: DataFrame) -> DataFrame:
        frame.createOrReplaceTempView(VIEW)
        return frame.sparkSession.sql(sql or "")

    return select


def run(ctx: JobContext, options: BatchOptions, transform: Transform | None = None) -> BatchReport:
    """Consume one batch: read, transform, write with its transaction id, acknowledge."""
    transform = chosen_transform(options.sql, options.transform, transform)
    watch = Stopwatch()
    engine = ctx.engine
    ctx.settle_intake()
    name = SubscriptionName.parse(options.subscription)
    sub = engine.get_subscription(name)
    app = app_id(sub.uid)
    report = BatchReport(subscription=name.path)
    storage = _target_storage(ctx, options.target)
    start = engine.subscription_state(name).cursor.frontier
    written = _recorded_version(options.target, storage, app)
    if written is not None and written > start:
        # A run wrote [.., written) and stopped before acknowledging it.
        log.warning("%s: acknowledging to %d, written by an earlier run", name.path, written)
        engine.commit_offset(name, written)
        report.recovered_to = start = written
    messages = MessagesTable(ctx.lake, sub.topic_uid)
    head = messages.head()
    end = head if options.max_messages is None else min(head, start + options.max_messages)
    report.start_offset = report.end_offset = start
    if end <= start:
        report.status = "nothing new"
        report.seconds = watch.seconds()
        return report
    result = transform(_messages_frame(ctx, messages, start, end, sub.filter))
    rows_before = _rows(options.target, storage)
    writer = (
        result.write.format("lakedelta")
        .mode("append")
        .option("txnAppId", app)
        .option("txnVersion", str(end))
        .options(**(storage or {}))
    )
    if options.partition_by:
        writer = writer.option("partitionBy", ",".join(options.partition_by))
    writer.save(options.target)
    engine.commit_offset(name, end)
    report.status = "written"
    report.end_offset = end
    report.rows_written = _rows(options.target, storage) - rows_before
    report.seconds = watch.seconds()
    log.info(
        "%s: offsets [%d, %d) -> %d rows in %s",
        name.path,
        start,
        end,
        report.rows_written,
        options.target,
    )
    return report


def _messages_frame(
    ctx: JobContext, messages: MessagesTable, start: int, end: int, filter_text: str
) -> DataFrame:
    from pyspark.sql import functions as sf  # noqa: PLC0415 — PySpark loads when the job runs, not when the CLI imports this

    from lakepubsub.spark import read_table  # noqa: PLC0415 — likewise

    frame = read_table(
        ctx.spark, messages.uri, version=messages.version, storage_options=ctx.lake.storage_options
    ).where((sf.col("offset") >= start) & (sf.col("offset") < end))
    if not filter_text:
        return frame
    from lakepubsub.spark.streams import filter_column  # noqa: PLC0415 — likewise

    return frame.where(filter_column(filter_text))


def _target_storage(ctx: JobContext, target: str) -> dict[str, str] | None:
    """A target on the lake's object store is reached with the lake's credentials."""
    if urlparse(target).scheme in ("", "file"):
        return None
    return dict(ctx.lake.storage_options or {}) or None


def _recorded_version(target: str, storage: dict[str, str] | None, app: str) -> int | None:
    if not DeltaTable.is_deltatable(target, storage_options=storage):
        return None
    version = DeltaTable(target, storage_options=storage).transaction_version(app)
    return None if version is None else int(version)


def _rows(target: str, storage: dict[str, str] | None) -> int:
    if not DeltaTable.is_deltatable(target, storage_options=storage):
        return 0
    return FileStats.of(DeltaTable(target, storage_options=storage)).rows


if __name__ == "__main__":
    main_for("batch-consume")
