"""``lakepubsub jobs run <job>``, ``lakepubsub jobs schedule`` and ``lakepubsub sql``.

Every job finds the lake as ``lakepubsub serve`` does: ``--lake`` (here or on
the ``lakepubsub`` group), else ``LAKEPUBSUB_LAKE``, with S3 settings from the
AWS variables. ``spark-submit jobs/<job>.py [options]`` runs the same commands.
A run prints its report as one JSON line on stdout (logs go to stderr) and
exits 1 if any table failed for a reason other than being busy. The shared
options are in ``jobs/options.py``, ``schedule`` in ``jobs/schedule.py`` and
``sql`` in ``jobs/sql.py``.

Nothing here imports PySpark or starts a JVM until a command needs Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import click

from jobs import batch_consume, compact, gc, stream_consume, truncate
from jobs.common import JobContext, report_json
from jobs.options import (
    Report,
    existing,
    lake_of,
    lake_option,
    log_option,
    master_option,
    setup_logging,
)
from jobs.schedule import schedule_command
from jobs.sql import sql
from lakepubsub.scheduler import default_progress

__all__ = ["jobs", "run", "sql"]

MIB = compact.MIB  # the options give sizes in MiB
_COMPACT = compact.CompactOptions()  # the defaults

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _at_least(name: str, minimum: int, default: int, help_text: str | None = None) -> Decorator:
    """An integer option no lower than ``minimum``, its default shown in ``--help``."""
    return click.option(
        name, type=click.IntRange(minimum), default=default, show_default=True, help=help_text
    )


def _execute(
    ctx: click.Context,
    lake: str | None,
    master: str | None,
    log_level: str,
    job: Callable[[JobContext], Report],
    *,
    spark: bool = True,
) -> None:
    """Run ``job`` on the lake (which must exist) and print its report; ``spark``:
    the job needs Spark (so Java), checked before it starts."""
    setup_logging(log_level)
    settings = existing(lake_of(ctx, lake), spark=spark)
    with JobContext(settings, master=master, progress=default_progress()) as jobs_ctx:
        report = job(jobs_ctx)
    click.echo(report_json(report))
    if int(str(report.summary().get("failed", 0))):
        ctx.exit(1)


# -- jobs run ------------------------------------------------------------------------------


@click.group("jobs")
def jobs() -> None:
    """Maintenance jobs (compaction, truncation, GC) and batch consumers, on Spark."""


@jobs.group("run")
def run() -> None:
    """Run one job now; print its report as JSON."""


@run.command("compact")
@lake_option
@master_option
@log_option
@_at_least("--messages-target-mb", 1, _COMPACT.messages_target_bytes // MIB)
@_at_least("--leases-target-mb", 1, _COMPACT.leases_target_bytes // MIB)
@_at_least(
    "--min-small-files",
    2,
    _COMPACT.min_small_files,
    "Compact a table once it has this many files below its target size.",
)
@click.option("--vacuum/--no-vacuum", default=True, show_default=True)
@_at_least(
    "--vacuum-retention-hours",
    0,
    _COMPACT.vacuum_retention_hours,
    "Delete files removed longer ago than this; keep it above the longest reader.",
)
@_at_least("--parallelism", 1, _COMPACT.parallelism)
@click.pass_context
def compact_command(
    ctx: click.Context,
    lake: str | None,
    master: str | None,
    log_level: str,
    messages_target_mb: int,
    leases_target_mb: int,
    min_small_files: int,
    vacuum: bool,
    vacuum_retention_hours: int,
    parallelism: int,
) -> None:
    """Bin-pack small files, vacuum and checkpoint every table (delta-rs, no data change)."""
    options = compact.CompactOptions(
        messages_target_bytes=messages_target_mb * MIB,
        leases_target_bytes=leases_target_mb * MIB,
        min_small_files=min_small_files,
        vacuum=vacuum,
        vacuum_retention_hours=vacuum_retention_hours,
        parallelism=parallelism,
    )
    if vacuum and vacuum_retention_hours < 1:
        logging.getLogger("lakepubsub.jobs").warning(
            "vacuum retention under an hour: readers of older versions may fail"
        )
    _execute(ctx, lake, master, log_level, lambda c: compact.run(c, options), spark=False)


@run.command("truncate")
@lake_option
@master_option
@log_option
@click.option(
    "--delete/--no-delete",
    default=True,
    show_default=True,
    help="Also delete messages no subscription, snapshot or retention needs.",
)
@click.pass_context
def truncate_command(
    ctx: click.Context, lake: str | None, master: str | None, log_level: str, delete: bool
) -> None:
    """Enforce truncation policies (Spark), record truncations, delete unneeded messages."""
    options = truncate.TruncateOptions(delete_messages=delete)
    _execute(ctx, lake, master, log_level, lambda c: truncate.run(c, options))


@run.command("gc")
@lake_option
@master_option
@log_option
@click.option(
    "--orphan-age-s",
    type=click.FloatRange(0),
    default=gc.ORPHAN_AGE_S,
    show_default=True,
    help="Remove an uncatalogued table directory once untouched this long.",
)
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; delete nothing.")
@click.pass_context
def gc_command(
    ctx: click.Context,
    lake: str | None,
    master: str | None,
    log_level: str,
    orphan_age_s: float,
    dry_run: bool,
) -> None:
    """Delete expired subscriptions and snapshots; sweep orphaned table directories."""
    options = gc.GcOptions(orphan_age_s=orphan_age_s, dry_run=dry_run)
    _execute(ctx, lake, master, log_level, lambda c: gc.run(c, options), spark=False)


# The options both consumers take, named as their options' fields.
_CONSUMER_OPTIONS: tuple[Decorator, ...] = (
    click.option("--target", required=True, help="Delta table to append to (path or s3:// URI)."),
    click.option("--sql", default=None, help="SELECT … FROM messages"),
    click.option("--transform", default=None, help="module:function or file.py:function"),
    click.option("--partition-by", default="", help="Comma-separated, when creating the target."),
)


def _consumer(
    name: str,
    summary: str,
    job: tuple[Callable[[JobContext, Any], Report], type[Any]],
    source: tuple[Decorator, ...],
    extra: tuple[Decorator, ...],
) -> None:
    """Add a consumer command to ``run``: the job's run and options type, the options
    naming what it reads (``source``), the shared ones, then its own (``extra``)."""
    run_job, options_type = job

    def consume(
        ctx: click.Context, /, lake: str | None, master: str | None, log_level: str, **fields: Any
    ) -> None:
        if (fields["sql"] is None) == (fields["transform"] is None):
            raise click.UsageError("give exactly one of --sql and --transform")
        columns = tuple(c.strip() for c in fields["partition_by"].split(",") if c.strip())
        options = options_type(**{**fields, "partition_by": columns})
        _execute(ctx, lake, master, log_level, lambda c: run_job(c, options))

    consume.__doc__ = summary
    command: Callable[..., Any] = click.pass_context(consume)
    options = (lake_option, master_option, log_option, *source, *_CONSUMER_OPTIONS, *extra)
    for option in reversed(options):
        command = option(command)
    run.command(name)(command)


_consumer(
    "batch-consume",
    "Consume a subscription's new messages into a Delta table, exactly once.",
    (batch_consume.run, batch_consume.BatchOptions),
    (click.option("--subscription", required=True, help="projects/P/subscriptions/S"),),
    (click.option("--max-messages", type=click.IntRange(1), default=None),),
)
_consumer(
    "stream-consume",
    "Consume a topic's new messages into a Delta table with a Spark stream, exactly once.",
    (stream_consume.run, stream_consume.StreamOptions),
    (
        click.option("--topic", required=True, help="projects/P/topics/T"),
        click.option(
            "--checkpoint", required=True, help="This consumer's checkpoint (path or s3:// URI)."
        ),
    ),
    (
        click.option("--filter", default="", help='Pub/Sub filter: attributes.k = "v"'),
        click.option(
            "--starting-offset",
            type=click.IntRange(0),
            default=None,
            help="A new checkpoint's first offset [default: the oldest message].",
        ),
        click.option("--max-files-per-trigger", type=click.IntRange(1), default=None),
    ),
)


jobs.add_command(schedule_command)
