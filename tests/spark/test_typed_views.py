"""Typed views on delta-spark: a topic whose Avro schema gained a revision half-way,
decoded row by row with the revision each message was published under (local and
moto S3); rows that no longer decode are kept and counted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from schemakit import STATE, STATE_V2, avro_binary
from support import LakeSpec

from lakepubsub import Engine, PublishMessage, Topic, TopicName
from lakepubsub.resources.names import SchemaName
from lakepubsub.resources.topics import SchemaSettings
from lakepubsub.spark.views import register

DOCS = Path(__file__).parents[2] / "docs" / "spark.md"
# Revision 3 adds one more field; it is deleted after two messages used it.
CAPITAL = {"name": "capital", "type": "string", "default": ""}
STATE_V3 = {**STATE_V2, "fields": [*STATE_V2["fields"], CAPITAL]}


def test_typed_view_decodes_each_revision(spark: SparkSession, lake: LakeSpec) -> None:
    schema = SchemaName("shop", "states")
    topic = TopicName("shop", "states")
    with Engine(lake.settings()) as engine:
        first = engine.schemas.create(schema, "AVRO", json.dumps(STATE))
        engine.create_topic(
            Topic(topic, schema_settings=SchemaSettings(schema.path, encoding="BINARY"))
        )
        v1 = [avro_binary(STATE, {"name": f"s{i}", "post_abbr": "V1"}) for i in range(10)]
        engine.publish(topic, [PublishMessage(m) for m in v1])
        second = engine.schemas.commit(schema, "AVRO", json.dumps(STATE_V2))
        engine.publish(
            topic,
            [
                PublishMessage(
                    avro_binary(STATE_V2, {"name": f"s{i}", "post_abbr": "V2", "population": i})
                )
                for i in range(10, 20)
            ],
        )
        third = engine.schemas.commit(schema, "AVRO", json.dumps(STATE_V3))
        record = {"name": "x", "post_abbr": "V3", "population": 1, "capital": "c"}
        engine.publish(topic, [PublishMessage(avro_binary(STATE_V3, record))] * 2)
        engine.schemas.delete_revision(f"{schema.path}@{third.revision_id}")

    views = register(spark, lake.settings())
    assert "shop__states__typed" in [v.name for v in views]
    typed = spark.table("shop__states__typed")
    assert typed.columns == [
        "offset", "message_id", "publish_time", "ordering_key", "attributes",
        "schema_revision_id", "name", "post_abbr", "population", "decode_error",
    ]  # fmt: skip
    rows = {r["offset"]: r for r in typed.collect()}
    assert len(rows) == 22  # every message, decoded or not
    for offset in range(10):  # revision 1: population takes revision 2's default
        row = rows[offset]
        assert (row["name"], row["post_abbr"], row["population"]) == (f"s{offset}", "V1", 0)
        assert row["schema_revision_id"] == first.revision_id and row["decode_error"] is None
    for offset in range(10, 20):
        row = rows[offset]
        assert (row["name"], row["post_abbr"], row["population"]) == (f"s{offset}", "V2", offset)
        assert row["schema_revision_id"] == second.revision_id and row["decode_error"] is None
    for offset in (20, 21):
        assert rows[offset]["name"] is None
        assert rows[offset]["decode_error"] == (
            f"revision {third.revision_id} is no longer in the schema"
        )
    total = spark.sql(
        "SELECT post_abbr, count(*) AS n, sum(population) AS people FROM shop__states__typed"
        " WHERE decode_error IS NULL GROUP BY post_abbr ORDER BY post_abbr"
    ).collect()
    assert [(r["post_abbr"], r["n"], r["people"]) for r in total] == [
        ("V1", 10, 0),
        ("V2", 10, sum(range(10, 20))),
    ]
    errors = spark.table("typed_decode_errors").collect()
    assert [(r["view"], r["schema_revision_id"], r["messages"]) for r in errors] == [
        ("shop__states__typed", third.revision_id, 2)
    ]
    # docs/spark.md's examples run on this lake.
    docs = re.findall(r"```sql\n(.*?)```", DOCS.read_text(), re.DOTALL)
    examples = [spark.sql(b).collect() for b in docs if "typed" in b]
    assert len(examples) == 3
    assert sorted(r["people"] for r in examples[0]) == [0, sum(range(10, 20))]
    assert sum(r["messages"] for r in examples[1]) == 22


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_json_messages_and_undecodable_bytes(spark: SparkSession, lake: LakeSpec) -> None:
    schema = SchemaName("shop", "states")
    topic = TopicName("shop", "states-json")
    with Engine(lake.settings()) as engine:
        engine.schemas.create(schema, "AVRO", json.dumps(STATE))
        engine.create_topic(Topic(topic, schema_settings=SchemaSettings(schema.path)))
        engine.publish(topic, [PublishMessage(b'{"name": "Ohio", "post_abbr": "OH"}')])
        # Stored without the schema's attributes (as a dead letter would be): reported.
        engine._publish_unchecked(topic, [PublishMessage(b"not avro")])
    register(spark, lake.settings())
    rows = spark.sql(
        "SELECT offset, name, post_abbr, decode_error FROM shop__states_json__typed ORDER BY offset"
    ).collect()
    assert [tuple(r) for r in rows] == [
        (0, "Ohio", "OH", None),
        (1, None, None, "no googclient_schemarevisionid attribute"),
    ]
    assert spark.table("typed_decode_errors").collect()[0]["messages"] == 1
