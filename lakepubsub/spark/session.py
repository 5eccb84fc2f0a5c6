"""Spark sessions set up for lakepubsub's Delta tables: delta-spark, s3a, UTC, quiet logs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from lakepubsub.settings import Settings
from lakepubsub.spark import jars
from lakepubsub.spark.tables import s3a_conf

# Small shuffles: lakepubsub's Spark jobs aggregate one topic at a time on a few cores.
DEFAULT_SHUFFLE_PARTITIONS = 8
# Set on a session once the lakedelta writer is registered in it.
_REGISTERED_CONF = "lakepubsub.spark.lakedeltaRegistered"
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

SESSION_CONF = {
    # Delta's own connector: format("delta"), delta.`path`, time travel, DESCRIBE HISTORY.
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Delta stores timestamps in UTC; a UTC session shows them as stored.
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # hadoop-aws 3.5 reads through analyticsaccelerator-s3 by default, which keeps
    # an entry per object read until the file system closes (HADOOP-20058) and ran
    # a 1 GiB driver out of heap on a scan of 100 files of 10 MB (bench/spark_scan.py
    # --s3). The classic stream streams each read.
    "spark.hadoop.fs.s3a.input.stream.type": "classic",
}


def local_session(
    app_name: str = "lakepubsub",
    master: str = "local[*]",
    *,
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession (new, or the running one) with delta-spark and hadoop-aws.

    ``s3a://`` reaches S3 with the AWS variables the service reads
    (``Settings.from_env``); ``tables.read_table`` maps the lake's ``s3://`` URIs.
    Python workers run this interpreter.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {
        **SESSION_CONF,
        **jars.jar_conf(),
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # delta-spark replays a table's log in a Spark job of this many tasks
        # (default 50): on a few local cores, 50 tasks per new snapshot cost
        # seconds (measured 10-15 s vs 2-3 s per count of a 100-row table).
        "spark.databricks.delta.snapshotPartitions": str(shuffle_partitions),
        **{
            f"spark.hadoop.{k}": v for k, v in s3a_conf(Settings.from_env().storage_options).items()
        },
    }
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
    if "spark.jars.packages" in settings:
        jars.remember(dict(spark.sparkContext.getConf().getAll()))
    register_source(spark)
    return spark


def register_source(spark: SparkSession) -> None:
    """Register the ``lakedelta`` writer in ``spark``; a no-op when it already is."""
    from lakepubsub.spark.datasource import DeltaDataSource

    if spark.conf.get(_REGISTERED_CONF, "false") == "true":
        return
    spark.dataSource.register(DeltaDataSource)
    spark.conf.set(_REGISTERED_CONF, "true")
