"""`lakepubsub jobs run|schedule`, the job scripts under spark-submit, and lazy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from jobtools import publish_batches, sub_name, topic_name
from pyspark.sql import SparkSession
from support import LakeSpec

from jobs.cli import jobs
from lakepubsub import Engine
from lakepubsub.cli import main
from lakepubsub.resources.subscriptions import Subscription, TruncationPolicy
from lakepubsub.resources.topics import Topic

ROOT = Path(__file__).parents[2]


def test_importing_the_cli_starts_no_spark() -> None:
    code = (
        "import sys, jobs.cli, jobs.compact, jobs.gc;"
        "assert 'pyspark' not in sys.modules, 'pyspark imported';"
        "print(sorted(jobs.cli.run.commands))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "['batch-consume', 'compact', 'gc', 'stream-consume', 'truncate']"


def test_run_compact_and_truncate(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    topic = local_engine.create_topic(Topic(topic_name("cli")))
    local_engine.create_subscription(
        Subscription(
            sub_name("cli-sub"), topic.name, truncation_policy=TruncationPolicy(max_bytes=1)
        )
    )
    publish_batches(local_engine, topic.name, batches=9, per_batch=2)
    runner = CliRunner()
    compacted = runner.invoke(jobs, ["run", "compact", "--lake", local_lake.uri])
    assert compacted.exit_code == 0, compacted.output
    report = json.loads(compacted.stdout.strip().splitlines()[-1])
    [messages] = [t for t in report["tables"] if t["kind"] == "messages"]
    assert (messages["files_before"], messages["files_after"]) == (9, 1)
    # The lake can also come from the environment, as for `lakepubsub serve`.
    truncated = runner.invoke(jobs, ["run", "truncate"], env={"LAKEPUBSUB_LAKE": local_lake.uri})
    assert truncated.exit_code == 0, truncated.output
    report = json.loads(truncated.stdout.strip().splitlines()[-1])
    assert [(t["reason"], t["end_offset"]) for t in report["truncations"]] == [("max_bytes", 18)]
    # The topic has no retention of its own: its history stays for the default 7 days.
    [history] = report["topics"]
    assert (history["status"], history["kept_from"], history["rows_deleted"]) == ("nothing", 0, 0)
    assert history["kept_because"].startswith("topic retention: 7 days (the default")


def test_batch_consume_needs_one_transformation(local_lake: LakeSpec) -> None:
    runner = CliRunner()
    args = ["run", "batch-consume", "--lake", local_lake.uri]
    args += ["--subscription", "projects/p/subscriptions/sss", "--target", "/tmp/x"]
    result = runner.invoke(jobs, args)
    assert result.exit_code == 2
    assert "exactly one of --sql and --transform" in result.output


def test_schedule_runs_each_job(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession, tmp_path: Path
) -> None:
    topic = local_engine.create_topic(Topic(topic_name("scheduled")))
    sub = local_engine.create_subscription(Subscription(sub_name("scheduled-batch"), topic.name))
    publish_batches(local_engine, topic.name, batches=9, per_batch=3)
    target = tmp_path / "hourly"
    config = tmp_path / "jobs.toml"
    config.write_text(
        "[compact]\nmin_small_files = 4\n\n"
        "[[batch_consume]]\ninterval_s = 3600\n"
        f'subscription = "{sub.name.path}"\ntarget = "{target}"\n'
        'transform = "jobs.examples.hourly_counts:transform"\n'
    )
    result = CliRunner().invoke(
        jobs,
        ["schedule", "--lake", local_lake.uri, "--config", str(config), "--max-runs", "4"],
    )
    assert result.exit_code == 0, result.output
    tasks = {d["task"]: d for d in map(json.loads, result.stdout.strip().splitlines())}
    assert {name: (t["runs"], t["failures"]) for name, t in tasks.items()} == {
        "compact": (1, 0),
        "truncate": (1, 0),
        "gc": (1, 0),
        f"batch-consume {sub.name.path}": (1, 0),
    }
    assert local_engine.subscription_state(sub.name).floor() == 27
    assert target.is_dir()


def test_job_script_under_spark_submit(local_engine: Engine, local_lake: LakeSpec) -> None:
    """`spark-submit jobs/gc.py --lake …`: the entry point EMR Serverless and cron use."""
    local_engine.create_topic(Topic(topic_name("submitted")))
    os.makedirs(os.path.join(local_lake.uri, "topics", "f" * 32))
    submit = Path(sys.executable).with_name("spark-submit")
    command = [str(submit), "--master", "local[1]", "jobs/gc.py"]
    done = subprocess.run(
        [*command, "--lake", local_lake.uri, "--orphan-age-s", "0"],
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["job"] == "gc"
    assert report["orphans_removed"] == [f"topics/{'f' * 32}"]


def test_the_lakepubsub_command_carries_jobs_and_sql() -> None:

    runner = CliRunner()
    listed = runner.invoke(main, ["jobs", "run", "--help"])
    assert listed.exit_code == 0, listed.output
    for job in ("compact", "truncate", "gc", "batch-consume", "stream-consume"):
        assert job in listed.output
    assert runner.invoke(main, ["jobs", "schedule", "--help"]).exit_code == 0
    assert "Usage: main sql [OPTIONS] [QUERY]" in runner.invoke(main, ["sql", "--help"]).output
