"""The batch writer: tasks write parquet files, the driver commits them once through delta-rs.

Each task writes one file per partition value it sees and returns their add
actions. ``commit`` checks every file exists with the size the task reported
and that its partition values fit the table's partition columns (delta-rs's
``create_write_transaction`` checks neither), then commits one transaction.
With ``txnAppId``/``txnVersion`` the commit records the pair and a repeat of an
already recorded (or older) version commits nothing: exactly-once for a
scheduled job that retries a batch. A failed write deletes its files; files of
task attempts Spark discards (a killed executor, a losing speculative attempt)
are never committed and go with the next vacuum.

Append adds rows; overwrite replaces every row of the table. The DataFrame's
columns must match the table's by name (any case) and type; table columns it
lacks are written as nulls. A write to a path without a table creates one
(``partitionBy`` option for its partition columns).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lakepubsub import errors
from lakepubsub.spark import _commit, _table
from lakepubsub.spark._commit import AddedFile, DeltaCommitMessage
from lakepubsub.spark._files import TableFiles
from lakepubsub.spark._options import SourceOptions
from lakepubsub.spark._stats import DEFAULT_INDEXED_COLUMNS, FileStats

_INDEXED_COLUMNS = "delta.dataSkippingNumIndexedCols"


@dataclass
class _OpenFile:
    path: str
    sink: pa.NativeFile
    writer: pq.ParquetWriter
    stats: FileStats
    partition_values: dict[str, str | None] = field(default_factory=dict)


class DeltaWriter(DataSourceArrowWriter):
    """Writes a DataFrame into a Delta table (append or overwrite); see the module docstring."""

    def __init__(
        self,
        plan: _commit.WritePlan,
        *,
        input_names: dict[str, str],
        indexed_columns: int = DEFAULT_INDEXED_COLUMNS,
    ) -> None:
        self.plan = plan
        self.options = plan.options
        self.table_schema = plan.table_schema
        self.partition_columns = plan.partition_columns
        self.input_names = input_names
        self.indexed_columns = indexed_columns

    @classmethod
    def prepare(cls, options: SourceOptions, schema: StructType, *, overwrite: bool) -> DeltaWriter:
        """Check the DataFrame fits the table (or will create it) before any task runs."""
        storage = options.delta_storage_options
        if _table.exists(options.path, storage):
            table = _table.open_table(options.path, storage)
            columns = _table.partition_columns(table)
            if options.partition_by and options.partition_by != columns:
                raise errors.InvalidArgument(
                    f"{options.path} is partitioned by {list(columns)},"
                    f" not {list(options.partition_by)}"
                )
            input_names = _commit.match_columns(schema, _table.spark_schema(table))
            indexed = int(
                table.metadata().configuration.get(_INDEXED_COLUMNS) or DEFAULT_INDEXED_COLUMNS
            )
            table_schema = _table.arrow_schema(table)
            create = False
        else:
            missing = [c for c in options.partition_by if c not in schema.fieldNames()]
            if missing:
                raise errors.InvalidArgument(
                    f"partition columns {missing} are not in the DataFrame"
                )
            columns = options.partition_by
            input_names = {f.name: f.name for f in schema.fields}
            indexed = DEFAULT_INDEXED_COLUMNS
            table_schema = to_arrow_schema(schema, timezone="UTC")
            create = True
        for name in columns:
            _commit.check_partition_type(name, table_schema.field(name).type)
        plan = _commit.WritePlan(options, table_schema, columns, overwrite, create)
        return cls(plan, input_names=input_names, indexed_columns=indexed)

    # -- tasks ---------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaCommitMessage:
        """Write this task's rows; runs on an executor."""
        files = TableFiles(self.options.path, self.options.delta_storage_options)
        data_schema = pa.schema(
            [f for f in self.table_schema if f.name not in self.partition_columns]
        )
        task = uuid.uuid4()
        open_files: dict[tuple[str | None, ...], _OpenFile] = {}
        try:
            for batch in iterator:
                rows = self._conform(batch)
                for key, part in self._split(rows):
                    target = open_files.get(key)
                    if target is None:
                        target = self._open(files, data_schema, key, task, len(open_files))
                        open_files[key] = target
                    data = part.select(data_schema.names)
                    target.writer.write_batch(data)
                    target.stats.update(data)
            return DeltaCommitMessage(tuple(self._close(files, f) for f in open_files.values()))
        except BaseException:
            for open_file in open_files.values():
                open_file.sink.close()
            files.delete(f.path for f in open_files.values())
            raise

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = []
        for target in self.table_schema:
            source = self.input_names.get(target.name)
            if source is None:
                column = pa.nulls(batch.num_rows, target.type)
            else:
                column = batch.column(source)
                if column.type != target.type:
                    column = column.cast(target.type)
            if not target.nullable and column.null_count:
                raise errors.InvalidArgument(f"null value in non-nullable column {target.name}")
            arrays.append(column)
        return pa.RecordBatch.from_arrays(arrays, schema=self.table_schema)

    def _split(
        self, batch: pa.RecordBatch
    ) -> Iterator[tuple[tuple[str | None, ...], pa.RecordBatch]]:
        if not self.partition_columns:
            yield (), batch
            return
        keys = pa.Table.from_batches([batch]).select(list(self.partition_columns))
        for row in (
            keys.group_by(list(self.partition_columns), use_threads=False).aggregate([]).to_pylist()
        ):
            mask = None
            for name in self.partition_columns:
                column = batch.column(name)
                value = row[name]
                hit = (
                    pc.is_null(column)
                    if value is None
                    else pc.fill_null(pc.equal(column, value), False)
                )
                mask = hit if mask is None else pc.and_(mask, hit)
            values = tuple(_commit.partition_string(row[name]) for name in self.partition_columns)
            yield values, batch.filter(mask)

    def _open(
        self,
        files: TableFiles,
        data_schema: pa.Schema,
        key: tuple[str | None, ...],
        task: uuid.UUID,
        number: int,
    ) -> _OpenFile:
        values = dict(zip(self.partition_columns, key, strict=True))
        path = _commit.partition_directory(values) + f"part-{number:05d}-{task}-c000.snappy.parquet"
        sink = files.open_output(path)
        writer = pq.ParquetWriter(sink, data_schema, compression="snappy")
        stats = FileStats(data_schema, indexed_columns=self.indexed_columns)
        return _OpenFile(path, sink, writer, stats, values)

    def _close(self, files: TableFiles, open_file: _OpenFile) -> AddedFile:
        open_file.writer.close()
        open_file.sink.close()
        size = files.sizes([open_file.path])[0]
        if size is None:
            raise errors.Unavailable(f"written file {open_file.path} is missing")
        return AddedFile(
            path=open_file.path,
            size=size,
            partition_values=open_file.partition_values,
            modification_time=int(time.time() * 1000),
            stats=open_file.stats.to_json(),
        )

    # -- driver --------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit.commit(self.plan, _commit.added_files(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        added = [f for m in messages if isinstance(m, DeltaCommitMessage) for f in m.files]
        _commit.discard_unless_committed(self.options, added)
