"""`lakepubsub sql` as a person meets it (issue 31): a typo is one line that says what
to do, the shell leaves on `exit`, keeps statements whole in its history, and
Spark's own chatter (query-context JSON, its banner, warnings about topics the
query never read) stays off the terminal; no Java is one line, not a traceback."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakepubsub import Engine, PublishMessage, Settings, Topic, TopicName
from lakepubsub.resources.names import SchemaName
from lakepubsub.resources.topics import SchemaSettings
from lakepubsub.spark import jars
from lakepubsub.spark.shell import LINE_BREAK, keep_statement

LAKEPUBSUB = str(Path(sys.executable).with_name("lakepubsub"))
PROTO = 'syntax = "proto3";\nmessage State {\n  string name = 1;\n}\n'
# Printed by the JVM itself for the vector module Spark 4 adds; nothing sets it off.
JVM_NOTICE = "WARNING: Using incubator modules"


@pytest.fixture
def demo_lake(tmp_path: Path) -> str:
    """The README's demo topic with three messages, beside a topic with a protobuf schema."""
    lake = str(tmp_path / "lake")
    with Engine(Settings(lake=lake)) as engine:
        orders = TopicName("demo", "orders")
        engine.create_topic(Topic(orders))
        engine.publish(orders, [PublishMessage(f"order {i}".encode()) for i in range(3)])
        schema = SchemaName("demo", "states")
        engine.schemas.create(schema, "PROTOCOL_BUFFER", PROTO)
        engine.create_topic(
            Topic(TopicName("demo", "states"), schema_settings=SchemaSettings(schema.path))
        )
    return lake


def sql(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> tuple[int, list[str], list[str]]:
    done = subprocess.run(
        [LAKEPUBSUB, "sql", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    errors = [line for line in done.stderr.splitlines() if not line.startswith(JVM_NOTICE)]
    return done.returncode, done.stdout.splitlines(), errors


def test_a_missing_view_is_one_line_naming_the_closest_view(demo_lake: str) -> None:
    code, out, err = sql("SELECT count(*) FROM demo__order", "--lake", demo_lake)
    assert code == 1 and out == []
    assert err == [
        "Error: [TABLE_OR_VIEW_NOT_FOUND] no view or table demo__order (line 1, position 21);"
        " did you mean demo__orders? (`lakepubsub sql` then .tables lists the views)"
    ]


def test_the_shell_says_one_line_per_error_and_leaves_on_exit(demo_lake: str) -> None:
    script = "\n".join(
        [
            "SELECT nope",
            "  FROM demo__orders;",
            "SELECT * FROM demo__states__typed;",
            "SELECT count(*) AS n FROM demo__orders;",
            "exit",
            "SELECT 'never run';",
        ]
    )
    code, out, err = sql("--lake", demo_lake, stdin=script + "\n")
    assert code == 0, err
    assert err == []  # no JSON log line, no banner, no warning about demo/states
    assert len(out) == 6, out
    column, typed, *counted = out
    assert column.startswith("Error: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column")
    assert column.endswith("(line 1, position 7)") and "Aggregate" not in column
    assert typed == (
        "Error: [TABLE_OR_VIEW_NOT_FOUND] no view or table demo__states__typed"
        " (line 1, position 14); typed views exist for topics with an Avro schema"
        " (docs/spark.md) (.tables lists the views)"
    )
    assert counted == ["n", "-", "3", "(1 row)"]
    _, out, _ = sql("--lake", demo_lake, stdin="quit;\nSELECT 'never run';\n")
    assert out == []


def test_history_keeps_a_statement_as_one_entry() -> None:
    readline = pytest.importorskip("readline")
    readline.clear_history()
    readline.add_history(".tables")
    started = readline.get_current_history_length()
    for line in ("SELECT offset", "  FROM demo__orders", " WHERE offset > 1;"):
        readline.add_history(line)  # what input() does with each line typed
    keep_statement(readline, started)
    kept = [readline.get_history_item(i) for i in (1, 2)]
    assert kept == [".tables", "SELECT offset\n  FROM demo__orders\n WHERE offset > 1;"]
    assert readline.get_current_history_length() == 2
    keep_statement(readline, 1)  # a one-line statement stays as it is
    assert readline.get_current_history_length() == 2
    readline.clear_history()


def test_the_terminal_shell_keeps_statements_whole_across_sessions(
    demo_lake: str, tmp_path: Path
) -> None:
    """Typed at a terminal (a pty): a statement over two lines is one history entry in
    ~/.lakepubsub_sql_history, and `exit` leaves."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".lakepubsub_sql_history").write_text(f".tables\nSELECT 1{LINE_BREAK}  AS old;\n")
    leader, follower = pty.openpty()
    shell = subprocess.Popen(
        [LAKEPUBSUB, "sql", "--lake", demo_lake],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "HOME": str(home)},
    )
    os.close(follower)
    os.write(leader, b"SELECT count(*) AS n\n  FROM demo__orders;\nexit\n")
    seen = b""
    deadline = time.monotonic() + 300
    while shell.poll() is None and time.monotonic() < deadline:
        if select.select([leader], [], [], 0.5)[0]:
            try:
                seen += os.read(leader, 65536)
            except OSError:  # the shell closed the terminal
                break
    shell.wait(timeout=30)
    os.close(leader)
    assert shell.returncode == 0, seen.decode(errors="replace")
    assert b"(1 row)" in seen
    kept = (home / ".lakepubsub_sql_history").read_text().splitlines()
    assert kept == [
        ".tables",
        f"SELECT 1{LINE_BREAK}  AS old;",
        f"SELECT count(*) AS n{LINE_BREAK}  FROM demo__orders;",
        "exit",
    ]


@pytest.mark.parametrize("command", [["sql", "SELECT 1"], ["jobs", "run", "truncate"]])
def test_without_java_spark_commands_say_so_in_one_line(
    demo_lake: str, tmp_path: Path, command: list[str]
) -> None:
    no_java = tmp_path / "bin"
    no_java.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(no_java)
    done = subprocess.run(
        [LAKEPUBSUB, "--lake", demo_lake, *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "Error: Spark needs a JDK 17 on PATH (or JAVA_HOME): no java found;"
        " install one (Debian: apt-get install openjdk-17-jre-headless)"
    ]


@pytest.mark.slow
def test_the_first_fetch_keeps_ivy_report_off_the_terminal(demo_lake: str, tmp_path: Path) -> None:
    """A machine without the jar list (another HOME) fetches once, in a child process
    whose ~140 lines of Ivy report go to a log; the terminal gets one line. Ivy's
    cache is this machine's, linked, so nothing is downloaded again."""
    cached = jars.DEFAULT_IVY_HOME
    if jars.resolved_jars() is None:
        pytest.skip("no fetched jars on this machine to link")
    home = tmp_path / "home"
    ivy = home / cached.name
    ivy.mkdir(parents=True)
    try:
        for part in ("cache", "jars"):
            subprocess.run(["cp", "-al", str(cached / part), str(ivy / part)], check=True)
    except subprocess.CalledProcessError:
        pytest.skip("the Ivy cache cannot be hard-linked here")
    env = {**os.environ, "HOME": str(home)}
    code, out, err = sql("SELECT count(*) AS n FROM demo__orders", "--lake", demo_lake, env=env)
    assert code == 0, err
    assert out[2].strip() == "3"
    log = ivy / jars.FETCH_LOG
    assert err == [f"Fetching Spark's jars, about 690 MB (once per machine; log: {log})…"]
    assert ":: resolving dependencies ::" in log.read_text()
    again = sql("SELECT 1 AS one", "--lake", demo_lake, env=env)
    assert again[0] == 0 and again[2] == []
    shutil.rmtree(home)
