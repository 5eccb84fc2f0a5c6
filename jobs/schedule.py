"""``lakepubsub jobs schedule``: the maintenance jobs and consumers on intervals, in
one process."""

from __future__ import annotations

import json
import signal
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

from jobs import batch_consume, compact, gc, stream_consume, truncate
from jobs import options as shared
from jobs.common import JobContext
from jobs.options import Report
from lakepubsub.scheduler import Progress, Scheduler, Task, default_progress
from lakepubsub.settings.schedule import ScheduleSettings

# The consumers a config may list: its key, their options and run, and the task's name
# (the kind, then the option naming what it reads).
_CONSUMERS: tuple[tuple[str, type[Any], Callable[..., Report], str, str], ...] = (
    (
        "batch_consume",
        batch_consume.BatchOptions,
        batch_consume.run,
        "batch-consume",
        "subscription",
    ),
    ("stream_consume", stream_consume.StreamOptions, stream_consume.run, "stream-consume", "topic"),
)


def scheduled_tasks(
    jobs_ctx: JobContext, intervals: ScheduleSettings, config: Mapping[str, Any]
) -> list[Task]:
    """The built-in jobs on their intervals, plus ``[[batch_consume]]`` and
    ``[[stream_consume]]`` entries of ``config``.

    Job options come from the config's ``[compact]``, ``[truncate]`` and ``[gc]``
    tables, keyed by the options' field names (``vacuum_retention_hours = 24``).
    """
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
    for key, cls, run, kind, source in _CONSUMERS:
        for entry in config.get(key, []):
            doc = dict(entry)
            interval = float(doc.pop("interval_s"))
            doc["partition_by"] = tuple(doc.get("partition_by", ()))
            options = _options(cls, doc)

            def consume(opts: Any = options, job: Callable[..., Report] = run) -> Report:
                return job(jobs_ctx, opts)

            name = f"{kind} {getattr(options, source)}"
            tasks.append(Task(name, interval, with_progress(consume)))
    return tasks


def _options(cls: Any, doc: Mapping[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise click.BadParameter(f"unknown {cls.__name__} option(s): {', '.join(unknown)}")
    return cls(**doc)


@click.command("schedule")
@shared.lake_option
@shared.master_option
@shared.log_option
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
    shared.setup_logging(log_level)
    config = tomllib.loads(config_path.read_text()) if config_path else {}
    intervals = ScheduleSettings.from_env(
        **{
            **config.get("schedule", {}),
            "compact_interval_s": compact_every,
            "truncate_interval_s": truncate_every,
            "gc_interval_s": gc_every,
        }
    )
    settings = shared.existing(shared.lake_of(ctx, lake), spark=True)
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
