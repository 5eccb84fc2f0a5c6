"""The driver's half of a write: check the tasks' files, then one delta-rs commit.

delta-rs's ``create_write_transaction`` trusts its add actions: a missing file or
a partition value that does not fit the table leaves an unreadable table
(measured with delta-rs 1.6.6). So every add action is checked here first.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from lakepubsub import errors
from lakepubsub.spark import _table
from lakepubsub.spark._files import TableFiles
from lakepubsub.spark._options import SourceOptions

log = logging.getLogger(__name__)

# Hive's directory name for a null partition value, which Delta writers share.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Characters Hive (and so Spark's partition discovery) escapes in directory names, plus space.
_ESCAPED = frozenset("\"#%'*/:=?\\{[]^ \x7f") | frozenset(chr(c) for c in range(1, 32))


@dataclass(frozen=True)
class AddedFile:
    """One file a task wrote: what its add action will say."""

    path: str  # decoded, relative to the table root
    size: int
    partition_values: dict[str, str | None]
    modification_time: int  # ms since the epoch
    stats: str


@dataclass(frozen=True)
class DeltaCommitMessage(WriterCommitMessage):
    files: tuple[AddedFile, ...] = ()


@dataclass(frozen=True)
class WritePlan:
    """What the driver decided before the tasks ran."""

    options: SourceOptions
    table_schema: pa.Schema
    partition_columns: tuple[str, ...]
    overwrite: bool
    create: bool


# -- columns and partition values -------------------------------------------------


def match_columns(given: StructType, table: StructType) -> dict[str, str]:
    """Table column name -> DataFrame column name; ``InvalidArgument`` unless they fit.

    Names match case-insensitively, types exactly (nullability aside); a table
    column the DataFrame lacks must be nullable and is written as nulls.
    """
    by_name = {f.name.lower(): f for f in table.fields}
    matched: dict[str, str] = {}
    problems: list[str] = []
    for source in given.fields:
        target = by_name.get(source.name.lower())
        if target is None:
            problems.append(f"column {source.name} is not in the table")
        elif source.dataType.simpleString() != target.dataType.simpleString():
            problems.append(
                f"column {source.name} is {source.dataType.simpleString()},"
                f" the table has {target.dataType.simpleString()}"
            )
        else:
            matched[target.name] = source.name
    problems += [
        f"non-nullable column {f.name} is missing"
        for f in table.fields
        if f.name not in matched and not f.nullable
    ]
    if problems:
        raise errors.InvalidArgument("DataFrame does not fit the table: " + "; ".join(problems))
    return matched


def check_partition_type(name: str, kind: pa.DataType) -> None:
    if not (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_date32(kind)
    ):
        raise errors.InvalidArgument(f"cannot write partition column {name} of type {kind}")


def partition_string(value: Any) -> str | None:
    """Delta's serialized partition value; the empty string is null, as in Delta."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def partition_directory(values: Mapping[str, str | None]) -> str:
    """``col=value/`` per partition column, escaped as Hive and Spark expect."""
    return "".join(
        f"{_escape(name)}={NULL_PARTITION if value is None else _escape(value)}/"
        for name, value in values.items()
    )


def _parses_as(value: str, kind: pa.DataType) -> bool:
    try:
        if pa.types.is_integer(kind):
            pa.scalar(int(value), type=kind)
        elif pa.types.is_boolean(kind):
            return value in ("true", "false")
        elif pa.types.is_date32(kind):
            dt.date.fromisoformat(value)
    except (ValueError, OverflowError, pa.ArrowInvalid):
        return False
    return True


# -- commit ------------------------------------------------------------------------


def added_files(messages: Sequence[WriterCommitMessage | None]) -> list[AddedFile]:
    if any(not isinstance(m, DeltaCommitMessage) for m in messages):
        raise errors.Aborted("a write task returned no commit message; nothing committed")
    return [f for m in messages if isinstance(m, DeltaCommitMessage) for f in m.files]


def check_files(table: DeltaTable, files: Sequence[AddedFile], storage: TableFiles) -> None:
    """``FailedPrecondition`` unless every file exists and fits the table's partitioning."""
    columns = _table.partition_columns(table)
    schema = _table.arrow_schema(table)
    for added in files:
        if set(added.partition_values) != set(columns):
            raise errors.FailedPrecondition(
                f"{added.path}: partition values for {sorted(added.partition_values)},"
                f" the table is partitioned by {list(columns)}"
            )
        for name, value in added.partition_values.items():
            if value is not None and not _parses_as(value, schema.field(name).type):
                raise errors.FailedPrecondition(
                    f"{added.path}: partition value {value!r} is not a {schema.field(name).type}"
                )
    sizes = storage.sizes([f.path for f in files])
    for added, size in zip(files, sizes, strict=True):
        if size != added.size:
            found = "missing" if size is None else f"{size} bytes, not {added.size}"
            raise errors.FailedPrecondition(f"{added.path}: written file is {found}")


def commit(plan: WritePlan, files: list[AddedFile]) -> None:
    """Check and commit ``files`` as one transaction, or discard them."""
    options = plan.options
    storage = TableFiles(options.path, options.delta_storage_options)
    table = _target_table(plan)
    try:
        check_files(table, files, storage)
        if options.txn_app_id is not None and options.txn_version is not None:
            done = table.transaction_version(options.txn_app_id)
            if done is not None and done >= options.txn_version:
                log.info("%s: %s already wrote version %s", options.path, options.txn_app_id, done)
                storage.delete(f.path for f in files)
                return
        elif not files and not plan.overwrite:
            return
    except BaseException:
        storage.delete(f.path for f in files)
        raise
    actions: list[AddAction | RemoveAction] = [
        AddAction(
            # delta-rs URI-encodes the path into the log itself (Delta protocol).
            path=f.path,
            size=f.size,
            partition_values=f.partition_values,
            modification_time=f.modification_time,
            data_change=True,
            stats=f.stats,
        )
        for f in files
    ]
    try:
        table.create_write_transaction(
            actions,
            mode="overwrite" if plan.overwrite else "append",
            schema=table.schema(),
            partition_by=list(_table.partition_columns(table)) or None,
            commit_properties=_commit_properties(options),
        )
    except BaseException:
        discard_unless_committed(options, files)
        raise


def _target_table(plan: WritePlan) -> DeltaTable:
    options = plan.options
    storage = options.delta_storage_options
    if plan.create and not _table.exists(options.path, storage):
        DeltaTable.create(
            options.path,
            plan.table_schema,
            mode="ignore",
            partition_by=list(plan.partition_columns) or None,
            storage_options=storage,
        )
    return _table.open_table(options.path, storage)


def _commit_properties(options: SourceOptions) -> CommitProperties:
    transactions = None
    if options.txn_app_id is not None and options.txn_version is not None:
        transactions = [Transaction(options.txn_app_id, options.txn_version)]
    metadata = {"userMetadata": options.user_metadata} if options.user_metadata else None
    return CommitProperties(custom_metadata=metadata, app_transactions=transactions)


def discard_unless_committed(options: SourceOptions, files: Sequence[AddedFile]) -> None:
    """Delete a failed write's files, unless its commit landed after all.

    A delta-rs call can fail after the commit itself succeeded (a checkpoint in
    the post-commit hook, say); deleting those files would break the table.
    """
    if not files:
        return
    storage = TableFiles(options.path, options.delta_storage_options)
    try:
        table = _table.open_table(options.path, options.delta_storage_options)
        live = {unquote(p) for p in pa.table(table.get_add_actions()).column("path").to_pylist()}
    except errors.NotFound:
        live = set()
    except Exception:
        log.warning("%s: cannot tell if the write committed; keeping its files", options.path)
        return
    if not any(f.path in live for f in files):
        storage.delete(f.path for f in files)
