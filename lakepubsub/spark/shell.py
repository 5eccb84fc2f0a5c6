"""``lakepubsub sql``'s output and its interactive shell: one Spark session, many statements.

Statements end with ``;`` and may span lines; dot commands (``.tables``,
``.refresh``, ``.help``, ``.quit``) and ``exit`` or ``quit`` take one line. A
failed statement prints one line and the shell goes on. On a terminal, lines
are edited with readline and each statement is kept whole, as one entry, in
``~/.lakepubsub_sql_history``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession

from lakepubsub.spark.views import View

# Cells longer than this are cut unless the output is wide.
MAX_CELL_CHARS = 60
HISTORY_FILE = Path.home() / ".lakepubsub_sql_history"
HISTORY_LINES = 1000
# Stands for a line break inside a statement in the history file (ASCII's unit
# separator: nobody types it, and a statement's own text is kept unchanged).
LINE_BREAK = "\x1f"
PROMPT = "sql> "
CONTINUATION = "...> "
# A line that drops the statement typed so far (Ctrl-C at the prompt).
CANCEL = "\x03"
# Words that leave the shell, as in most SQL shells (with or without a ';').
EXIT_WORDS = ("exit", "quit")
HELP = """Statements end with ';' and may span lines. Commands:
  .tables    the views: topics, backlogs, topics/subscriptions/truncations
  .refresh   move every view to the newest table versions
  .help      this text
  .quit      leave (or exit, quit, Ctrl-D)"""


def is_command(line: str) -> bool:
    """Whether a line typed at the prompt is a one-line command, not SQL."""
    stripped = line.strip()
    return stripped.startswith(".") or stripped.rstrip(";").strip().lower() in EXIT_WORDS


@dataclass(frozen=True)
class Output:
    """How results print: at most ``max_rows`` rows, as a table or JSON lines."""

    max_rows: int = 100
    json_lines: bool = False
    wide: bool = False


def run(spark: SparkSession, statement: str, output: Output, out: TextIO) -> None:
    """Run one statement and print its result (or nothing, for statements without one)."""
    frame = spark.sql(statement)
    columns = frame.columns
    rows = [r.asDict(recursive=True) for r in frame.limit(output.max_rows + 1).collect()]
    more = len(rows) > output.max_rows
    rows = rows[: output.max_rows]
    if output.json_lines:
        for row in rows:
            print(json.dumps({c: json_value(row[c]) for c in columns}), file=out)
    elif columns:
        print(format_table(columns, rows, None if output.wide else MAX_CELL_CHARS), file=out)
    if more:
        print(f"(only the first {output.max_rows} rows; --max-rows for more)", file=sys.stderr)


def format_table(columns: list[str], rows: list[dict[str, Any]], limit: int | None) -> str:
    """Rows as an aligned text table with a header rule."""
    cells = [[_text(row[c], limit) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
        "-+-".join("-" * w for w in widths),
        *(" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells),
    ]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(line.rstrip() for line in lines)


def json_value(value: Any) -> Any:
    """A Spark value as JSON: UTF-8 bytes as text (else ``0x…`` hex), times as ISO 8601."""
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return "0x" + bytes(value).hex()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_value(v) for v in value]
    return value


def _text(value: Any, limit: int | None) -> str:
    if value is None:
        text = "NULL"
    else:
        plain = json_value(value)
        text = plain if isinstance(plain, str) else json.dumps(plain, default=str)
    text = text.replace("\n", "\\n")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


class Shell:
    """Reads statements and commands, runs them on ``spark``, prints results and errors.

    ``refresh`` re-registers the views and returns them; ``error_line`` turns a
    failure into the one line to print, or re-raises what it does not know.
    """

    def __init__(
        self,
        spark: SparkSession,
        views: list[View],
        *,
        refresh: Callable[[], list[View]],
        error_line: Callable[[BaseException], str],
        output: Output,
        out: TextIO | None = None,
        interactive: bool = False,
    ) -> None:
        self.spark = spark
        self.views = views
        self.refresh = refresh
        self.error_line = error_line
        self.output = output
        self.out = out or sys.stdout
        self.interactive = interactive

    def loop(self, lines: Iterator[str]) -> None:
        """Run everything ``lines`` holds; a statement left without ``;`` at the end runs too."""
        pending: list[str] = []
        for line in lines:
            if line == CANCEL:
                pending = []
                continue
            stripped = line.strip()
            if not pending and is_command(stripped):
                if not self.command(stripped):
                    return
                continue
            if stripped:
                pending.append(line.rstrip("\n"))
            if stripped.endswith(";"):
                self.statement("\n".join(pending).strip().rstrip(";").strip())
                pending = []
        if pending and "\n".join(pending).strip():
            self.statement("\n".join(pending).strip().rstrip(";").strip())

    def statement(self, text: str) -> None:
        if not text:
            return
        started = time.perf_counter()
        try:
            run(self.spark, text, self.output, self.out)
        except Exception as exc:
            self.say(f"Error: {self.error_line(exc)}")
            return
        if self.interactive:
            self.say(f"({time.perf_counter() - started:.2f} s)")

    def command(self, text: str) -> bool:
        """Run a dot command; False when the shell should end."""
        name = text.rstrip(";").split(maxsplit=1)[0].lower()
        if name in (".quit", ".exit", ".q", *EXIT_WORDS):
            return False
        if name == ".tables":
            for view in self.views:
                described = f"{view.kind} {view.resource}".strip()
                version = "" if view.version is None else f" (version {view.version})"
                print(f"{view.name:40} {described}{version}", file=self.out)
        elif name == ".refresh":
            try:
                self.views = self.refresh()
            except Exception as exc:
                self.say(f"Error: {self.error_line(exc)}")
            else:
                self.say(f"{len(self.views)} views at the newest versions")
        elif name == ".help":
            print(HELP, file=self.out)
        else:
            self.say(f"Error: unknown command {name}; .help lists them")
        return True

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)


def terminal_lines() -> Iterator[str]:
    """Lines typed at a terminal, with readline editing and a kept history.

    Ctrl-C drops the statement being typed (yields ``CANCEL``), Ctrl-D ends.
    """
    with _history() as history:
        pending = False
        started = 0  # history entries before the statement being typed
        while True:
            if not pending and history is not None:
                started = history.get_current_history_length()
            try:
                line = input(CONTINUATION if pending else PROMPT)
            except EOFError:
                print()
                return
            except KeyboardInterrupt:
                print()
                pending = False
                yield CANCEL
                continue
            stripped = line.strip()
            if pending or (stripped and not is_command(stripped)):
                pending = not stripped.endswith(";")
                if not pending and history is not None:
                    keep_statement(history, started)
            yield line


def keep_statement(history: Any, started: int) -> None:
    """Replace the lines readline kept since entry ``started`` by one entry: the
    statement they make, so the up arrow brings it back whole."""
    count = history.get_current_history_length()
    lines = [history.get_history_item(i) for i in range(started + 1, count + 1)]
    if len(lines) <= 1:  # nothing to join
        return
    for position in range(count - 1, started - 1, -1):  # zero-based, newest first
        history.remove_history_item(position)
    history.add_history("\n".join(line for line in lines if line is not None))


@contextlib.contextmanager
def _history() -> Iterator[Any]:
    """The readline module with the kept history loaded (None without readline).

    Kept by hand, one entry a line: readline's own file would split a statement
    of several lines into several entries when read back.
    """
    try:
        import readline  # noqa: PLC0415 — optional: absent on some platforms
    except ImportError:  # no readline on this platform: plain input()
        yield None
        return
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for entry in HISTORY_FILE.read_text().splitlines()[-HISTORY_LINES:]:
            readline.add_history(entry.replace(LINE_BREAK, "\n"))
    try:
        yield readline
    finally:
        count = readline.get_current_history_length()
        entries = [readline.get_history_item(i) or "" for i in range(1, count + 1)]
        kept = "".join(e.replace("\n", LINE_BREAK) + "\n" for e in entries[-HISTORY_LINES:])
        with contextlib.suppress(OSError):
            HISTORY_FILE.write_text(kept)
            os.chmod(HISTORY_FILE, 0o600)
