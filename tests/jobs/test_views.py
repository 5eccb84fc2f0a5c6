"""Spark SQL views over a lake, the `lakepubsub sql` command and docs/spark.md's examples."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from jobtools import context
from pyspark.sql import SparkSession
from support import LakeSpec, free_port

from jobs import compact, truncate
from jobs.sql import sql
from lakepubsub import Engine, errors
from lakepubsub._lake.checkpointer import settle_checkpoints
from lakepubsub.messages import PublishMessage
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription, TruncationPolicy
from lakepubsub.resources.topics import Topic
from lakepubsub.spark.views import register, view_name

DOCS = Path(__file__).parents[2] / "docs" / "spark.md"
REGIONS = ("eu", "us")


@pytest.fixture
def shop(local_engine: Engine, local_lake: LakeSpec, spark: SparkSession) -> Engine:
    """docs/spark.md's lake: shop/orders with regions, an audit subscription, a truncation."""
    engine = local_engine
    orders = engine.create_topic(Topic(TopicName("shop", "orders")))
    audit = engine.create_subscription(
        Subscription(SubscriptionName("shop", "orders-audit"), orders.name)
    )
    engine.create_subscription(
        Subscription(
            SubscriptionName("shop", "orders-small"),
            orders.name,
            truncation_policy=TruncationPolicy(max_bytes=100),
        )
    )
    for batch in range(3):
        engine.publish(
            orders.name,
            [
                PublishMessage(f"order {batch * 10 + i}".encode(), {"region": REGIONS[i % 2]})
                for i in range(10)
            ],
        )
    received = engine.pull(audit.name, max_messages=4, return_immediately=True)
    engine.acknowledge(audit.name, [r.ack_id for r in received[:2]])
    with context(local_lake, spark) as ctx:
        truncate.run(ctx, truncate.TruncateOptions(delete_messages=False))
    return engine


def test_views_show_history_backlogs_and_truncations(
    shop: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    views = {v.name: v for v in register(spark, local_lake.settings())}
    assert set(views) == {
        "shop__orders",
        "shop__orders_audit__backlog",
        "shop__orders_small__backlog",
        "topics",
        "subscriptions",
        "truncations",
    }
    assert views["shop__orders"].resource == "projects/shop/topics/orders"
    hourly = spark.sql(
        "SELECT attributes['region'] AS region, count(*) AS n FROM shop__orders GROUP BY 1"
    ).collect()
    assert sorted((r["region"], r["n"]) for r in hourly) == [("eu", 15), ("us", 15)]
    found = spark.sql(
        "SELECT offset, CAST(data AS STRING) AS text FROM shop__orders WHERE message_id = '7'"
    ).collect()
    assert [(r["offset"], r["text"]) for r in found] == [(7, "order 7")]
    # The audit backlog: 2 leased (pulled, not acked), 26 never delivered.
    backlog = spark.sql(
        "SELECT offset, lease_state, delivery_attempts FROM shop__orders_audit__backlog"
    ).collect()
    assert sorted(r["offset"] for r in backlog) == list(range(2, 30))
    assert sorted(r["offset"] for r in backlog if r["lease_state"] == "leased") == [2, 3]
    subs = {r["subscription"]: r for r in spark.sql("SELECT * FROM subscriptions").collect()}
    assert (subs["orders-audit"]["floor"], subs["orders-audit"]["backlog_messages"]) == (2, 28)
    [cut] = spark.sql("SELECT * FROM truncations").collect()
    assert (cut["subscription"], cut["reason"]) == (
        "projects/shop/subscriptions/orders-small",
        "max_bytes",
    )
    assert spark.sql("SELECT count(*) AS n FROM shop__orders_small__backlog").first()["n"] == (
        30 - cut["end_offset"]
    )
    [topic] = spark.sql("SELECT * FROM topics").collect()
    assert (topic["view"], topic["oldest_offset"], topic["head"]) == ("shop__orders", 0, 30)
    # No retention set: the lake keeps the history for the default 7 days.
    assert (topic["message_retention_seconds"], topic["history_seconds"]) == (None, 7 * 86400)
    assert topic["location"].startswith("file://")
    by_location = spark.sql(f"SELECT count(*) AS n FROM delta.`{topic['location']}`").first()
    assert by_location["n"] == 30


def test_time_travel_and_refresh(shop: Engine, local_lake: LakeSpec, spark: SparkSession) -> None:
    orders = TopicName("shop", "orders")
    register(spark, local_lake.settings())
    assert spark.sql("SELECT count(*) AS n FROM shop__orders").first()["n"] == 30
    shop.publish(orders, [PublishMessage(b"late")])
    assert spark.sql("SELECT count(*) AS n FROM shop__orders").first()["n"] == 30  # pinned
    register(spark, local_lake.settings(), versions={"shop__orders": 2})
    assert spark.sql("SELECT count(*) AS n FROM shop__orders").first()["n"] == 20
    register(spark, local_lake.settings())
    assert spark.sql("SELECT count(*) AS n FROM shop__orders").first()["n"] == 31
    register(spark, local_lake.settings(), timestamp="2000-01-01T00:00:00Z")
    # Before the topic's first publish: its first version, empty.
    assert spark.sql("SELECT count(*) AS n FROM shop__orders").first()["n"] == 0


def test_colliding_names_get_uid_suffixes(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    first = local_engine.create_topic(Topic(TopicName("my-shop", "a-b")))
    second = local_engine.create_topic(Topic(TopicName("my-shop", "a.b")))
    third = local_engine.create_topic(Topic(TopicName("my-shop", "A_b")))
    names = {v.resource: v.name for v in register(spark, local_lake.settings())}
    assert view_name("my-shop", "a-b") == "my_shop__a_b"
    # Name order: "A_b" < "a-b" < "a.b"; the first keeps the plain name.
    assert names[third.name.path] == "my_shop__A_b"
    assert names[first.name.path] == f"my_shop__a_b__{first.uid[:8]}"
    assert names[second.name.path] == f"my_shop__a_b__{second.uid[:8]}"
    for view in names.values():
        assert spark.sql(f"SELECT count(*) AS n FROM {view}").first()["n"] == 0


def test_docs_examples_run(shop: Engine, local_lake: LakeSpec, spark: SparkSession) -> None:
    """Every SQL block of docs/spark.md runs against the lake the docs describe."""
    register(spark, local_lake.settings())
    blocks = re.findall(r"```sql\n(.*?)```", DOCS.read_text(), re.DOTALL)
    blocks = [b for b in blocks if "typed" not in b]  # tests/spark/test_typed_views.py
    assert len(blocks) >= 6
    results = {}
    location = spark.sql("SELECT location FROM topics").first()["location"]
    for block in blocks:
        statement = block.replace("/path/from/topics.location", location)
        statement = statement.replace("VERSION AS OF 3", "VERSION AS OF 1")
        results[statement.split("\n")[0]] = spark.sql(statement).collect()
    hourly = next(v for k, v in results.items() if "date_trunc" in k)
    assert sum(r["messages"] for r in hourly) == 30
    assert {r["region"] for r in hourly} == set(REGIONS)
    [version_1] = next(v for k, v in results.items() if "VERSION AS OF" in k)
    assert version_1[0] == 10
    history = next(v for k, v in results.items() if "DESCRIBE HISTORY" in k)
    assert {r["version"] for r in history} >= {0, 1, 2, 3}


def test_sql_command(shop: Engine, local_lake: LakeSpec, spark: SparkSession) -> None:
    runner = CliRunner()
    query = (
        "SELECT attributes['region'] AS region, count(*) AS n"
        " FROM shop__orders GROUP BY 1 ORDER BY 1"
    )
    table = runner.invoke(sql, [query, "--lake", local_lake.uri])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split() == ["region", "|", "n"]
    assert lines[2].split() == ["eu", "|", "15"] and lines[3].split() == ["us", "|", "15"]
    assert lines[-1] == "(2 rows)"
    pinned = runner.invoke(
        sql,
        [
            *("SELECT * FROM shop__orders ORDER BY offset", "--lake", local_lake.uri),
            *("--version", "shop__orders=1", "--format", "json", "--max-rows", "3"),
        ],
    )
    assert pinned.exit_code == 0, pinned.output
    rows = [json.loads(line) for line in pinned.stdout.splitlines()]
    assert [r["offset"] for r in rows] == [0, 1, 2]
    assert rows[0]["data"] == "order 0" and rows[0]["attributes"] == {"region": "eu"}
    bad = runner.invoke(sql, ["SELECT 1", "--lake", local_lake.uri, "--version", "nope"])
    assert bad.exit_code == 2


def test_empty_lake_has_the_lake_wide_views(spark: SparkSession, local_lake: LakeSpec) -> None:
    views = register(spark, local_lake.settings())
    assert {v.name for v in views} == {"topics", "subscriptions", "truncations"}
    assert spark.sql("SELECT count(*) AS n FROM truncations").first()["n"] == 0


def test_readme_sql_examples_run(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    """The README's `lakepubsub sql` examples, on its quickstart's topic."""
    topic = TopicName("demo", "orders")
    local_engine.create_topic(Topic(topic))
    local_engine.publish(
        topic, [PublishMessage(f"hello {i}".encode(), {"kind": "greeting"}) for i in range(3)]
    )
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    queries = re.findall(r'lakepubsub sql "(.*?)"', readme, re.DOTALL)
    assert len(queries) == 3
    counts = []
    for query in queries:
        done = CliRunner().invoke(sql, [query, "--lake", local_lake.uri])
        assert done.exit_code == 0, done.output
        counts.append(done.output.splitlines()[-1])
    assert counts == ["(1 row)", "(1 row)", "(3 rows)"]


def test_time_travel_is_exact_or_fails_in_one_line(
    local_engine: Engine, local_lake: LakeSpec, spark: SparkSession
) -> None:
    topic = local_engine.create_topic(Topic(TopicName("shop", "ledger")))
    for i in range(14):  # versions 1-14, one message each
        local_engine.publish(topic.name, [PublishMessage(f"entry {i}".encode())])
        # Delta moves a commit's time 1 ms past an earlier commit of the same
        # millisecond; then version 5's file time would name version 4.
        time.sleep(0.003)
    uri = local_engine.lake.messages_uri(topic.uid)
    log_dir = Path(uri) / "_delta_log"
    at_v5 = datetime.fromtimestamp((log_dir / f"{5:020d}.json").stat().st_mtime, UTC)
    register(spark, local_lake.settings(), timestamp=at_v5)
    assert spark.sql("SELECT count(*) AS n FROM shop__ledger").first()["n"] == 5

    # The log is cleaned up to a checkpoint at version 14, as log retention does.
    settle_checkpoints()
    DeltaTable(uri).create_checkpoint()
    hour_ago = time.time() - 3600
    for entry in log_dir.iterdir():
        if entry.name[:20].isdigit() and int(entry.name[:20]) < 14:
            os.utime(entry, (hour_ago, hour_ago))
    DeltaTable(uri).cleanup_metadata()
    assert not (log_dir / f"{5:020d}.json").exists()

    with pytest.raises(errors.NotFound, match=r"cannot read version 5: .*Available versions: \[14"):
        register(spark, local_lake.settings(), versions={"shop__ledger": 5})
    with pytest.raises(errors.NotFound, match=r"as of .*earliest version available") as early:
        register(spark, local_lake.settings(), timestamp=at_v5)
    assert "\n" not in str(early.value)
    register(spark, local_lake.settings(), timestamp=datetime.now(UTC))
    assert spark.sql("SELECT count(*) AS n FROM shop__ledger").first()["n"] == 14

    runner = CliRunner()
    for args in (["--version", "shop__ledger=5"], ["--timestamp", at_v5.isoformat()]):
        failed = runner.invoke(sql, ["SELECT 1", "--lake", local_lake.uri, *args])
        assert failed.exit_code == 1
        assert failed.output.count("\n") == 1 and failed.output.startswith("Error: ")
    typo = runner.invoke(sql, ["SELEC count(*) FROM shop__ledger", "--lake", local_lake.uri])
    assert typo.exit_code == 1
    assert typo.output.startswith("Error: [PARSE_SYNTAX_ERROR]") and typo.output.count("\n") == 1


def test_sql_shell(shop: Engine, local_lake: LakeSpec, spark: SparkSession) -> None:
    """`lakepubsub sql` without a query: statements over several lines, dot commands,
    errors as one line, all on one session."""
    script = "\n".join(
        [
            "SELECT count(*) AS n",
            "  FROM shop__orders;",
            ".tables",
            "SELEC 1;",
            "SELECT attributes['region'] AS region, count(*) AS n FROM shop__orders",
            " GROUP BY 1 ORDER BY 1;",
            ".nope",
            ".refresh",
            ".quit",
            "SELECT 'never run';",
        ]
    )
    done = CliRunner().invoke(sql, ["--lake", local_lake.uri], input=script + "\n")
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines[:4] == ["n", "--", "30", "(1 row)"]
    tables = [line.split()[0] for line in lines[4:10]]
    assert tables == [
        "shop__orders",
        "shop__orders_audit__backlog",
        "shop__orders_small__backlog",
        "topics",
        "subscriptions",
        "truncations",
    ]
    assert lines[10].startswith("Error: [PARSE_SYNTAX_ERROR]")
    assert [line.split() for line in lines[13:15]] == [["eu", "|", "15"], ["us", "|", "15"]]
    assert lines[16:] == [
        "Error: unknown command .nope; .help lists them",
        "6 views at the newest versions",
    ]


def test_sql_serve_spark_connect(shop: Engine, local_lake: LakeSpec) -> None:
    """`lakepubsub sql --serve`: a Spark Connect client queries the views (global_temp)."""
    port = free_port()
    command = [sys.executable, "-m", "lakepubsub.cli", "sql", "--serve", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--lake", local_lake.uri, "--master", "local[1]"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        for line in server.stderr:  # Spark's start-up, then the line saying it serves
            if line.startswith("Spark Connect on"):
                break
        else:
            raise AssertionError(f"the server ended: {server.wait()}")
        assert f"sc://127.0.0.1:{port}" in line and "6 views" in line
        query = (
            "SELECT attributes['region'] AS region, count(*) AS n"
            " FROM global_temp.shop__orders GROUP BY 1 ORDER BY 1"
        )
        client = Path(__file__).with_name("connect_client.py")
        done = subprocess.run(
            [sys.executable, str(client), str(port), query],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        assert rows == [{"region": "eu", "n": 15}, {"region": "us", "n": 15}]
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0


def test_views_read_the_intake_before_and_after_a_move_and_compaction(
    local_lake: LakeSpec, spark: SparkSession
) -> None:
    """A topic whose newest messages are still in the intake reads the same rows and
    offsets in SQL before they move to its table, after, and after compaction."""
    topic = TopicName("hot", "events")
    settings = local_lake.settings(intake=True, intake_move_s=3600.0)
    with Engine(settings) as engine:
        engine.create_topic(Topic(topic))
        for n in range(12):
            engine.publish(topic, [PublishMessage(f"e{n}".encode(), {"n": str(n)})])

    def rows() -> list[tuple[int, str, bytes, str]]:
        register(spark, local_lake.settings())
        found = spark.sql(
            "SELECT offset, message_id, data, attributes['n'] FROM hot__events ORDER BY offset"
        ).collect()
        heads = spark.sql("SELECT head FROM topics WHERE view = 'hot__events'").collect()
        assert heads[0][0] == len(found)
        return [(r[0], r[1], bytes(r[2]), r[3]) for r in found]

    expected = [(n, str(n), f"e{n}".encode(), str(n)) for n in range(12)]
    assert rows() == expected  # all in the intake: the table is empty
    with Engine(local_lake.settings(intake=True, intake_move_s=0.0)) as engine:
        uid = engine.resources.topic_entry(topic).uid
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if DeltaTable(engine.lake.messages_uri(uid)).version() > 0:
                break
            time.sleep(0.1)
        # Two more: one part in the table, one in the intake.
        engine.publish(topic, [PublishMessage(b"e12", {"n": "12"})])
    assert DeltaTable(local_lake.uri + f"/topics/{uid}/messages").version() > 0
    expected.append((12, "12", b"e12", "12"))
    register(spark, local_lake.settings())
    assert spark.sql("SELECT count(*) FROM hot__events").collect()[0][0] == 13
    with context(local_lake, spark) as ctx:
        compact.run(ctx, compact.CompactOptions(min_small_files=2))
    register(spark, local_lake.settings())
    after = spark.sql("SELECT offset, data FROM hot__events ORDER BY offset").collect()
    assert [(r[0], bytes(r[1])) for r in after] == [(o, d) for o, _, d, _ in expected]
