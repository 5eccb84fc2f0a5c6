"""Spark sessions set up for lakepubsub's Delta tables: delta-spark, s3a, UTC, quiet logs."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from lakepubsub import errors
from lakepubsub.settings import Settings
from lakepubsub.spark import jars
from lakepubsub.spark.datasource import DeltaDataSource
from lakepubsub.spark.tables import s3a_conf

# Small shuffles: lakepubsub's Spark jobs aggregate one topic at a time on a few cores.
DEFAULT_SHUFFLE_PARTITIONS = 8
# Set on a session once the lakedelta writer is registered in it.
_REGISTERED_CONF = "lakepubsub.spark.lakedeltaRegistered"
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
# PySpark logs every failed query to these as a JSON line with the whole JVM stack
# trace, on top of the exception it raises (which callers report).
_QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
JAVA_MISSING = (
    "Spark needs a JDK 17 on PATH (or JAVA_HOME): no java found; "
    "install one (Debian: apt-get install openjdk-17-jre-headless)"
)

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
    quiet_fetch: bool = True,
) -> SparkSession:
    """A SparkSession (new, or the running one) with delta-spark and hadoop-aws.

    ``s3a://`` reaches S3 with the AWS variables the service reads
    (``Settings.from_env``); ``tables.read_table`` maps the lake's ``s3://`` URIs.
    Python workers run this interpreter. ``FailedPrecondition`` when there is no
    Java to start Spark with. When the jars are not on this machine yet, a child
    process fetches them first and Ivy's report goes to a log file
    (``quiet_fetch=False``: this session resolves them, reporting on stderr).
    """
    check_java()
    if quiet_fetch and jars.resolved_jars() is None:
        jars.fetch_quietly()
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
    quiet_query_errors()
    if "spark.jars.packages" in settings:
        jars.remember(dict(spark.sparkContext.getConf().getAll()))
    register_source(spark)
    return spark


def check_java() -> None:
    """``FailedPrecondition`` (one line) when Spark could not start a JVM: no
    ``$JAVA_HOME/bin/java``, and no ``java`` on PATH. PySpark would fail with a
    long traceback about its gateway (JAVA_GATEWAY_EXITED)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        if not os.access(os.path.join(home, "bin", "java"), os.X_OK):
            raise errors.FailedPrecondition(f"{JAVA_MISSING} (JAVA_HOME={home} has no bin/java)")
    elif shutil.which("java") is None:
        raise errors.FailedPrecondition(JAVA_MISSING)


def quiet_query_errors() -> None:
    """Silence PySpark's per-failure JSON log lines; the exceptions still carry the errors."""
    for name in _QUERY_CONTEXT_LOGGERS:
        PySparkLogger.getLogger(name).disabled = True


def register_source(spark: SparkSession) -> None:
    """Register the ``lakedelta`` writer in ``spark``; a no-op when it already is."""
    if spark.conf.get(_REGISTERED_CONF, "false") == "true":
        return
    spark.dataSource.register(DeltaDataSource)
    spark.conf.set(_REGISTERED_CONF, "true")
