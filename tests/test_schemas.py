"""Schemas in the catalog: revisions, limits, bad definitions, and publish validation,
on real Delta tables (local and moto S3)."""

from __future__ import annotations

import io
import json
import random

import fastavro
import pytest
from schemakit import PROTO, STATE, STATE_V2, avro_binary

from lakepubsub import Engine, PublishMessage, Topic, TopicName, constants, errors
from lakepubsub.messages import from_arrow
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.names import SchemaName
from lakepubsub.resources.topics import DELETED_SCHEMA, SchemaSettings
from lakepubsub.schemas.codecs import compile_definition
from lakepubsub.schemas.registry import (
    ENCODING_ATTRIBUTE,
    NAME_ATTRIBUTE,
    REVISION_ATTRIBUTE,
)

STATE_V1 = STATE
SCHEMA = SchemaName("proj", "states")


def catalog_version(engine: Engine) -> int:
    return engine.catalog.view().version


def test_revisions_commit_rollback_list_and_delete(engine: Engine) -> None:
    first = engine.schemas.create(SCHEMA, "AVRO", json.dumps(STATE_V1))
    assert len(first.revision_id) == 8
    second = engine.schemas.commit(SCHEMA, "AVRO", json.dumps(STATE_V2))
    assert engine.schemas.get(SCHEMA.path).revision_id == second.revision_id
    assert engine.schemas.get(f"{SCHEMA.path}@{first.revision_id}").definition == json.dumps(
        STATE_V1
    )
    rolled = engine.schemas.rollback(SCHEMA, first.revision_id)
    assert rolled.definition == first.definition
    assert rolled.revision_id not in (first.revision_id, second.revision_id)
    listed, token = engine.schemas.list_revisions(SCHEMA)
    assert token == ""
    assert [s.revision_id for s in listed] == [
        rolled.revision_id,
        second.revision_id,
        first.revision_id,
    ]
    page, token = engine.schemas.list_revisions(SCHEMA, page_size=2)
    rest, end = engine.schemas.list_revisions(SCHEMA, page_size=2, page_token=token)
    assert [s.revision_id for s in page + rest] == [s.revision_id for s in listed]
    assert end == ""
    newest = engine.schemas.delete_revision(f"{SCHEMA.path}@{rolled.revision_id}")
    assert newest.revision_id == second.revision_id
    with pytest.raises(errors.NotFound):
        engine.schemas.get(f"{SCHEMA.path}@{rolled.revision_id}")
    engine.schemas.delete(SCHEMA)
    with pytest.raises(errors.NotFound):
        engine.schemas.get(SCHEMA.path)
    assert engine.schemas.list_schemas("proj") == ([], "")


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_list_schemas_pages_by_name(engine: Engine) -> None:
    for i in range(5):
        engine.schemas.create(SchemaName("proj", f"schema-{i}"), "PROTOCOL_BUFFER", PROTO)
    page, token = engine.schemas.list_schemas("proj", page_size=3)
    rest, end = engine.schemas.list_schemas("proj", page_size=3, page_token=token)
    assert [s.name.id for s in page + rest] == [f"schema-{i}" for i in range(5)]
    assert end == ""
    with pytest.raises(errors.AlreadyExists):
        engine.schemas.create(SchemaName("proj", "schema-0"), "AVRO", json.dumps(STATE_V1))


BAD_DEFINITIONS = [
    ("AVRO", "{not json", "Invalid Avro schema definition"),
    ("AVRO", json.dumps({"type": "record", "name": "X", "fields": [{"name": "a"}]}), "Avro"),
    ("AVRO", json.dumps({"type": "recrod", "name": "X", "fields": []}), "Avro"),
    ("PROTOCOL_BUFFER", 'syntax = "proto3"; message A { strin x = 1; }', '"strin" is not defined'),
    ("PROTOCOL_BUFFER", 'syntax = "proto3"; message A {} message B {}', "exactly one top-level"),
    (
        "PROTOCOL_BUFFER",
        'syntax = "proto3"; import "other.proto"; message A {}',
        "other.proto",
    ),
    # Items of zero bytes: a message of a few bytes could declare billions of them.
    (
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "X",
                "fields": [
                    {"name": "ok", "type": {"type": "array", "items": ["null", "int"]}},
                    {
                        "name": "m",
                        "type": {"type": "map", "values": {"type": "array", "items": "null"}},
                    },
                ],
            }
        ),
        r"array at m\{\} encode in zero bytes",
    ),
    (
        "AVRO",
        json.dumps({"type": "array", "items": {"type": "record", "name": "E", "fields": []}}),
        "array at the top level encode in zero bytes",
    ),
    ("TYPE_UNSPECIFIED", PROTO, "schema.type must be AVRO or PROTOCOL_BUFFER"),
    ("AVRO", "", "schema.definition is required"),
    (
        "PROTOCOL_BUFFER",
        PROTO + "//" + "x" * constants.MAX_SCHEMA_DEFINITION_BYTES,
        "the limit is 307200",
    ),
]


@pytest.mark.parametrize("lake", ["local"], indirect=True)
@pytest.mark.parametrize(("schema_type", "definition", "message"), BAD_DEFINITIONS)
def test_bad_definitions_are_refused_and_change_nothing(
    engine: Engine, schema_type: str, definition: str, message: str
) -> None:
    before = catalog_version(engine)
    with pytest.raises(errors.InvalidArgument, match=message):
        engine.schemas.create(SCHEMA, schema_type, definition)
    with pytest.raises(errors.InvalidArgument, match=message):
        engine.schemas.validate_definition(schema_type, definition)
    assert catalog_version(engine) == before
    with pytest.raises(errors.NotFound):
        engine.schemas.get(SCHEMA.path)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_incompatible_revisions_are_refused(engine: Engine) -> None:
    engine.schemas.create(SCHEMA, "AVRO", json.dumps(STATE_V1))
    no_default = {**STATE_V1, "fields": [*STATE_V1["fields"], {"name": "n", "type": "long"}]}
    before = catalog_version(engine)
    with pytest.raises(errors.InvalidArgument, match="not compatible"):
        engine.schemas.commit(SCHEMA, "AVRO", json.dumps(no_default))
    with pytest.raises(errors.InvalidArgument, match="schema's type"):
        engine.schemas.commit(SCHEMA, "PROTOCOL_BUFFER", PROTO)
    assert catalog_version(engine) == before

    proto = SchemaName("proj", "protos")
    engine.schemas.create(proto, "PROTOCOL_BUFFER", PROTO)
    optional_added = PROTO.replace("}\n", "  optional int64 population = 3;\n}\n")
    engine.schemas.commit(proto, "PROTOCOL_BUFFER", optional_added)
    repeated_added = PROTO.replace("}\n", "  repeated string cities = 4;\n}\n")
    with pytest.raises(errors.InvalidArgument, match="cities = 4 added: it is not optional"):
        engine.schemas.commit(proto, "PROTOCOL_BUFFER", repeated_added)
    retyped = PROTO.replace("string post_abbr = 2", "int32 post_abbr = 2")
    with pytest.raises(errors.InvalidArgument, match="post_abbr = 2 changed"):
        engine.schemas.commit(proto, "PROTOCOL_BUFFER", retyped)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_revision_limit_and_the_last_revision(engine: Engine) -> None:
    first = engine.schemas.create(SCHEMA, "PROTOCOL_BUFFER", PROTO)
    with pytest.raises(errors.FailedPrecondition, match="only revision"):
        engine.schemas.delete_revision(f"{SCHEMA.path}@{first.revision_id}")
    for _ in range(constants.MAX_SCHEMA_REVISIONS - 1):
        engine.schemas.rollback(SCHEMA, first.revision_id)
    before = catalog_version(engine)
    with pytest.raises(errors.FailedPrecondition, match="20 revisions, the limit"):
        engine.schemas.commit(SCHEMA, "PROTOCOL_BUFFER", PROTO)
    with pytest.raises(errors.FailedPrecondition, match="20 revisions, the limit"):
        engine.schemas.rollback(SCHEMA, first.revision_id)
    assert catalog_version(engine) == before
    assert len(engine.schemas.list_revisions(SCHEMA)[0]) == constants.MAX_SCHEMA_REVISIONS
    engine.schemas.delete_revision(SCHEMA.path, first.revision_id)  # the deprecated field
    engine.schemas.commit(SCHEMA, "PROTOCOL_BUFFER", PROTO)


def _schema_topic(engine: Engine, name: str, **settings: str) -> TopicName:
    topic = TopicName("proj", name)
    engine.create_topic(Topic(topic, schema_settings=SchemaSettings(SCHEMA.path, **settings)))
    return topic


def test_publish_validates_and_tags_every_message(engine: Engine) -> None:
    engine.schemas.create(SCHEMA, "AVRO", json.dumps(STATE_V1))
    topic = _schema_topic(engine, "states-binary", encoding="BINARY")
    good = avro_binary(STATE_V1, {"name": "Alabama", "post_abbr": "AL"})
    before = engine.topic_head(topic)
    with pytest.raises(errors.InvalidArgument, match=r"failed schema validation. messages\[1\]"):
        engine.publish(topic, [PublishMessage(good), PublishMessage(good + b"x")])
    with pytest.raises(errors.InvalidArgument, match="failed schema validation"):
        engine.publish(topic, [PublishMessage(b'{"name": "Alabama", "post_abbr": "AL"}')])
    assert engine.topic_head(topic) == before  # nothing of a refused request was written

    ids = engine.publish(topic, [PublishMessage(good, {"k": "v"}), PublishMessage(good)])
    assert len(ids) == 2
    revision = engine.schemas.get(SCHEMA.path).revision_id
    stored = engine_messages(engine, topic)
    assert [m.attributes for m in stored] == [
        {"k": "v", NAME_ATTRIBUTE: SCHEMA.path, ENCODING_ATTRIBUTE: "BINARY",
         REVISION_ATTRIBUTE: revision},
        {NAME_ATTRIBUTE: SCHEMA.path, ENCODING_ATTRIBUTE: "BINARY", REVISION_ATTRIBUTE: revision},
    ]  # fmt: skip
    assert stored[1].size == len(good) + sum(
        len(k) + len(v) for k, v in stored[1].attributes.items()
    )


def _sizes_count_attributes(engine: Engine, topic: TopicName) -> None:
    for m in engine_messages(engine, topic):
        assert m.size == len(m.data) + sum(len(k) + len(v) for k, v in m.attributes.items())


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_each_binary_message_is_one_whole_record(engine: Engine) -> None:
    """A request's binary messages are read from one stream, one after the other: each
    record must end exactly where its message ends, whatever its neighbours hold."""
    engine.schemas.create(SCHEMA, "AVRO", json.dumps(STATE_V1))
    topic = _schema_topic(engine, "states-stream", encoding="BINARY")
    good = avro_binary(STATE_V1, {"name": "Alabama", "post_abbr": "AL"})
    refused = [
        # A truncated record would read on into the next message.
        ([good, good[:-1], good], 1, "the record needs 1 bytes more than the message has"),
        # Two halves that make one record together are two invalid messages.
        ([good[:5], good[5:]], 0, "bytes more than the message has"),
        ([b"", good], 0, "bytes more than the message has"),
        ([good + b"\x00", good], 0, "1 bytes left after the Avro record"),
        ([good, good, good[:-1]], 2, "not a valid BINARY Avro message"),
    ]
    before = engine.topic_head(topic)
    for messages, index, reason in refused:
        with pytest.raises(errors.InvalidArgument, match=rf"messages\[{index}\]: .*{reason}"):
            # (an attribute each: a message may have empty data only with one)
            engine.publish(topic, [PublishMessage(m, {"k": "v"}) for m in messages])
    assert engine.topic_head(topic) == before  # nothing of a refused request was written
    assert len(engine.publish(topic, [PublishMessage(good)] * 250)) == 250
    stored = engine_messages(engine, topic)
    assert [m.data for m in stored] == [good] * 250
    _sizes_count_attributes(engine, topic)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_json_avro_requests_name_the_first_invalid_message(engine: Engine) -> None:
    engine.schemas.create(SCHEMA, "AVRO", json.dumps(STATE_V1))
    topic = _schema_topic(engine, "states-json", encoding="JSON")
    good = b'{"name": "Alabama", "post_abbr": "AL"}'
    refused = [
        [good, b'{"name": "Alaska"}', good],
        [good, good, b'{"name": "Alaska", "post_abbr": 7}'],
        [good, good, good, b'{"name": "A", "post_abbr": "AL"} {}'],
        [good, b"not json"],
    ]
    before = engine.topic_head(topic)
    for messages in refused:
        index = len(messages) - 1 if messages[-1] != good else 1
        with pytest.raises(errors.InvalidArgument, match=rf"messages\[{index}\]"):
            engine.publish(topic, [PublishMessage(m) for m in messages])
    assert engine.topic_head(topic) == before
    assert len(engine.publish(topic, [PublishMessage(good)] * 3)) == 3
    _sizes_count_attributes(engine, topic)


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_json_messages_of_one_request_under_different_revisions(engine: Engine) -> None:
    first = engine.schemas.create(SCHEMA, "AVRO", json.dumps(STATE_V1))
    second = engine.schemas.commit(SCHEMA, "AVRO", json.dumps(STATE_V2))
    topic = _schema_topic(engine, "states-json-revisions", encoding="JSON")
    v2 = b'{"name": "Alaska", "post_abbr": "AK", "population": 733000}'
    v1_only = b'{"name": "Alabama", "post_abbr": "AL", "population": "many"}'
    engine.publish(topic, [PublishMessage(v2), PublishMessage(v1_only), PublishMessage(v2)])
    revisions = [m.attributes[REVISION_ATTRIBUTE] for m in engine_messages(engine, topic)]
    assert revisions == [second.revision_id, first.revision_id, second.revision_id]
    _sizes_count_attributes(engine, topic)


RICH = {
    "type": "record", "name": "Rich", "namespace": "demo", "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "counts", "type": {"type": "map", "values": "int"}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "also", "type": ["null", "Kind", "string"]},
        {"name": "items", "type": {"type": "array", "items": {
            "type": "record", "name": "Item", "fields": [
                {"name": "sku", "type": "string"}, {"name": "price", "type": "double"},
            ]}}},
        {"name": "blob", "type": "bytes"},
        {"name": "ratio", "type": "float"},
        {"name": "ok", "type": "boolean"},
    ],
}  # fmt: skip


def test_binary_verdicts_match_fastavro_message_by_message() -> None:
    """A request's messages read from one stream get the verdicts fastavro's public reader
    gives each message on its own (whole record, nothing left over), for valid messages
    and for truncated, extended and corrupted ones side by side."""
    compiled = compile_definition("AVRO", json.dumps(RICH))
    parsed = fastavro.parse_schema(RICH)
    rng = random.Random(14)
    good = []
    for i in range(20):
        record = {
            "id": rng.randint(-(2**62), 2**62), "kind": rng.choice("ABC"),
            "counts": {f"k{j}": rng.randint(-500, 500) for j in range(rng.randint(0, 4))},
            "hash": rng.randbytes(4), "also": rng.choice([None, "B", "é" * i]),
            "items": [{"sku": f"sku-{j}", "price": j / 3} for j in range(rng.randint(0, 3))],
            "blob": rng.randbytes(rng.randint(0, 30)), "ratio": 0.5, "ok": i % 2 == 0,
        }  # fmt: skip
        good.append(avro_binary(RICH, record))
    messages = list(good)
    for blob in good:
        messages += [blob[: rng.randint(0, len(blob) - 1)], blob + b"\x00", blob + blob]
        flipped = bytearray(blob)
        flipped[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        messages.append(bytes(flipped))
    messages += [b"", b"\xff" * 12, "é".encode()[:1] * 3]
    rng.shuffle(messages)

    def alone(blob: bytes) -> bool:
        stream = io.BytesIO(blob)
        try:
            fastavro.schemaless_reader(stream, parsed, None)
        except Exception:
            return False
        return stream.tell() == len(blob)

    expected = [alone(m) for m in messages]
    assert sum(expected) >= len(good) and not all(expected)
    verdicts = compiled.problems(messages, "BINARY")
    assert [v is None for v in verdicts] == expected
    assert all(compiled.problem(m, "BINARY") is None for m in good)


def engine_messages(engine: Engine, topic: TopicName) -> list:  # type: ignore[type-arg]

    table = MessagesTable(engine.lake, engine.get_topic(topic).uid)
    return from_arrow(table.read_range(0, table.head()))


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_revision_ranges_choose_the_newest_revision_that_accepts(engine: Engine) -> None:
    first = engine.schemas.create(SCHEMA, "AVRO", json.dumps(STATE_V1))
    second = engine.schemas.commit(SCHEMA, "AVRO", json.dumps(STATE_V2))
    v1 = avro_binary(STATE_V1, {"name": "Alabama", "post_abbr": "AL"})
    v2 = avro_binary(STATE_V2, {"name": "Alaska", "post_abbr": "AK", "population": 733_000})
    every = _schema_topic(engine, "states-all", encoding="BINARY")
    engine.publish(every, [PublishMessage(v2), PublishMessage(v1)])
    revisions = [m.attributes[REVISION_ATTRIBUTE] for m in engine_messages(engine, every)]
    assert revisions == [second.revision_id, first.revision_id]
    _sizes_count_attributes(engine, every)

    only_first = _schema_topic(
        engine, "states-old", encoding="BINARY", last_revision_id=first.revision_id
    )
    with pytest.raises(errors.InvalidArgument, match="failed schema validation"):
        engine.publish(only_first, [PublishMessage(v2)])
    only_second = _schema_topic(
        engine, "states-new", encoding="BINARY", first_revision_id=second.revision_id
    )
    with pytest.raises(errors.InvalidArgument, match="failed schema validation"):
        engine.publish(only_second, [PublishMessage(v1)])
    engine.publish(only_second, [PublishMessage(v2)])

    with pytest.raises(errors.InvalidArgument, match="newer than lastRevisionId"):
        _schema_topic(
            engine,
            "states-backwards",
            first_revision_id=second.revision_id,
            last_revision_id=first.revision_id,
        )
    with pytest.raises(errors.NotFound, match="revision not found"):
        _schema_topic(engine, "states-unknown", first_revision_id="deadbeef")
    with pytest.raises(errors.NotFound, match="Schema not found"):
        engine.create_topic(
            Topic(
                TopicName("proj", "nope"),
                schema_settings=SchemaSettings("projects/proj/schemas/none"),
            )
        )
    with pytest.raises(errors.FailedPrecondition, match="bounds the revision range"):
        engine.schemas.delete_revision(f"{SCHEMA.path}@{first.revision_id}")

    # Updates follow the same rules; a masked field changes alone.
    updated = engine.update_topic(
        only_first, {"schema_settings": SchemaSettings("", last_revision_id=second.revision_id)},
        ["schema_settings.last_revision_id"],
    )  # fmt: skip
    assert updated.schema_settings == SchemaSettings(SCHEMA.path, "BINARY", "", second.revision_id)
    engine.publish(only_first, [PublishMessage(v2)])
    cleared = engine.update_topic(only_first, {"schema_settings": None}, ["schema_settings"])
    assert cleared.schema_settings is None
    engine.publish(only_first, [PublishMessage(b"anything at all")])


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_deleting_a_schema_in_use(engine: Engine) -> None:
    engine.schemas.create(SCHEMA, "PROTOCOL_BUFFER", PROTO)
    topic = _schema_topic(engine, "states-proto", encoding="JSON")
    engine.publish(topic, [PublishMessage(b'{"name": "Alabama", "postAbbr": "AL"}')])
    with pytest.raises(errors.InvalidArgument, match="failed schema validation"):
        engine.publish(topic, [PublishMessage(b'{"name": "Alabama", "capital": "Montgomery"}')])
    engine.schemas.delete(SCHEMA)
    settings = engine.get_topic(topic).schema_settings
    assert settings is not None and settings.schema == DELETED_SCHEMA
    head = engine.topic_head(topic)
    with pytest.raises(errors.FailedPrecondition, match="was deleted"):
        engine.publish(topic, [PublishMessage(b'{"name": "Alabama", "postAbbr": "AL"}')])
    assert engine.topic_head(topic) == head
    # A schema created again under the name is another schema: the topic stays detached.
    engine.schemas.create(SCHEMA, "PROTOCOL_BUFFER", PROTO)
    settings = engine.get_topic(topic).schema_settings
    assert settings is not None and settings.deleted


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_validate_message(engine: Engine) -> None:
    engine.schemas.create(SCHEMA, "PROTOCOL_BUFFER", PROTO)
    engine.schemas.validate_message(name=SCHEMA.path, data=b'{"name": "Alabama"}', encoding="JSON")
    with pytest.raises(errors.InvalidArgument, match="failed schema validation"):
        engine.schemas.validate_message(name=SCHEMA.path, data=b"\xff\xff", encoding="BINARY")
    engine.schemas.validate_message(
        schema_type="AVRO",
        definition=json.dumps(STATE_V1),
        data=b'{"name": "Alabama", "post_abbr": "AL"}',
        encoding="JSON",
    )
    with pytest.raises(errors.InvalidArgument, match="failed schema validation"):
        engine.schemas.validate_message(
            schema_type="AVRO", definition=json.dumps(STATE_V1), data=b"{}", encoding="JSON"
        )
