"""Driver-side delta-rs access for the ``lakedelta`` writer: open the target, describe it."""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql.types import StructType

from lakepubsub import errors
from lakepubsub._lake.storage import open_delta

_COLUMN_MAPPING_MODE = "delta.columnMapping.mode"


def open_table(path: str, storage_options: dict[str, str] | None) -> DeltaTable:
    """The latest version; ``NotFound`` when there is no table, ``FailedPrecondition``
    when it uses a feature the writer cannot write."""
    try:
        table = open_delta(path, storage_options=storage_options)
    except TableNotFoundError as exc:
        raise errors.NotFound(f"no Delta table at {path}") from exc
    check_readable(table)
    return table


def exists(path: str, storage_options: dict[str, str] | None) -> bool:
    return bool(DeltaTable.is_deltatable(path, storage_options=storage_options))


def check_readable(table: DeltaTable) -> None:
    """Refuse tables whose data files do not hold their rows as plain parquet columns."""
    mode = table.metadata().configuration.get(_COLUMN_MAPPING_MODE, "none")
    if mode not in ("none", None):
        raise errors.FailedPrecondition(f"{table.table_uri}: column mapping ({mode}) unsupported")
    features = table.protocol().reader_features or []
    if "deletionVectors" in features and pa.table(table.deletion_vectors().read_all()).num_rows:
        raise errors.FailedPrecondition(f"{table.table_uri}: deletion vectors unsupported")


def spark_schema(table: DeltaTable) -> StructType:
    """The table's schema as Spark sees it; Delta's schema JSON is Spark's schema JSON."""
    return StructType.fromJson(json.loads(table.schema().to_json()))


def arrow_schema(table: DeltaTable) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


def partition_columns(table: DeltaTable) -> tuple[str, ...]:
    return tuple(table.metadata().partition_columns)
