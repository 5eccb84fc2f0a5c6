"""Compaction: bin-pack small files, vacuum, checkpoint and expire old log entries.

    spark-submit jobs/compact.py [--lake URI] [options]
    lakepubsub jobs run compact [--lake URI] [options]

Visits the catalog, the truncations log, every topic's messages table and every
subscription's lease table. A table with at least ``min_small_files`` files
below its target size is compacted: files are rewritten into target-sized files
by commits whose actions all carry ``dataChange=false``, so offsets, rows and
each file's offset range stay as they were, and readers and the API's writers
see the same data. A messages table compacts through the direct log
(``MessagesTable.compact``: runs of adjacent files in offset order), the others
with delta-rs (``optimize.compact``). Then files removed more than
``vacuum_retention_hours`` ago are deleted (from lease tables, files removed
more than ``LEASE_FILE_RETENTION_HOURS`` ago at most, found by listing), and a
checkpoint is written where the newest version has none.

Concurrency: a messages compaction moves past the publishers' appends and is
redone only against a writer that removed one of its files; delta-rs's
compaction of the other tables fails against a concurrent commit that touched
its files, and this job retries such a loss with jittered back-off and, past
its budget, leaves the table for the next run. After each compaction commit
the job checks that the row count of the version it produced equals the one
before it (``errors.Internal`` if not), so a compaction that lost a row cannot
go unnoticed.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from deltalake import CommitProperties, DeltaTable

from jobs import runs
from jobs.common import (
    FileStats,
    JobContext,
    Stopwatch,
    commit_info,
    errored,
    has_checkpoint,
    open_if_exists,
    retrying,
)
from jobs.script import main_for
from lakepubsub import constants, errors
from lakepubsub._lake import TableLog, storage_errors, table_schemas
from lakepubsub.publish.messages_table import MessagesTable

log = logging.getLogger("lakepubsub.jobs.compact")

MIB = 1024 * 1024

MESSAGES = "messages"
LEASES = "leases"
CATALOG = "catalog"
TRUNCATIONS = "truncations"


@dataclass(frozen=True)
class CompactOptions:
    # Target sizes: messages are scanned by Spark (large files, few tasks); lease
    # tables are read whole on every dispatcher cycle and stay small.
    messages_target_bytes: int = 128 * MIB
    leases_target_bytes: int = 32 * MIB
    # Compact a table once it has this many files below its target size: every
    # live file adds ~0.13 ms to the next write (measured with delta-rs 1.6.6 on 2 cores).
    min_small_files: int = 8
    vacuum: bool = True
    # Delta's own default for deleted files; it must exceed the longest reader
    # (a Spark job reading a pinned version), see docs/operations.md.
    vacuum_retention_hours: int = 168
    parallelism: int = 2

    def target_bytes(self, kind: str) -> int:
        if kind in (MESSAGES, TRUNCATIONS):
            return self.messages_target_bytes
        return self.leases_target_bytes


@dataclass(frozen=True)
class Target:
    """One table to maintain: its kind, the resource it belongs to, its location."""

    kind: str
    name: str
    uri: str
    uid: str = ""  # the topic's or subscription's uid


@dataclass
class TableResult:
    kind: str
    name: str
    status: str = "ok"  # ok | gone | busy | error: ...
    files_before: int = 0
    files_after: int = 0
    rows_before: int = 0
    rows_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    files_removed: int = 0
    files_added: int = 0
    files_vacuumed: int = 0
    checkpoint_version: int | None = None
    seconds: float = 0.0


@dataclass
class CompactReport:
    job: str = "compact"
    tables: list[TableResult] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, int]:
        return {
            "tables": len(self.tables),
            "compacted": sum(1 for t in self.tables if t.files_removed),
            "files_before": sum(t.files_before for t in self.tables),
            "files_after": sum(t.files_after for t in self.tables),
            "files_vacuumed": sum(t.files_vacuumed for t in self.tables),
            "busy": sum(1 for t in self.tables if t.status == "busy"),
            "failed": len(errored(self.tables)),
        }


def targets(ctx: JobContext) -> list[Target]:
    """Every table the job maintains, small shared tables first."""
    lake, engine = ctx.lake, ctx.engine
    found = [Target(CATALOG, "catalog", lake.catalog_uri)]
    if lake.exists(lake.truncations_uri):
        found.append(Target(TRUNCATIONS, "truncations", lake.truncations_uri))
    found += [
        Target(MESSAGES, t.name.path, lake.messages_uri(t.uid), t.uid) for t in engine.all_topics()
    ]
    found += [
        Target(LEASES, s.name.path, lake.leases_uri(s.uid), s.uid)
        for s in engine.all_subscriptions()
    ]
    return found


def run(ctx: JobContext, options: CompactOptions | None = None) -> CompactReport:
    """Compact, vacuum and checkpoint every table of the lake; one result per table."""
    options = options or CompactOptions()
    watch = Stopwatch()
    ctx.settle_intake()  # what moved is compacted with the rest
    todo = targets(ctx)
    report = CompactReport()
    ctx.progress.begin("compact", len(todo))
    with ThreadPoolExecutor(max(1, options.parallelism), thread_name_prefix="compact") as pool:
        futures = {pool.submit(compact_table, ctx, t, options): t for t in todo}
        for future in as_completed(futures):
            result = future.result()
            report.tables.append(result)
            ctx.progress.advance(f"{result.kind} {result.name}: {result.status}")
    ctx.progress.end()
    report.tables.sort(key=lambda t: (t.kind, t.name))
    report.seconds = watch.seconds()
    runs.record(ctx, report)
    return report


def compact_table(ctx: JobContext, target: Target, options: CompactOptions) -> TableResult:
    """Compact, vacuum and checkpoint one table; never raises (the status says what happened)."""
    watch = Stopwatch()
    result = TableResult(target.kind, target.name)
    try:
        _maintain(ctx, target, options, result)
    except errors.NotFound:
        result.status = "gone"  # deleted while the job ran
    except errors.Aborted as exc:
        result.status = "busy"
        log.warning("%s %s: too busy, left for the next run: %s", target.kind, target.name, exc)
    except Exception as exc:
        result.status = f"error: {type(exc).__name__}: {exc}"
        log.exception("%s %s: maintenance failed", target.kind, target.name)
    result.seconds = watch.seconds()
    return result


def _maintain(
    ctx: JobContext, target: Target, options: CompactOptions, result: TableResult
) -> None:
    table = open_if_exists(ctx.lake, target.uri)
    if table is None:
        raise errors.NotFound(target.uri)
    size = options.target_bytes(target.kind)
    before = FileStats.of(table, small_below=size)
    result.files_before, result.rows_before, result.bytes_before = (
        before.files,
        before.rows,
        before.bytes,
    )
    written_since_checkpoint = not has_checkpoint(ctx.lake, table)
    if target.kind == LEASES:
        _adopt_lease_retention(ctx, table, target)
    if before.small_files >= options.min_small_files:
        _compact(ctx, table, target, size, options, result)
    if options.vacuum:
        result.files_vacuumed = _vacuum(table, target, options, full=written_since_checkpoint)

    def checkpoint() -> None:
        with storage_errors(target.uri):
            table.update_incremental()
            if not has_checkpoint(ctx.lake, table):
                table.create_checkpoint()
                table.cleanup_metadata()
                result.checkpoint_version = table.version()

    retrying(target.kind, checkpoint)
    after = FileStats.of(table)
    result.files_after, result.rows_after, result.bytes_after = after.files, after.rows, after.bytes


def _compact(
    ctx: JobContext,
    table: DeltaTable,
    target: Target,
    size: int,
    options: CompactOptions,
    result: TableResult,
) -> None:
    if target.kind == MESSAGES:
        _compact_messages(ctx, target, size, options, result)
        return
    start = table.version()

    def attempt() -> dict[str, object]:
        with storage_errors(target.uri):
            table.update_incremental()
            metrics: dict[str, object] = table.optimize.compact(
                target_size=size,
                commit_properties=CommitProperties(custom_metadata={"lakepubsub.job": "compact"}),
            )
            return metrics

    metrics = retrying(target.kind, attempt)
    result.files_removed = int(str(metrics.get("numFilesRemoved", 0)))
    result.files_added = int(str(metrics.get("numFilesAdded", 0)))
    if result.files_removed:
        versions = range(start + 1, table.version() + 1)
        _check_rows_kept(ctx, target, [v for v in versions if _is_optimize(ctx, table, v)])
    _log_compaction(target, result)


def _compact_messages(
    ctx: JobContext, target: Target, size: int, options: CompactOptions, result: TableResult
) -> None:
    """A topic's messages compact through the direct log (``MessagesTable.compact``):
    its commit moves past the publishers' appends instead of losing to them."""

    def attempt() -> tuple[int, int, list[int]]:
        messages = MessagesTable(ctx.lake, target.uid)
        return messages.compact(target_bytes=size, min_small_files=options.min_small_files)

    result.files_removed, result.files_added, versions = retrying(target.kind, attempt)
    _check_rows_kept(ctx, target, versions)
    _log_compaction(target, result)


def _log_compaction(target: Target, result: TableResult) -> None:
    log.info(
        "%s %s: compacted %d files into %d",
        target.kind,
        target.name,
        result.files_removed,
        result.files_added,
    )


def _is_optimize(ctx: JobContext, table: DeltaTable, version: int) -> bool:
    return commit_info(ctx.lake, table, version).get("operation") == "OPTIMIZE"


def _check_rows_kept(ctx: JobContext, target: Target, versions: list[int]) -> None:
    """Each compaction commit holds as many rows as the version before it."""
    for version in versions:
        rows_before = FileStats.of(ctx.lake.open(target.uri, version=version - 1)).rows
        rows_after = FileStats.of(ctx.lake.open(target.uri, version=version)).rows
        if rows_before != rows_after:
            raise errors.Internal(
                f"{target.uri}: compaction commit {version} changed the row count "
                f"from {rows_before} to {rows_after}"
            )


def _adopt_lease_retention(ctx: JobContext, table: DeltaTable, target: Target) -> None:
    """A lease table created before lease tables kept removed files an hour
    (``LEASE_FILE_RETENTION_HOURS``) gets that property now, through the direct
    log: its commit moves past the subscription's lease commits (``set_properties``)."""
    wanted = table_schemas.LEASES_PROPERTIES[table_schemas.DELETED_FILE_RETENTION]
    if table.metadata().configuration.get(table_schemas.DELETED_FILE_RETENTION) == wanted:
        return  # the usual case: no reload for it

    def attempt() -> None:
        with storage_errors(target.uri):
            TableLog(ctx.lake, target.uri).set_properties(
                {table_schemas.DELETED_FILE_RETENTION: wanted}
            )

    retrying(target.kind, attempt)  # the steps after it reload ``table`` themselves


def _vacuum(table: DeltaTable, target: Target, options: CompactOptions, *, full: bool) -> int:
    """Delete files removed longer ago than the retention; ``full`` also lists the
    directory for files no commit references (appends that lost their race)."""
    retention_hours = options.vacuum_retention_hours
    if target.kind == LEASES:
        # A lease table's checkpoints drop tombstones after
        # LEASE_FILE_RETENTION_HOURS, so only a listing finds the files removed
        # before that; the listing stays short because they are kept no longer.
        retention_hours = min(retention_hours, constants.LEASE_FILE_RETENTION_HOURS)
        full = True

    def attempt() -> int:
        with storage_errors(target.uri):
            table.update_incremental()
            deleted = table.vacuum(
                retention_hours=retention_hours,
                dry_run=False,
                # The retention is ours to choose (and checked by the CLI), not
                # the table's delta.deletedFileRetentionDuration.
                enforce_retention_duration=False,
                full=full,
            )
        return len(deleted)

    return retrying(target.kind, attempt)


if __name__ == "__main__":
    main_for("compact")
