"""The ``lakepubsub`` command as a person runs it (issue 15): a real process against a
real server, a local lake or a moto S3, checking what it prints and its exit status."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from support import LakeSpec, MotoServer, Server, start_server, stop_server

from bench.harness.ports import free_port
from lakepubsub import cli

LAKEPUBSUB = str(Path(sys.executable).with_name("lakepubsub"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(LakeSpec(str(tmp_path_factory.mktemp("cli-lake")), {}))
    yield srv
    stop_server(srv)


def run(
    *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAKEPUBSUB, *args],
        capture_output=True,
        text=True,
        input=stdin.decode() if stdin is not None else None,
        env=env,
        timeout=120,
        check=False,
    )


def against(server: Server, project: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run("--url", server.url, "--project", project, *args)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- help, version, errors ------------------------------------------------------------------


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == "lakepubsub, version 0.1.0"


def test_help_names_the_environment_variables() -> None:
    text = run("--help").stdout
    for name in ("LAKEPUBSUB_URL", "LAKEPUBSUB_PROJECT", "LAKEPUBSUB_TOKEN", "LAKEPUBSUB_LAKE"):
        assert name in text


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        yield f"{prefix}{name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix}{name} ")


def test_every_command_has_help_text() -> None:
    commands = dict(_commands(cli.main))
    assert {"topics retention", "snapshots create", "seek", "nack", "jobs schedule"} <= set(
        commands
    )
    assert [name for name, command in commands.items() if not (command.help or "").strip()] == []


def test_a_port_out_of_range_is_refused() -> None:
    result = run("serve", "--port", "99999")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "99999 is not in the range 0<=x<=65535" in result.stderr


def test_an_unreachable_server_is_one_line_with_a_hint() -> None:
    line = one_line_error(run("--url", f"http://127.0.0.1:{free_port()}", "topics", "list"))
    assert line.startswith("Error: cannot reach the server at http://127.0.0.1:")
    assert "hint: start one with `lakepubsub serve`" in line


@pytest.mark.s3
def test_a_missing_bucket_is_one_line_with_a_hint(moto_server: MotoServer) -> None:
    env = {**LakeSpec("s3://x/y", moto_server.storage_options).env()}
    lake = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/lake"
    for args in (("--direct", "topics", "list"), ("serve", "--port", str(free_port()))):
        line = one_line_error(run("--lake", lake, *args, env=env))
        assert f"Error: lake {lake}:" in line
        assert "NoSuchBucket" in line
        assert "hint: check --lake" in line


def test_direct_prints_no_warning(tmp_path: Path) -> None:
    result = run("--direct", "--lake", str(tmp_path), "topics", "create", "quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout)["name"] == "projects/local/topics/quiet"


# -- empty results --------------------------------------------------------------------------


def test_empty_results_say_so_naming_the_project(server: Server) -> None:
    result = run("--url", server.url, "topics", "list")
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr.strip() == "no topics in project local"
    assert against(server, "empty", "subscriptions", "list").stderr.strip() == (
        "no subscriptions in project empty"
    )
    assert against(server, "empty", "snapshots", "list").stderr.strip() == (
        "no snapshots in project empty"
    )
    project = f"p{uuid.uuid4().hex[:8]}"
    assert against(server, project, "topics", "create", "quiet-topic").returncode == 0
    created = against(
        server, project, "subscriptions", "create", "quiet-sub", "--topic", "quiet-topic"
    )
    assert created.returncode == 0
    pulled = against(server, project, "pull", "quiet-sub")
    assert (pulled.returncode, pulled.stdout) == (0, "")
    assert pulled.stderr.strip() == f"no messages in projects/{project}/subscriptions/quiet-sub"


# -- verbs ----------------------------------------------------------------------------------


def test_topic_retention(server: Server) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    created = against(server, project, "topics", "create", "kept", "--retention", "2d")
    assert json.loads(created.stdout)["messageRetentionDuration"] == "172800s"
    changed = against(server, project, "topics", "retention", "kept", "12h")
    assert changed.stdout.strip() == f"projects/{project}/topics/kept: retention 43200s"
    shown = against(server, project, "topics", "retention", "kept")
    assert shown.stdout.strip() == f"projects/{project}/topics/kept: retention 43200s"
    bad = against(server, project, "topics", "retention", "kept", "soon")
    assert bad.returncode == 2 and "expected e.g. 7d" in bad.stderr


def test_snapshots_seek_and_nack(server: Server) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    assert against(server, project, "topics", "create", "events").returncode == 0
    sub = ("subscriptions", "create", "events-sub", "--topic", "events")
    assert against(server, project, *sub).returncode == 0
    snap = against(server, project, "snapshots", "create", "before", "--subscription", "events-sub")
    assert snap.returncode == 0, snap.stderr
    assert against(server, project, "snapshots", "list").stdout.startswith(
        f"projects/{project}/snapshots/before  topic=projects/{project}/topics/events"
    )
    assert against(server, project, "publish", "events", "--data", "one").returncode == 0
    first = against(server, project, "pull", "events-sub", "--ack")
    assert [json.loads(line)["data"] for line in first.stdout.splitlines()] == ["one"]
    seek = against(server, project, "seek", "events-sub", "--snapshot", "before")
    assert seek.returncode == 0, seek.stderr
    again = against(server, project, "pull", "events-sub")
    [item] = [json.loads(line) for line in again.stdout.splitlines()]
    assert item["data"] == "one"
    nacked = against(server, project, "nack", "events-sub", item["ackId"])
    assert (nacked.returncode, nacked.stderr.strip()) == (0, "nacked 1")
    third = against(server, project, "pull", "events-sub", "--ack")
    assert [json.loads(line)["data"] for line in third.stdout.splitlines()] == ["one"]
    in_future = against(server, project, "seek", "events-sub", "--time", "2000-01-01T00:00:00Z")
    assert in_future.returncode == 0
    both = against(server, project, "seek", "events-sub")
    assert both.returncode == 2 and "exactly one of --time and --snapshot" in both.stderr
    deleted = against(server, project, "snapshots", "delete", "before")
    assert deleted.stdout.strip() == "deleted snapshot before"


# -- publish --file -------------------------------------------------------------------------


def test_publish_file_splits_by_size(server: Server, tmp_path: Path) -> None:
    """30 lines of 500 KB: 15 MB, over one request's 10 MB, in far fewer than 1,000 lines."""
    project = f"p{uuid.uuid4().hex[:8]}"
    assert against(server, project, "topics", "create", "bulk").returncode == 0
    path = tmp_path / "big.txt"
    path.write_bytes(b"".join(bytes([65 + i % 26]) * 500_000 + b"\n" for i in range(30)))
    result = against(server, project, "publish", "bulk", "--file", str(path))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 30
    assert result.stderr.strip() == "published 30 messages"


def test_publish_file_failure_reports_what_was_and_was_not_published(
    server: Server, tmp_path: Path
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    assert against(server, project, "topics", "create", "partial").returncode == 0
    sub = ("subscriptions", "create", "partial-sub", "--topic", "partial")
    assert against(server, project, *sub).returncode == 0
    lines = [b"a", b"b", b"c", b"x" * 11_000_000, b"d", b"e"]
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = against(server, project, "publish", "partial", "--file", str(path))
    line = one_line_error(result)
    ids = result.stdout.split()
    assert len(ids) == 3  # lines 1-3 went in one request before the one that failed
    assert "published 3 of 6 messages (lines 1-3, ids above)" in line
    assert "not published: lines 4-6" in line
    pulled = against(server, project, "pull", "partial-sub", "--max", "10")
    assert [json.loads(x)["messageId"] for x in pulled.stdout.splitlines()] == ids
