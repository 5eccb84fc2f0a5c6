"""Delta tables from Spark through delta-rs: the ``lakedelta`` data source and helpers.

``local_session`` builds a configured SparkSession, ``read_table`` reads a pinned
table version by the fastest exact path, ``create_view`` exposes one to Spark
SQL, and ``df.write.format("lakedelta")`` appends or overwrites with one
delta-rs commit. See ``datasource`` for the options and ``tables`` for how a
read path is chosen.
"""

from lakepubsub.spark.datasource import SOURCE_NAME, DeltaDataSource
from lakepubsub.spark.session import create_view, local_session, register_source
from lakepubsub.spark.tables import ReadMode, read_table

__all__ = [
    "SOURCE_NAME",
    "DeltaDataSource",
    "ReadMode",
    "create_view",
    "local_session",
    "read_table",
    "register_source",
]
