"""The ``lakedelta`` Spark writer: DataFrames appended to Delta tables with one delta-rs commit.

Kept because delta-spark's own writer commits on S3 through a LogStore that
assumes a single writer; delta-rs commits with a conditional PUT. Reads use
delta-spark (``format("delta")``, see ``tables``).

Options (keys are case-insensitive)::

    path            table location: a local path, file:// or s3:// URI (required)
    txnAppId        with txnVersion: an idempotent write (skipped if the table already
    txnVersion        recorded this app id at this version or later)
    partitionBy     partition columns when a write creates the table (comma-separated)
    userMetadata    stored in the commit's commitInfo
    anything else   a delta-rs storage option, e.g. AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
                    AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP

Writes commit once, on the driver, after every task succeeded; a failed write
leaves the table as it was.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceWriter
from pyspark.sql.types import StructType

from lakepubsub.spark._options import SourceOptions
from lakepubsub.spark.writer import DeltaWriter

SOURCE_NAME = "lakedelta"


class DeltaDataSource(DataSource):
    """Spark's entry point for ``df.write.format("lakedelta")``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return DeltaWriter.prepare(SourceOptions.parse(self.options), schema, overwrite=overwrite)
