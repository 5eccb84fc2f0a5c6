"""The first hour's rough edges of issue 31, each as a new user met it: lakes that
cannot be used, jobs run from the wrong directory, S3 without credentials, the
CLI's missing commands and help, and what a server prints and answers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner
from google.api_core import exceptions
from google.cloud import pubsub_v1
from support import LakeSpec, MotoServer, Server, start_server, stop_server

from bench.harness.ports import free_port, wait_for_port
from lakepubsub import cli

ROOT = Path(__file__).parents[1]
LAKEPUBSUB = str(Path(sys.executable).with_name("lakepubsub"))


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAKEPUBSUB, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    return line


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(LakeSpec(str(tmp_path_factory.mktemp("edges-lake")), {}))
    yield srv
    stop_server(srv)


# -- 2. lakes that cannot be made or written -------------------------------------------------


def test_a_lake_that_cannot_be_made_or_written_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a lake")
    expected = {
        "/proc/x": "cannot create the directory (No such file or directory)",
        str(a_file): "not a directory",
        str(a_file / "lake"): "cannot create the directory (Not a directory)",
        # exists, and not even root may write in it
        "/proc": "cannot write in the directory",
    }
    for lake, said in expected.items():
        for args in (("--direct", "topics", "list"), ("serve", "--port", str(free_port()))):
            line = one_line(run("--lake", lake, *args))
            assert line.startswith(f"Error: lake {lake}: {said}"), line
            assert "must name a directory this user can create and write" in line
            assert "bucket" not in line


# -- 5. jobs and queries on a lake that is not there ------------------------------------------


def test_a_job_from_another_directory_makes_no_lake(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LAKEPUBSUB_LAKE"}
    for job in ("compact", "gc"):
        line = one_line(run("jobs", "run", job, env=env, cwd=tmp_path))
        assert line.startswith(f"Error: no lake at {tmp_path}/.lake: no such directory"), line
        assert "--lake or LAKEPUBSUB_LAKE" in line
    assert list(tmp_path.iterdir()) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line(run("--lake", str(empty), "jobs", "run", "compact"))
    assert line.startswith(f"Error: no lake at {empty}: it has no catalog")
    assert list(empty.iterdir()) == []


# -- 6. S3 -----------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_without_credentials_says_so(moto_server: MotoServer, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_ENDPOINT_URL": moto_server.endpoint, "HOME": str(tmp_path)}
    lake = f"s3://{moto_server.bucket}/{uuid.uuid4().hex}"
    for args in (("--direct", "topics", "list"), ("jobs", "run", "gc")):
        line = one_line(run("--lake", lake, *args, env=env))
        assert "no AWS credentials" in line and "AWS_ACCESS_KEY_ID" in line, line


def test_the_docs_name_one_endpoint_variable_and_how_to_try_s3() -> None:
    readme = (ROOT / "README.md").read_text()
    spark = (ROOT / "docs" / "spark.md").read_text()
    assert "LAKEPUBSUB_S3_ENDPOINT" not in spark
    assert "AWS_ENDPOINT_URL" in spark
    section = readme.split("### Trying an S3 lake locally", 1)[1].split("\n## ", 1)[0]
    for needed in ("create the bucket", "AWS_ENDPOINT_URL", "http://", "AWS_ACCESS_KEY_ID"):
        assert needed in section, needed


# -- 7. the command line ---------------------------------------------------------------------


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


def test_help_is_plain_text_and_names_every_variable() -> None:
    runner = CliRunner()
    for path in [(), *_commands(cli.main)]:
        text = runner.invoke(cli.main, [*path, "--help"]).output
        assert "`" not in text.replace("`lakepubsub", ""), (path, text)
    text = runner.invoke(cli.main, ["--help"]).output
    read = set()
    for source in [*ROOT.glob("lakepubsub/**/*.py"), *ROOT.glob("api/**/*.py")]:
        read |= set(re.findall(r"LAKEPUBSUB_[A-Z0-9_]*[A-Z0-9]", source.read_text()))
    read |= {f"LAKEPUBSUB_{job}_INTERVAL_S" for job in ("COMPACT", "TRUNCATE", "GC")}
    read.discard("LAKEPUBSUB_PUSH_")  # "LAKEPUBSUB_PUSH_*" in prose
    assert sorted(name for name in read if name not in text) == []


def test_subscriptions_get_and_truncate_and_publish_says_what_it_did(server: Server) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"

    def cli_run(*args: str) -> subprocess.CompletedProcess[str]:
        return run(*args, "--url", server.url, "--project", project)  # options after the command

    assert cli_run("topics", "create", "events").returncode == 0
    assert cli_run("subscriptions", "create", "events-sub", "--topic", "events").returncode == 0
    shown = cli_run("subscriptions", "get", "events-sub")
    assert json.loads(shown.stdout)["topic"] == f"projects/{project}/topics/events"
    nothing = cli_run("subscriptions", "truncate", "events-sub")
    assert nothing.stdout.strip() == "events-sub: nothing to drop (no unacknowledged messages)"
    said = cli_run("publish", "events", "--data", "one", "--format", "text")
    assert said.stdout.strip() == f"published message 0 to projects/{project}/topics/events"
    assert cli_run("publish", "events", "--data", "two").stdout.strip() == "1"  # for scripts
    dropped = cli_run("subscriptions", "truncate", "events-sub")
    assert dropped.stdout.strip() == (
        "events-sub: dropped offsets 0-1; the next pull delivers a truncation event first"
    )


# -- 9. what the server answers and prints ---------------------------------------------------


def test_truncate_with_nothing_to_drop_says_so(server: Server) -> None:
    base = f"/v1/projects/p{uuid.uuid4().hex[:8]}"
    with server.client() as http:
        http.put(f"{base}/topics/quiet").raise_for_status()
        body = {"topic": f"{base.removeprefix('/v1/')}/topics/quiet"}
        http.put(f"{base}/subscriptions/quiet-sub", json=body).raise_for_status()
        answer = http.post(f"{base}/subscriptions/quiet-sub:truncate")
        assert answer.json()["event"]["truncated"] is False
        pulled = http.post(f"{base}/subscriptions/quiet-sub:pull", json={"maxMessages": 5})
        assert pulled.json().get("receivedMessages", []) == []


def test_serve_logs_grpc_like_rest_and_answers_end_with_a_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "LAKEPUBSUB_LAKE"}
    server = subprocess.Popen(
        [LAKEPUBSUB, "serve", "--lake", "lake", "--port", str(port)],  # --lake after serve
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_port(port, process=server)
        url = f"http://127.0.0.1:{port}"
        created = httpx.put(f"{url}/v1/projects/demo/topics/orders")
        missing = httpx.get(f"{url}/v1/projects/demo/topics/nope")
        published = httpx.post(
            f"{url}/v1/projects/demo/topics/orders:publish", json={"messages": [{"data": "aGk="}]}
        )
        for answer in (created, missing, published):
            assert answer.content.endswith(b"}\n"), answer.content
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{port}")
        publisher = pubsub_v1.PublisherClient()
        publisher.publish("projects/demo/topics/orders", b"x").result(timeout=30)
        with pytest.raises(exceptions.NotFound):
            publisher.get_topic(topic="projects/demo/topics/nope")
        time.sleep(0.5)
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
    lines = output.splitlines()
    assert lines[0] == f"lakepubsub: lake {tmp_path}/lake, http://127.0.0.1:{port}"
    logged = [line.split(" - ", 1)[1] for line in lines if " - " in line]
    assert '"PUT /v1/projects/demo/topics/orders HTTP/1.1" 200 OK' in logged
    assert '"gRPC /google.pubsub.v1.Publisher/Publish" OK' in logged
    assert '"gRPC /google.pubsub.v1.Publisher/GetTopic" NOT_FOUND' in logged
