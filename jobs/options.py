"""What every ``lakepubsub jobs`` command and ``lakepubsub sql`` share: the ``--lake``,
``--master`` and ``--log-level`` options, the lake they name, and logging."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import click

from jobs.common import require_lake, settings_for
from lakepubsub.errors import LakePubSubError, one_line
from lakepubsub.settings import Settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Report(Protocol):
    def summary(self) -> Mapping[str, object]: ...


def lake_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--lake",
        default=None,
        help="Lake root: a directory or s3://bucket/prefix [default: LAKEPUBSUB_LAKE].",
    )(func)


def master_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--master",
        envvar="LAKEPUBSUB_SPARK_MASTER",
        default=None,
        help="Spark master [default: spark-submit's, else local[*]].",
    )(func)


def log_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--log-level", default="INFO", show_default=True)(func)


def lake_of(ctx: click.Context, lake: str | None) -> str | None:
    """``--lake`` here, else the ``lakepubsub`` group's (which reads LAKEPUBSUB_LAKE)."""
    if lake:
        return lake
    parent = ctx.find_root().obj
    return parent.get("lake") if isinstance(parent, dict) else None


def existing(lake: str | None, *, spark: bool) -> Settings:
    """The settings of a lake that exists, with Java there when ``spark``; else a
    one-line error."""
    settings = settings_for(lake)
    try:
        require_lake(settings)
        if spark:
            from lakepubsub.spark.session import check_java  # noqa: PLC0415 — loads PySpark

            check_java()
    except LakePubSubError as exc:
        raise click.ClickException(one_line(exc.message)) from exc
    return settings


def setup_logging(level: str) -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    else:
        logging.getLogger().setLevel(level.upper())
