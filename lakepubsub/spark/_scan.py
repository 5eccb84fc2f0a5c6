"""Scan planning on the driver: the data files of a pinned version, pruned by filters.

Partition-column filters are decided exactly per file from its partition values;
data-column filters drop files whose add-action statistics prove no row matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql.datasource import Filter

from lakepubsub.spark import _filters

_ROW_INDEX = "__lakedelta_row"
# What opening one file is worth in bytes when packing files into tasks (Spark's
# spark.sql.files.openCostInBytes default).
OPEN_COST_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class DataFile:
    """One add action of the pinned version, as an executor needs it."""

    path: str  # decoded, relative to the table root, or an absolute path or URI
    size: int
    num_records: int | None
    partition_values: tuple[tuple[str, Any], ...]


def file_location(root: str, path: str) -> str:
    """Where a data file lives: an absolute local path or a URI."""
    if urlparse(path).scheme or path.startswith("/"):
        return path
    return f"{root.rstrip('/')}/{path}"


def data_files(
    table: DeltaTable, partition_columns: Sequence[str]
) -> tuple[pa.Table, list[DataFile]]:
    """The add actions of the table's loaded version, with typed partition values."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return actions, []
    schema = pa.schema(table.schema().to_arrow())
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    counts = _column(actions, "num_records")
    partitions = {
        name: _column(actions, f"partition.{name}", schema.field(name).type)
        for name in partition_columns
    }
    files = [
        DataFile(
            # Add-action paths are URI-encoded (Delta protocol); the file name is not.
            path=unquote(paths[i]),
            size=int(sizes[i]),
            num_records=counts[i],
            partition_values=tuple((name, values[i]) for name, values in partitions.items()),
        )
        for i in range(actions.num_rows)
    ]
    return actions, files


def prune(
    actions: pa.Table,
    files: list[DataFile],
    filters: Sequence[Filter],
    schema: pa.Schema,
    partition_columns: Sequence[str],
) -> list[DataFile]:
    """The files that may hold rows satisfying every filter (all of them taken filters)."""
    if not files or not filters:
        return files
    keep = [True] * len(files)
    partition_filters = [f for f in filters if _filters.column_of(f) in partition_columns]
    if partition_filters:
        values = pa.table(
            {
                name: pa.array(
                    [dict(f.partition_values)[name] for f in files], schema.field(name).type
                )
                for name in partition_columns
            }
        ).append_column(_ROW_INDEX, pa.array(range(len(files)), pa.int64()))
        expression = _filters.conjunction(
            [
                _filters.to_expression(f, schema.field(_filters.column_of(f)).type)
                for f in partition_filters
            ]
        )
        chosen = set(values.filter(expression).column(_ROW_INDEX).to_pylist())
        keep = [i in chosen for i in range(len(files))]
    counts = [f.num_records for f in files]
    for flt in filters:
        name = _filters.column_of(flt)
        if name in partition_columns:
            continue
        minimum = _column(actions, f"min.{name}")
        maximum = _column(actions, f"max.{name}")
        nulls = _column(actions, f"null_count.{name}")
        for i in range(len(files)):
            if keep[i]:
                stats = _filters.ColumnStats(minimum[i], maximum[i], nulls[i], counts[i])
                keep[i] = _filters.may_match(flt, stats)
    return [f for f, k in zip(files, keep, strict=True) if k]


def _column(actions: pa.Table, name: str, kind: pa.DataType | None = None) -> list[Any]:
    """A column of the add actions as Python values; all ``None`` when delta-rs left it out."""
    if name not in actions.column_names:
        return [None] * actions.num_rows
    column = actions.column(name)
    if kind is not None and column.type != kind:
        column = pc.cast(column, kind)
    return list(column.to_pylist())


def pack(
    files: Sequence[DataFile], *, max_bytes: int, min_partitions: int
) -> list[tuple[DataFile, ...]]:
    """Group whole files into read tasks the way Spark packs files for its own file sources.

    A task costs the Python data source ~100 ms on 2 cores before it reads a
    byte, so small files share tasks: groups of up to ``max_bytes`` (each file
    also counting ``OPEN_COST_BYTES``), made smaller when that leaves fewer than
    ``min_partitions`` groups. ``max_bytes`` of 0 gives every file its own task.
    """
    if max_bytes <= 0:
        return [(f,) for f in files]
    total = sum(f.size + OPEN_COST_BYTES for f in files)
    split = min(max_bytes, max(OPEN_COST_BYTES, total // max(1, min_partitions)))
    groups: list[tuple[DataFile, ...]] = []
    current: list[DataFile] = []
    current_bytes = 0
    for file in sorted(files, key=lambda f: f.size, reverse=True):
        if current and current_bytes + file.size > split:
            groups.append(tuple(current))
            current, current_bytes = [], 0
        current.append(file)
        current_bytes += file.size + OPEN_COST_BYTES
    if current:
        groups.append(tuple(current))
    return groups
