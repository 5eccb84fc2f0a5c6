"""One walk through Pub/Sub's schema API with Google's clients, run over either door:
every SchemaService method, topics with schema settings, publishing conforming and
non-conforming Avro and protobuf messages in JSON and BINARY, revision ranges, and
the schema attributes of delivered messages. Over REST, Google's clients raise
``BadRequest`` for every HTTP 400 (INVALID_ARGUMENT and FAILED_PRECONDITION alike);
over gRPC those are its subclasses, so the walks expect ``BadRequest`` and check the
message."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro
import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.protobuf import descriptor_pb2, descriptor_pool, field_mask_pb2, message_factory
from google.pubsub_v1.types import Encoding, Schema, SchemaView

STATE = {
    "type": "record",
    "name": "State",
    "namespace": "demo",
    "fields": [{"name": "name", "type": "string"}, {"name": "post_abbr", "type": "string"}],
}
STATE_V2 = {
    **STATE,
    "fields": [*STATE["fields"], {"name": "population", "type": "long", "default": 0}],
}
PROTO = 'syntax = "proto3";\nmessage StateProto {\n  string name = 1;\n  string post_abbr = 2;\n}\n'


@dataclass
class Clients:
    schemas: pubsub_v1.SchemaServiceClient
    publisher: pubsub_v1.PublisherClient
    subscriber: pubsub_v1.SubscriberClient
    project: str
    tag: str

    def path(self, kind: str, name: str) -> str:
        return f"projects/{self.project}/{kind}/{name}-{self.tag}"


def avro_binary(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def state_proto_class() -> Any:
    """StateProto's message class, built from a descriptor (no generated code)."""
    file = descriptor_pb2.FileDescriptorProto(name="state_test.proto", syntax="proto3")
    message = file.message_type.add(name="StateProto")
    for number, field in enumerate(("name", "post_abbr"), start=1):
        message.field.add(
            name=field,
            number=number,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("StateProto"))


def pull_all(c: Clients, subscription: str, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        response = c.subscriber.pull(
            request={"subscription": subscription, "max_messages": 100}, timeout=30
        )
        received = list(response.received_messages)
        if received:
            c.subscriber.acknowledge(
                request={"subscription": subscription, "ack_ids": [r.ack_id for r in received]}
            )
        got += [r.message for r in received]
    return got


def walk_schema_service(c: Clients) -> None:
    """Every SchemaService method, with its answers and errors."""
    name = c.path("schemas", "states")
    created = c.schemas.create_schema(
        request={
            "parent": f"projects/{c.project}",
            "schema": Schema(name=name, type_=Schema.Type.AVRO, definition=json.dumps(STATE)),
            "schema_id": name.rsplit("/", 1)[1],
        }
    )
    assert created.name == name and created.type_ == Schema.Type.AVRO
    assert len(created.revision_id) == 8 and created.definition == json.dumps(STATE)
    with pytest.raises(exceptions.Conflict):  # AlreadyExists over gRPC, 409 over REST
        c.schemas.create_schema(
            request={
                "parent": f"projects/{c.project}",
                "schema": Schema(type_=Schema.Type.AVRO, definition=json.dumps(STATE)),
                "schema_id": name.rsplit("/", 1)[1],
            }
        )
    got = c.schemas.get_schema(request={"name": name})
    assert got.definition == json.dumps(STATE) and got.revision_id == created.revision_id
    basic = c.schemas.get_schema(request={"name": name, "view": SchemaView.BASIC})
    assert basic.name == name and basic.definition == ""
    listed = list(c.schemas.list_schemas(request={"parent": f"projects/{c.project}"}))
    assert [s.name for s in listed if s.name == name] == [name]
    assert all(s.definition == "" for s in listed)
    full = list(
        c.schemas.list_schemas(request={"parent": f"projects/{c.project}", "view": SchemaView.FULL})
    )
    assert [s.definition for s in full if s.name == name] == [json.dumps(STATE)]

    second = c.schemas.commit_schema(
        request={
            "name": name,
            "schema": Schema(type_=Schema.Type.AVRO, definition=json.dumps(STATE_V2)),
        }
    )
    assert second.revision_id != created.revision_id
    incompatible = {**STATE, "fields": [*STATE["fields"], {"name": "n", "type": "long"}]}
    with pytest.raises(exceptions.BadRequest, match="not compatible"):
        c.schemas.commit_schema(
            request={
                "name": name,
                "schema": Schema(type_=Schema.Type.AVRO, definition=json.dumps(incompatible)),
            }
        )
    rolled = c.schemas.rollback_schema(request={"name": name, "revision_id": created.revision_id})
    assert rolled.definition == json.dumps(STATE)
    revisions = list(c.schemas.list_schema_revisions(request={"name": name}))
    assert [r.revision_id for r in revisions] == [
        rolled.revision_id,
        second.revision_id,
        created.revision_id,
    ]
    one = c.schemas.get_schema(request={"name": f"{name}@{second.revision_id}"})
    assert one.definition == json.dumps(STATE_V2)
    remaining = c.schemas.delete_schema_revision(request={"name": f"{name}@{rolled.revision_id}"})
    assert remaining.revision_id == second.revision_id
    with pytest.raises(exceptions.NotFound):
        c.schemas.get_schema(request={"name": f"{name}@{rolled.revision_id}"})

    c.schemas.validate_schema(
        request={
            "parent": f"projects/{c.project}",
            "schema": Schema(type_=Schema.Type.PROTOCOL_BUFFER, definition=PROTO),
        }
    )
    with pytest.raises(exceptions.BadRequest, match="Invalid Protocol Buffer schema"):
        c.schemas.validate_schema(
            request={
                "parent": f"projects/{c.project}",
                "schema": Schema(type_=Schema.Type.PROTOCOL_BUFFER, definition="message {"),
            }
        )
    good = avro_binary(STATE_V2, {"name": "Alaska", "post_abbr": "AK", "population": 1})
    c.schemas.validate_message(
        request={
            "parent": f"projects/{c.project}",
            "name": name,
            "message": good,
            "encoding": Encoding.BINARY,
        }
    )
    with pytest.raises(exceptions.BadRequest, match="failed schema validation"):
        c.schemas.validate_message(
            request={
                "parent": f"projects/{c.project}",
                "name": name,
                "message": good[:-1],
                "encoding": Encoding.BINARY,
            }
        )
    c.schemas.validate_message(
        request={
            "parent": f"projects/{c.project}",
            "schema": Schema(type_=Schema.Type.PROTOCOL_BUFFER, definition=PROTO),
            "message": b'{"name": "Alabama", "postAbbr": "AL"}',
            "encoding": Encoding.JSON,
        }
    )
    c.schemas.delete_schema(request={"name": name})
    with pytest.raises(exceptions.NotFound):
        c.schemas.get_schema(request={"name": name})


def walk_publishing(c: Clients) -> None:
    """Avro and protobuf topics, JSON and BINARY, revision ranges, delivered attributes."""
    avro_name, proto_name = c.path("schemas", "avro"), c.path("schemas", "proto")
    parent = f"projects/{c.project}"
    first = c.schemas.create_schema(
        request={
            "parent": parent,
            "schema": Schema(type_=Schema.Type.AVRO, definition=json.dumps(STATE)),
            "schema_id": avro_name.rsplit("/", 1)[1],
        }
    )
    second = c.schemas.commit_schema(
        request={
            "name": avro_name,
            "schema": Schema(type_=Schema.Type.AVRO, definition=json.dumps(STATE_V2)),
        }
    )
    c.schemas.create_schema(
        request={
            "parent": parent,
            "schema": Schema(type_=Schema.Type.PROTOCOL_BUFFER, definition=PROTO),
            "schema_id": proto_name.rsplit("/", 1)[1],
        }
    )
    cases: list[tuple[str, str, Encoding, bytes, bytes, str]] = [
        (
            "avro-bin", avro_name, Encoding.BINARY,
            avro_binary(STATE, {"name": "Alabama", "post_abbr": "AL"}), b"\x02", first.revision_id,
        ),
        (
            "avro-json", avro_name, Encoding.JSON,
            json.dumps({"name": "Alaska", "post_abbr": "AK", "population": 7}).encode(),
            b'{"name": 5}', second.revision_id,
        ),
        (
            "proto-bin", proto_name, Encoding.BINARY,
            state_proto_class()(name="Arizona", post_abbr="AZ").SerializeToString(),
            b"\xff\xff\xff", "",
        ),
        (
            "proto-json", proto_name, Encoding.JSON,
            b'{"name": "Arkansas", "postAbbr": "AR"}', b'{"capital": "Little Rock"}', "",
        ),
    ]  # fmt: skip
    for label, schema, encoding, good, bad, revision in cases:
        topic, sub = c.path("topics", label), c.path("subscriptions", label)
        made = c.publisher.create_topic(
            request={"name": topic, "schema_settings": {"schema": schema, "encoding": encoding}}
        )
        assert made.schema_settings.schema == schema
        assert made.schema_settings.encoding == encoding
        c.subscriber.create_subscription(request={"name": sub, "topic": topic})
        with pytest.raises(exceptions.BadRequest, match="failed schema validation"):
            c.publisher.publish(topic, bad).result(timeout=60)
        c.publisher.publish(topic, good, origin="test").result(timeout=60)
        (message,) = pull_all(c, sub, 1)
        assert message.data == good
        attributes = dict(message.attributes)
        assert attributes["origin"] == "test"
        assert attributes["googclient_schemaname"] == schema
        assert attributes["googclient_schemaencoding"] == encoding.name
        expected = revision or c.schemas.get_schema(request={"name": schema}).revision_id
        assert attributes["googclient_schemarevisionid"] == expected

    # Revision ranges: a topic limited to the first revision refuses a message only
    # the second accepts, until the range is widened with an update mask.
    ranged = c.path("topics", "ranged")
    v2_message = avro_binary(STATE_V2, {"name": "Alaska", "post_abbr": "AK", "population": 1})
    c.publisher.create_topic(
        request={
            "name": ranged,
            "schema_settings": {
                "schema": avro_name,
                "encoding": Encoding.BINARY,
                "last_revision_id": first.revision_id,
            },
        }
    )
    # A v2 record's bytes decode as a v1 record with bytes left over: refused too.
    with pytest.raises(exceptions.BadRequest, match="left after the Avro record"):
        c.publisher.publish(ranged, v2_message).result(timeout=60)
    updated = c.publisher.update_topic(
        request={
            "topic": {"name": ranged, "schema_settings": {"last_revision_id": second.revision_id}},
            "update_mask": field_mask_pb2.FieldMask(paths=["schema_settings.last_revision_id"]),
        }
    )
    assert updated.schema_settings.last_revision_id == second.revision_id
    assert updated.schema_settings.schema == avro_name
    c.publisher.publish(ranged, v2_message).result(timeout=60)
    with pytest.raises(exceptions.BadRequest, match="newer than lastRevisionId"):
        c.publisher.update_topic(
            request={
                "topic": {
                    "name": ranged,
                    "schema_settings": {"first_revision_id": second.revision_id,
                                        "last_revision_id": first.revision_id},
                },
                "update_mask": field_mask_pb2.FieldMask(
                    paths=["schema_settings.first_revision_id", "schema_settings.last_revision_id"]
                ),
            }
        )  # fmt: skip

    # Deleting a schema in use: the topics show it, and publishing to them fails.
    c.schemas.delete_schema(request={"name": proto_name})
    topic = c.path("topics", "proto-json")
    assert c.publisher.get_topic(topic=topic).schema_settings.schema == "_deleted-schema_"
    with pytest.raises(exceptions.BadRequest, match="was deleted"):
        c.publisher.publish(topic, b'{"name": "Arkansas"}').result(timeout=60)


def run_walks(make: Callable[[], Clients]) -> None:
    clients = make()
    walk_schema_service(clients)
    walk_publishing(clients)
