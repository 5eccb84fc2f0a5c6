"""``lakepubsub sql``: Spark SQL over the lake's views, a shell, or Spark Connect.

PySpark is imported when the command runs, not when the CLI starts."""

from __future__ import annotations

import contextlib
import difflib
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import click

from jobs.common import spark_session
from jobs.options import existing, lake_of, lake_option, master_option
from lakepubsub.errors import LakePubSubError

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
# The port Spark Connect serves on by default (Spark's own default).
CONNECT_PORT = 15002
# How often the --serve loop wakes to see whether it was stopped.
_SERVE_POLL_S = 0.5


@click.command("sql")
@click.argument("query", required=False)
@lake_option
@master_option
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
@click.option("--port", type=click.IntRange(1, 65535), default=CONNECT_PORT, show_default=True)
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
    from lakepubsub.spark import shell  # noqa: PLC0415 — PySpark, only once the command runs
    from lakepubsub.spark.views import View, register  # noqa: PLC0415 — PySpark, likewise

    pinned: dict[str, int] = {}
    for item in versions:
        view, sep, number = item.partition("=")
        if not sep or not number.isdigit():
            raise click.BadParameter(f"expected VIEW=N, got {item!r}", param_hint="--version")
        pinned[view] = int(number)
    settings = existing(lake_of(ctx, lake), spark=True)
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
        while not stop.wait(_SERVE_POLL_S):
            pass


@contextlib.contextmanager
def one_line_errors(views: Sequence[str] = (), *, shell: bool = False) -> Iterator[None]:
    """A failed query or view is one line on stderr and exit status 1, not a traceback.
    A view that does not exist is named with the closest of ``views`` and where the
    views are listed (``shell``: the shell's ``.tables``)."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # noqa: PLC0415 — PySpark's, only once a command runs
    from pyspark.errors import PySparkException  # noqa: PLC0415 — PySpark, likewise

    from lakepubsub.spark.tables import first_line, java_error  # noqa: PLC0415 — PySpark, likewise

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
