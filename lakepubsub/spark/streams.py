"""A topic's history as a Structured Streaming source: delta-spark's ``readStream``.

``topic_stream(spark, lake, "projects/P/topics/T")`` is
``spark.readStream.format("delta").load(<the topic's messages table>)`` with
the options the lake's maintenance needs, optionally with a Pub/Sub filter
and a first offset. Give it a checkpoint and an available-now trigger and it
is a scheduled batch consumer that Spark keeps exactly once (``jobs/stream_consume.py``).

What the maintenance commits look like to a Delta stream:

- compaction rewrites files with ``dataChange=false`` adds and removes, which
  a stream skips (its rows were read from the files they replace);
- the truncation job's delete removes files with ``dataChange=true`` and, for
  the file straddling its bound, adds the kept rows back in the same commit:
  a plain stream stops at it, and so does ``ignoreDeletes`` (it tolerates only
  commits that remove whole files and add nothing). ``skipChangeCommits``
  skips the whole commit: the deleted rows were read (or are read) from the
  files that added them, and the re-added ones were too, so nothing repeats.

A stream resumes from the table version its checkpoint reached, so it needs
the log from there on: an S3 lake keeps 7 days of log, a local lake 30
seconds (``constants.LOCAL_LOG_RETENTION``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from lakepubsub.engine import Engine
from lakepubsub.resources.names import TopicName
from lakepubsub.resources.subscriptions import parse_subscription_filter
from lakepubsub.settings import Settings
from lakepubsub.spark.tables import DELTA, configure_storage, spark_path

# Delta source options: skip commits that delete or rewrite rows (the truncation job's).
SKIP_CHANGE_COMMITS = "skipChangeCommits"
MAX_FILES_PER_TRIGGER = "maxFilesPerTrigger"


def messages_stream(
    spark: SparkSession,
    uri: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    max_files_per_trigger: int | None = None,
) -> DataFrame:
    """A messages table (by URI) as a streaming DataFrame that tolerates compaction
    and the truncation job's deletes. Columns: the messages table's."""
    configure_storage(spark, uri, storage_options)
    reader = spark.readStream.format(DELTA).option(SKIP_CHANGE_COMMITS, "true")
    if max_files_per_trigger is not None:
        reader = reader.option(MAX_FILES_PER_TRIGGER, str(max_files_per_trigger))
    return reader.load(spark_path(uri))


def topic_stream(
    spark: SparkSession,
    lake: str | Settings,
    topic: str | TopicName,
    *,
    storage_options: Mapping[str, str] | None = None,
    filter: str = "",
    starting_offset: int | None = None,
    max_files_per_trigger: int | None = None,
) -> DataFrame:
    """A topic's messages as a streaming DataFrame, oldest first.

    ``lake`` is a lake root (S3 settings then from ``storage_options`` or the AWS
    variables) or ``Settings``. ``filter`` is a Pub/Sub subscription filter
    (``attributes.k = "v"``); ``starting_offset`` drops older messages (a new
    checkpoint starts with every message the table holds).
    """
    settings = lake if isinstance(lake, Settings) else _settings(lake, storage_options)
    name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
    with Engine(settings) as engine:
        uri = engine.lake.messages_uri(engine.get_topic(name).uid)
        options = engine.lake.storage_options
    frame = messages_stream(
        spark, uri, storage_options=options, max_files_per_trigger=max_files_per_trigger
    )
    if starting_offset is not None:
        frame = frame.where(sf.col("offset") >= starting_offset)
    if filter:
        frame = frame.where(filter_column(filter))
    return frame


def filter_column(text: str) -> Column:
    """A Pub/Sub subscription filter as a boolean column over ``attributes``, matching
    as the API matches (a plain Python UDF: Arrow UDFs would need pandas on executors)."""
    parse_subscription_filter(text)  # a bad filter fails here, not in a task
    compiled: dict[str, Any] = {}

    def matches(attributes: dict[str, str] | None) -> bool:
        if text not in compiled:
            compiled[text] = parse_subscription_filter(text)
        return bool(compiled[text].matches(attributes or {}))

    return sf.udf(matches, "boolean", useArrow=False)("attributes")


def _settings(lake: str, storage_options: Mapping[str, str] | None) -> Settings:
    if storage_options is not None:
        return Settings(lake=lake, storage_options=dict(storage_options))
    return Settings.from_env({**os.environ, "LAKEPUBSUB_LAKE": lake})
