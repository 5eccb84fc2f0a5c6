"""``lakepubsub jobs run <job>``, ``lakepubsub jobs schedule`` and ``lakepubsub sql``.

Every job finds the lake as ``lakepubsub serve`` does: ``--lake`` (here or on
the ``lakepubsub`` group), else ``LAKEPUBSUB_LAKE``, with S3 settings from the
AWS variables. ``spark-submit jobs/<job>.py [options]`` runs the same commands.
A run prints its report as one JSON line on stdout (logs go to stderr) and
exits 1 if any table failed for a reason other than being busy.

Nothing here imports PySpark or starts a JVM until a command needs Spark.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import re
import signal
import sys
import threading
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, Protocol

import click

from jobs.common import JobContext, report_json, require_lake, settings_for
from lakepubsub.scheduler import (
    Progress,
    Scheduler,
    Task,
    default_progress,
)
from lakepubsub.settings import Settings
from lakepubsub.settings.schedule import ScheduleSettings

MIB = 1024 * 1024
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Cells of `lakepubsub sql` output longer than this are cut (``--wide`` keeps them);
# lakepubsub.spark.shell.MAX_CELL_CHARS, kept here so the CLI imports no PySpark.
MAX_CELL_CHARS = 60
# Spark 4's Spark Connect server, started inside the session's driver.
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
# Spark's error class for a name no view or table has, and where in the query it was.
_MISSING_VIEW = "TABLE_OR_VIEW_NOT_FOUND"
_POSITION = re.compile(r" \(line \d+, position \d+\)$")
# How alike (difflib's ratio) a view's name must be to be offered for a missing one.
_CLOSE = 0.8
# lakepubsub.spark.typed.TYPED_SUFFIX, kept here so the CLI imports no PySpark.
_TYPED = "typed"


class Report(Protocol):
    def summary(self) -> Mapping[str, object]: ...


# -- shared options ------------------------------------------------------------------------


def _lake_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--lake",
        default=None,
        help="Lake root: a directory or s3://bucket/prefix [default: LAKEPUBSUB_LAKE].",
    )(func)


def _master_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--master",
        envvar="LAKEPUBSUB_SPARK_MASTER",
        default=None,
        help="Spark master [default: spark-submit's, else local[*]].",
    )(func)


def _log_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--log-level", default="INFO", show_default=True)(func)


def _lake(ctx: click.Context, lake: str | None) -> str | None:
    """``--lake`` here, else the ``lakepubsub`` group's (which reads LAKEPUBSUB_LAKE)."""
    if lake:
        return lake
    parent = ctx.find_root().obj
    return parent.get("lake") if isinstance(parent, dict) else None


def _existing(lake: str | None, *, spark: bool) -> Settings:
    """The settings of a lake that exists, with Java there when ``spark``; else a
    one-line error."""
    from lakepubsub.errors import LakePubSubError, one_line

    settings = settings_for(lake)
    try:
        require_lake(settings)
        if spark:
            from lakepubsub.spark.session import check_java

            check_java()
    except LakePubSubError as exc:
        raise click.ClickException(one_line(exc.message)) from exc
    return settings


def _setup_logging(level: str) -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    else:
        logging.getLogger().setLevel(level.upper())


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
    _setup_logging(log_level)
    settings = _existing(_lake(ctx, lake), spark=spark)
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
@_lake_option
@_master_option
@_log_option
@click.option("--messages-target-mb", type=click.IntRange(1), default=128, show_default=True)
@click.option("--leases-target-mb", type=click.IntRange(1), default=32, show_default=True)
@click.option(
    "--min-small-files",
    type=click.IntRange(2),
    default=8,
    show_default=True,
    help="Compact a table once it has this many files below its target size.",
)
@click.option("--vacuum/--no-vacuum", default=True, show_default=True)
@click.option(
    "--vacuum-retention-hours",
    type=click.IntRange(0),
    default=168,
    show_default=True,
    help="Delete files removed longer ago than this; keep it above the longest reader.",
)
@click.option("--parallelism", type=click.IntRange(1), default=2, show_default=True)
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
    from jobs import compact

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
@_lake_option
@_master_option
@_log_option
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
    from jobs import truncate

    options = truncate.TruncateOptions(delete_messages=delete)
    _execute(ctx, lake, master, log_level, lambda c: truncate.run(c, options))


@run.command("gc")
@_lake_option
@_master_option
@_log_option
@click.option(
    "--orphan-age-s",
    type=click.FloatRange(0),
    default=3600.0,
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
    from jobs import gc

    options = gc.GcOptions(orphan_age_s=orphan_age_s, dry_run=dry_run)
    _execute(ctx, lake, master, log_level, lambda c: gc.run(c, options), spark=False)


@run.command("batch-consume")
@_lake_option
@_master_option
@_log_option
@click.option("--subscription", required=True, help="projects/P/subscriptions/S")
@click.option("--target", required=True, help="Delta table to append to (path or s3:// URI).")
@click.option("--sql", default=None, help="SELECT … FROM messages")
@click.option("--transform", default=None, help="module:function or file.py:function")
@click.option("--max-messages", type=click.IntRange(1), default=None)
@click.option("--partition-by", default="", help="Comma-separated, when creating the target.")
@click.pass_context
def batch_consume_command(
    ctx: click.Context,
    lake: str | None,
    master: str | None,
    log_level: str,
    subscription: str,
    target: str,
    sql: str | None,
    transform: str | None,
    max_messages: int | None,
    partition_by: str,
) -> None:
    """Consume a subscription's new messages into a Delta table, exactly once."""
    from jobs import batch_consume

    if (sql is None) == (transform is None):
        raise click.UsageError("give exactly one of --sql and --transform")
    options = batch_consume.BatchOptions(
        subscription=subscription,
        target=target,
        sql=sql,
        transform=transform,
        max_messages=max_messages,
        partition_by=tuple(c.strip() for c in partition_by.split(",") if c.strip()),
    )
    _execute(ctx, lake, master, log_level, lambda c: batch_consume.run(c, options))


@run.command("stream-consume")
@_lake_option
@_master_option
@_log_option
@click.option("--topic", required=True, help="projects/P/topics/T")
@click.option("--target", required=True, help="Delta table to append to (path or s3:// URI).")
@click.option("--checkpoint", required=True, help="This consumer's checkpoint (path or s3:// URI).")
@click.option("--sql", default=None, help="SELECT … FROM messages")
@click.option("--transform", default=None, help="module:function or file.py:function")
@click.option("--filter", "filter_text", default="", help='Pub/Sub filter: attributes.k = "v"')
@click.option(
    "--starting-offset",
    type=click.IntRange(0),
    default=None,
    help="A new checkpoint's first offset [default: the oldest message].",
)
@click.option("--max-files-per-trigger", type=click.IntRange(1), default=None)
@click.option("--partition-by", default="", help="Comma-separated, when creating the target.")
@click.pass_context
def stream_consume_command(
    ctx: click.Context,
    lake: str | None,
    master: str | None,
    log_level: str,
    topic: str,
    target: str,
    checkpoint: str,
    sql: str | None,
    transform: str | None,
    filter_text: str,
    starting_offset: int | None,
    max_files_per_trigger: int | None,
    partition_by: str,
) -> None:
    """Consume a topic's new messages into a Delta table with a Spark stream, exactly once."""
    from jobs import stream_consume

    if (sql is None) == (transform is None):
        raise click.UsageError("give exactly one of --sql and --transform")
    options = stream_consume.StreamOptions(
        topic=topic,
        target=target,
        checkpoint=checkpoint,
        sql=sql,
        transform=transform,
        filter=filter_text,
        starting_offset=starting_offset,
        max_files_per_trigger=max_files_per_trigger,
        partition_by=tuple(c.strip() for c in partition_by.split(",") if c.strip()),
    )
    _execute(ctx, lake, master, log_level, lambda c: stream_consume.run(c, options))


def main_for(job: str) -> None:
    """Entry point of ``jobs/<job>.py`` under spark-submit or python: ``run <job> ARGS``."""
    run.main(args=[job, *sys.argv[1:]], prog_name=f"jobs/{job.replace('-', '_')}.py")


# -- jobs schedule -------------------------------------------------------------------------


def scheduled_tasks(
    jobs_ctx: JobContext, intervals: ScheduleSettings, config: Mapping[str, Any]
) -> list[Task]:
    """The built-in jobs on their intervals, plus ``[[batch_consume]]`` and
    ``[[stream_consume]]`` entries of ``config``.

    Job options come from the config's ``[compact]``, ``[truncate]`` and ``[gc]``
    tables, keyed by the options' field names (``vacuum_retention_hours = 24``).
    """
    from jobs import batch_consume, compact, gc, stream_consume, truncate

    compact_options = _options(compact.CompactOptions, config.get("compact", {}))
    truncate_options = _options(truncate.TruncateOptions, config.get("truncate", {}))
    gc_options = _options(gc.GcOptions, config.get("gc", {}))

    def with_progress(call: Callable[[], Report]) -> Callable[[Progress], object]:
        def task(progress: Progress) -> object:
            jobs_ctx.progress = progress
            return call().summary()

        return task

    tasks = [
        Task(
            "compact",
            intervals.compact_interval_s,
            with_progress(lambda: compact.run(jobs_ctx, compact_options)),
        ),
        Task(
            "truncate",
            intervals.truncate_interval_s,
            with_progress(lambda: truncate.run(jobs_ctx, truncate_options)),
        ),
        Task("gc", intervals.gc_interval_s, with_progress(lambda: gc.run(jobs_ctx, gc_options))),
    ]
    for entry in config.get("batch_consume", []):
        doc = dict(entry)
        interval = float(doc.pop("interval_s"))
        doc["partition_by"] = tuple(doc.get("partition_by", ()))
        options = _options(batch_consume.BatchOptions, doc)

        def consume(opts: batch_consume.BatchOptions = options) -> Report:
            return batch_consume.run(jobs_ctx, opts)

        tasks.append(
            Task(f"batch-consume {options.subscription}", interval, with_progress(consume))
        )
    for entry in config.get("stream_consume", []):
        doc = dict(entry)
        interval = float(doc.pop("interval_s"))
        doc["partition_by"] = tuple(doc.get("partition_by", ()))
        stream_options = _options(stream_consume.StreamOptions, doc)

        def stream(opts: stream_consume.StreamOptions = stream_options) -> Report:
            return stream_consume.run(jobs_ctx, opts)

        tasks.append(
            Task(f"stream-consume {stream_options.topic}", interval, with_progress(stream))
        )
    return tasks


def _options(cls: Any, doc: Mapping[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise click.BadParameter(f"unknown {cls.__name__} option(s): {', '.join(unknown)}")
    return cls(**doc)


@jobs.command("schedule")
@_lake_option
@_master_option
@_log_option
@click.option("--compact-every", type=float, default=None, help="Seconds; 0 disables.")
@click.option("--truncate-every", type=float, default=None, help="Seconds; 0 disables.")
@click.option("--gc-every", type=float, default=None, help="Seconds; 0 disables.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="TOML: [schedule] intervals, [compact]/[truncate]/[gc] options,"
    " [[batch_consume]], [[stream_consume]].",
)
@click.option("--max-runs", type=click.IntRange(1), default=None, help="Stop after N runs.")
@click.pass_context
def schedule_command(
    ctx: click.Context,
    lake: str | None,
    master: str | None,
    log_level: str,
    compact_every: float | None,
    truncate_every: float | None,
    gc_every: float | None,
    config_path: Path | None,
    max_runs: int | None,
) -> None:
    """Run compaction, truncation and GC on intervals in this process, until stopped.

    Intervals: the options, else the config's [schedule], else
    LAKEPUBSUB_{COMPACT,TRUNCATE,GC}_INTERVAL_S, else 600/900/3600 s. SIGTERM or
    Ctrl-C lets the running job finish, then exits.
    """
    _setup_logging(log_level)
    config = tomllib.loads(config_path.read_text()) if config_path else {}
    intervals = ScheduleSettings.from_env(
        **{
            **config.get("schedule", {}),
            "compact_interval_s": compact_every,
            "truncate_interval_s": truncate_every,
            "gc_interval_s": gc_every,
        }
    )
    settings = _existing(_lake(ctx, lake), spark=True)
    with JobContext(settings, master=master) as jobs_ctx:
        progress = default_progress()
        scheduler = Scheduler(
            scheduled_tasks(jobs_ctx, intervals, config), progress=progress, max_runs=max_runs
        )
        previous = signal.signal(signal.SIGTERM, lambda *_: scheduler.stop())
        try:
            scheduler.run()
        except KeyboardInterrupt:
            scheduler.stop()
        finally:
            signal.signal(signal.SIGTERM, previous)
        for task in scheduler.tasks:
            click.echo(
                json.dumps(
                    {
                        "task": task.name,
                        "runs": task.runs,
                        "failures": task.failures,
                        "last_error": task.last_error,
                    }
                )
            )


# -- sql -----------------------------------------------------------------------------------


@click.command("sql")
@click.argument("query", required=False)
@_lake_option
@_master_option
@click.option(
    "--version",
    "versions",
    multiple=True,
    metavar="VIEW=N",
    help="Read this topic view at table version N (repeatable).",
)
@click.option("--timestamp", default=None, help="Read every topic as of this ISO 8601 time.")
@click.option("--max-rows", type=click.IntRange(1), default=100, show_default=True)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option("--wide", is_flag=True, help=f"Do not cut cells at {MAX_CELL_CHARS} characters.")
@click.option("--serve", is_flag=True, help="Serve the views over Spark Connect until stopped.")
@click.option("--port", type=click.IntRange(1, 65535), default=15002, show_default=True)
@click.pass_context
def sql(
    ctx: click.Context,
    query: str | None,
    lake: str | None,
    master: str | None,
    versions: tuple[str, ...],
    timestamp: str | None,
    max_rows: int,
    fmt: str,
    wide: bool,
    serve: bool,
    port: int,
) -> None:
    """Run a Spark SQL query over the lake's views and print the result; with no
    QUERY, an interactive shell on one Spark session (statements end with ';',
    .tables lists the views, .help the commands).

    One view per topic (<project>__<topic>), one backlog view per subscription
    (<project>__<subscription>__backlog), subscriptions, topics and truncations
    (docs/spark.md). --serve starts Spark Connect
    (sc://127.0.0.1:PORT) with the views as global_temp.<view>.
    """
    from jobs.common import spark_session
    from lakepubsub.spark import shell
    from lakepubsub.spark.views import View, register

    pinned: dict[str, int] = {}
    for item in versions:
        view, sep, number = item.partition("=")
        if not sep or not number.isdigit():
            raise click.BadParameter(f"expected VIEW=N, got {item!r}", param_hint="--version")
        pinned[view] = int(number)
    settings = _existing(_lake(ctx, lake), spark=True)
    interactive = query is None and not serve and sys.stdin.isatty()
    conf = {"spark.ui.showConsoleProgress": "true"} if interactive else {}
    if serve:
        conf = {
            "spark.plugins": CONNECT_PLUGIN,
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
        }
    if interactive:
        click.echo("Starting Spark (a few seconds)…", err=True)
    with one_line_errors():
        spark = spark_session(master, conf=conf)

    def refresh() -> list[View]:
        return register(spark, settings, versions=pinned, timestamp=timestamp, shared=serve)

    with one_line_errors():
        views = refresh()
    output = shell.Output(max_rows=max_rows, json_lines=fmt == "json", wide=wide)
    if serve:
        _serve_connect(port, views)
        return
    if query is not None:
        with one_line_errors([v.name for v in views]):
            shell.run(spark, query, output, sys.stdout)
        return
    repl = shell.Shell(
        spark,
        views,
        refresh=refresh,
        error_line=lambda exc: _error_line(exc, [v.name for v in repl.views]),
        output=output,
        interactive=interactive,
    )
    if interactive:
        click.echo(f"{len(views)} views; statements end with ';', .help for commands.", err=True)
    repl.loop(shell.terminal_lines() if interactive else iter(sys.stdin))


def _error_line(exc: BaseException, views: Sequence[str] = ()) -> str:
    """The one line ``one_line_errors`` would print for ``exc`` in the shell; anything
    else re-raises."""
    try:
        with one_line_errors(views, shell=True):
            raise exc
    except click.ClickException as caught:
        return caught.message
    raise AssertionError("unreachable")


def _serve_connect(port: int, views: list[Any]) -> None:
    """Block while Spark Connect serves; SIGTERM or Ctrl-C stops it."""
    click.echo(
        f"Spark Connect on sc://127.0.0.1:{port}; {len(views)} views as global_temp.<view>",
        err=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        while not stop.wait(0.5):
            pass


@contextlib.contextmanager
def one_line_errors(views: Sequence[str] = (), *, shell: bool = False) -> Iterator[None]:
    """A failed query or view is one line on stderr and exit status 1, not a traceback.
    A view that does not exist is named with the closest of ``views`` and where the
    views are listed (``shell``: the shell's ``.tables``)."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    from lakepubsub.errors import LakePubSubError
    from lakepubsub.spark.tables import first_line, java_error

    try:
        yield
    except (LakePubSubError, PySparkException) as exc:
        line = first_line(exc)
        if isinstance(exc, PySparkException) and exc.getCondition() == _MISSING_VIEW:
            line = _missing_view(exc, line, views, shell=shell)
        raise click.ClickException(line) from exc
    except Py4JJavaError as exc:
        raise click.ClickException(java_error(exc)) from exc


def _missing_view(exc: Any, line: str, views: Sequence[str], *, shell: bool) -> str:
    """``[TABLE_OR_VIEW_NOT_FOUND] no view <name> (line L, position P); did you mean …``."""
    name = str((exc.getMessageParameters() or {}).get("relationName", "")).replace("`", "")
    if not name:
        return line
    where = _POSITION.search(line)
    close = difflib.get_close_matches(name, list(views), n=3, cutoff=_CLOSE)
    said = f"[{_MISSING_VIEW}] no view or table {name}{where.group(0) if where else ''}"
    if close:
        said += f"; did you mean {' or '.join(close)}?"
    elif name.endswith(f"__{_TYPED}"):
        said += "; typed views exist for topics with an Avro schema (docs/spark.md)"
    lister = ".tables lists the views" if shell else "`lakepubsub sql` then .tables lists the views"
    return f"{said} ({lister})"
