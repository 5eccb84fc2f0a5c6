"""Spark sessions set up for lakepubsub's Delta tables, and SQL views over them."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lakepubsub.spark.datasource import DeltaDataSource
from lakepubsub.spark.tables import ReadMode, read_table

# Small shuffles: lakepubsub's Spark jobs aggregate one topic at a time on a few cores.
DEFAULT_SHUFFLE_PARTITIONS = 8
# Set on a session once the data source is registered in it.
_REGISTERED_CONF = "lakepubsub.spark.lakedeltaRegistered"
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

SESSION_CONF = {
    # The Python data source's pushFilters only runs with this on (off by default in 4.2).
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Delta stores timestamps in UTC; a UTC session shows them as stored.
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def local_session(
    app_name: str = "lakepubsub",
    master: str = "local[*]",
    *,
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession (new, or the running one) set up for lakepubsub, ``lakedelta`` registered.

    Python workers run this interpreter, so they import pyarrow and deltalake
    from the same environment as the driver.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {**SESSION_CONF, "spark.sql.shuffle.partitions": str(shuffle_partitions)}
    if master.startswith("local"):
        # Binding to loopback skips the host-name lookup (and its warning) on laptops and CI.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    if _LOG4J_CONFIG.exists():
        settings["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j2.configurationFile={_LOG4J_CONFIG.as_uri()}"
        )
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_source(spark)
    return spark


def register_source(spark: SparkSession) -> None:
    """Register the ``lakedelta`` data source in ``spark``; a no-op when it already is."""
    if spark.conf.get(_REGISTERED_CONF, "false") == "true":
        return
    spark.dataSource.register(DeltaDataSource)
    spark.conf.set(_REGISTERED_CONF, "true")


def create_view(
    spark: SparkSession,
    name: str,
    path: str,
    *,
    version: int | None = None,
    timestamp: datetime | str | None = None,
    storage_options: Mapping[str, str] | None = None,
    filters: Sequence[tuple[str, str, Any]] = (),
    columns: Sequence[str] | None = None,
    mode: ReadMode = "auto",
) -> DataFrame:
    """Make a temporary view ``name`` of one pinned table version, for Spark SQL.

    The arguments are ``read_table``'s.
    The view keeps showing the version current when it was created; call again
    to move it forward. SQL can make one too, pinned the same way, on the
    Python data source path: ``CREATE TEMPORARY VIEW v USING lakedelta OPTIONS
    (path '...')``.
    """
    frame = read_table(
        spark,
        path,
        version=version,
        timestamp=timestamp,
        storage_options=storage_options,
        filters=filters,
        columns=columns,
        mode=mode,
    )
    frame.createOrReplaceTempView(name)
    return frame
