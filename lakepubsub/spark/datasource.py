"""The ``lakedelta`` Spark data source: Delta tables read and written through delta-rs.

Options (keys are case-insensitive)::

    path            table location: a local path, file:// or s3:// URI (required)
    versionAsOf     read this table version (alias: version)
    timestampAsOf   read the last version committed at or before this ISO 8601 time (UTC if no zone)
    txnAppId        with txnVersion: an idempotent write (skipped if the table already
    txnVersion        recorded this app id at this version or later)
    partitionBy     partition columns when a write creates the table (comma-separated)
    userMetadata    stored in the commit's commitInfo
    filters         JSON [[column, op, value], ...]: the relation holds only matching rows;
                    files are skipped by their statistics (ops: = != < <= > >= in,
                    "not in", "is null", "is not null")
    pushFilters     "true" to take filters Spark pushes (needs
                    spark.sql.python.filterPushdown.enabled). Off by default: Spark
                    4.2.0 keeps a pushdown's read plan on the relation, so a later
                    query on the same DataFrame or view that pushes no filter would
                    reuse it and silently miss rows. Use it on single-query relations.
    batchRows       rows per Arrow batch handed to Spark (default 8192)
    anything else   a delta-rs storage option, e.g. AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
                    AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP

A DataFrame reads the version that was current when it was loaded, unless a
version or time is given. Writes commit once, on the driver, after every task
succeeded; a failed write leaves the table as it was.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
from pyspark.sql.types import StructType

from lakepubsub.spark import _table
from lakepubsub.spark._options import SourceOptions
from lakepubsub.spark.reader import DeltaFilterReader, DeltaReader
from lakepubsub.spark.writer import DeltaWriter

SOURCE_NAME = "lakedelta"


class DeltaDataSource(DataSource):
    """Spark's entry point; see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        options = SourceOptions.parse(self.options)
        table = _table.open_table(
            options.path,
            options.delta_storage_options,
            version=options.version,
            timestamp=options.timestamp,
        )
        # Spark pickles this instance after schema(); the reader plans the same
        # version, so the schema and the files always agree.
        self.pinned_version = table.version()
        return _table.spark_schema(table)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options)
        version = getattr(self, "pinned_version", None)
        if version is None:
            version = options.version
        reader_class = DeltaFilterReader if options.push_filters else DeltaReader
        return reader_class(options, schema, version)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return DeltaWriter.prepare(SourceOptions.parse(self.options), schema, overwrite=overwrite)
