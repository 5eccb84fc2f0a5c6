"""The batch reader: Spark partitions of whole data files of a pinned table version.

Planning (driver) pins the version, lists its add actions, prunes them with the
filters and packs the survivors into read tasks (one file per task with
``maxPartitionBytes=0``). ``read`` (executor) opens each parquet file with
pyarrow, applies the filters row by row, adds the file's partition values and
yields Arrow batches in exactly the schema Spark asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lakepubsub import errors
from lakepubsub.spark import _filters, _scan, _table
from lakepubsub.spark._files import TableFiles
from lakepubsub.spark._options import SourceOptions


@dataclass(frozen=True)
class FilesPartition(InputPartition):
    """Whole data files one task reads, in order."""

    files: tuple[_scan.DataFile, ...]


class DeltaReader(DataSourceReader):
    """Reads one pinned version of a Delta table, only rows passing the ``filters`` option.

    Spark's filter pushdown is left to ``DeltaFilterReader`` (see ``_options.PUSH_FILTERS``).
    """

    def __init__(self, options: SourceOptions, schema: StructType, version: int | None) -> None:
        self.options = options
        self.schema = schema
        self.version = version
        try:
            target = to_arrow_schema(schema, timezone="UTC")
            self.filters: list[Filter] = _filters.from_triples(options.filters, target)
        except _filters.UnsupportedFilter as exc:
            raise errors.InvalidArgument(f"lakedelta: filters option: {exc}") from exc

    def partitions(self) -> Sequence[InputPartition]:
        table = _table.open_table(
            self.options.path,
            self.options.delta_storage_options,
            version=self.version,
            timestamp=self.options.timestamp if self.version is None else None,
        )
        self.version = table.version()
        columns = _table.partition_columns(table)
        actions, files = _scan.data_files(table, columns)
        kept = _scan.prune(actions, files, self.filters, _table.arrow_schema(table), columns)
        groups = _scan.pack(
            kept,
            max_bytes=self.options.max_partition_bytes,
            min_partitions=self.options.min_partitions,
        )
        return [FilesPartition(group) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FilesPartition):  # an empty table plans one placeholder
            return
        target = to_arrow_schema(self.schema, timezone="UTC")
        for file in partition.files:
            yield from read_file(self.options, file, target, self.filters)


class DeltaFilterReader(DeltaReader):
    """``DeltaReader`` taking the filters it can evaluate exactly (see ``_filters``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        target = to_arrow_schema(self.schema, timezone="UTC")
        for flt in filters:
            try:
                name = _filters.column_of(flt)
                _filters.to_expression(flt, target.field(name).type)
            except (_filters.UnsupportedFilter, KeyError):
                yield flt
            else:
                self.filters.append(flt)


def read_file(
    options: SourceOptions, file: _scan.DataFile, target: pa.Schema, filters: Sequence[Filter]
) -> Iterator[pa.RecordBatch]:
    """The rows of one data file that pass ``filters``, as batches of schema ``target``."""
    files = TableFiles(options.path, options.delta_storage_options)
    dataset = pads.dataset(files.location(file.path), format="parquet", filesystem=files.fs)
    present = set(dataset.schema.names)
    constants = {
        name: pa.scalar(value, type=target.field(name).type)
        for name, value in file.partition_values
        if name in target.names
    }
    # Partition-column filters were decided for the whole file at planning.
    partition_names = {name for name, _ in file.partition_values}
    row_filters = [f for f in filters if _filters.column_of(f) not in partition_names]
    expression = _filters.conjunction(
        [_filters.to_expression(f, target.field(_filters.column_of(f)).type) for f in row_filters]
    )
    # A filter on a column the file predates (schema evolution) sees nulls, so
    # it is applied after the missing column is filled in.
    late = expression is not None and any(_filters.column_of(f) not in present for f in row_filters)
    columns = [name for name in target.names if name in present and name not in constants]
    batches = dataset.to_batches(
        columns=columns, filter=None if late else expression, batch_size=options.batch_rows
    )
    for batch in batches:
        out = conform(batch, target, constants)
        if late and expression is not None:
            out = out.filter(expression)
        if out.num_rows:
            yield out


def conform(batch: pa.RecordBatch, target: pa.Schema, constants: dict[str, Any]) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s columns and types; constants and nulls fill the rest."""
    arrays = []
    for field in target:
        if field.name in constants:
            arrays.append(pa.repeat(constants[field.name], batch.num_rows))
        elif field.name in batch.schema.names:
            column = batch.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)
