"""Spark over the lake: delta-spark reads, and the ``lakedelta`` writer for job outputs.

``local_session`` builds a SparkSession with delta-spark and hadoop-aws
(``jars``), ``read_table`` reads a table (or an older version of it) with
``format("delta")``, ``create_view`` exposes one to Spark SQL, ``views.register``
makes the lake's views, and ``df.write.format("lakedelta")`` appends with one
delta-rs commit (``datasource``).
"""

from lakepubsub.spark.datasource import SOURCE_NAME, DeltaDataSource
from lakepubsub.spark.session import local_session, register_source
from lakepubsub.spark.tables import create_view, read_table, spark_path

__all__ = [
    "SOURCE_NAME",
    "DeltaDataSource",
    "create_view",
    "local_session",
    "read_table",
    "register_source",
    "spark_path",
]
