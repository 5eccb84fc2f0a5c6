"""A Publish request read by ``api/grpc/publish_request.py``: a request of its topic,
data and ordering keys alone skips attributes and the unknown-field check; any other
request is read the general way, with the same answers as ``door.parse``."""

from __future__ import annotations

from typing import Any

import pytest
from google.pubsub_v1.types import pubsub as ps

from api.grpc import publish_request
from api.grpc.door import parse
from api.grpc.publish_request import PUBLISH_REQUEST, plain_size, read
from lakepubsub import errors

PubsubMessage: Any = ps.PubsubMessage.pb()
Request: Any = PUBLISH_REQUEST
TOPIC = "projects/p/topics/t"
# A varint field numbered 999, which no Pub/Sub message has.
UNKNOWN_FIELD = b"\xb8\x3e\x01"


def general(raw: bytes) -> tuple[str, list[bytes], list[Any], list[str | None]]:
    """The request as ``door.parse`` and each message's fields read it."""
    request: Any = parse(PUBLISH_REQUEST, raw)
    messages = list(request.messages)
    return (
        request.topic,
        [m.data for m in messages],
        [sorted(m.attributes.items()) or None for m in messages],
        [m.ordering_key or None for m in messages],
    )


def as_tuple(raw: bytes) -> tuple[str, list[bytes], list[Any], list[str | None]]:
    body = read(raw)
    attributes = [sorted(a) if a else None for a in body.attributes]
    return body.topic, body.data, attributes, body.ordering_keys


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the reader ran the unknown-field check."""
    calls: list[int] = []
    check = publish_request.check_known

    def counted(request: Any, raw: bytes) -> None:
        calls.append(1)
        check(request, raw)

    monkeypatch.setattr(publish_request, "check_known", counted)
    return calls


@pytest.mark.parametrize(
    "sizes", [[0], [1], [127], [128], [16_383], [16_384], [2_097_152], [1, 1024, 5]]
)
@pytest.mark.parametrize("key", ["", "k", "ключ-" * 30])
@pytest.mark.parametrize("topic", [TOPIC, ""])
def test_plain_size_is_protobufs_size(sizes: list[int], key: str, topic: str) -> None:
    data = [bytes([7]) * n for n in sizes]
    messages = [PubsubMessage(data=blob, ordering_key=key) for blob in data]
    raw = Request(topic=topic, messages=messages).SerializeToString()
    assert plain_size(topic, data, [key] * len(data)) == len(raw)


def test_a_plain_request_skips_the_check_and_reads_the_same(checks: list[int]) -> None:
    messages = [
        PubsubMessage(data=b"x" * i, ordering_key="k" if i % 2 else "") for i in range(1, 200)
    ]
    raw = Request(topic=TOPIC, messages=messages).SerializeToString()
    assert as_tuple(raw) == general(raw)
    assert checks == []
    assert read(raw).attributes == [None] * 199


@pytest.mark.parametrize(
    "message",
    [
        {"data": b"a", "attributes": {"k": "v", "k2": "v2"}},
        {"attributes": {"only": "attributes"}},
        {"data": b"a", "message_id": "set by a client"},
        {"data": b"a", "publish_time": {"seconds": 5}},
    ],
)
def test_any_other_field_takes_the_general_way(checks: list[int], message: dict[str, Any]) -> None:
    messages = [PubsubMessage(data=b"plain"), PubsubMessage(**message)]
    raw = Request(topic=TOPIC, messages=messages).SerializeToString()
    assert as_tuple(raw) == general(raw)
    assert checks == [1]


def test_a_longer_encoding_of_the_same_fields_takes_the_general_way(checks: list[int]) -> None:
    # An empty ordering key written out (field 5, length 0): a valid encoding that
    # protobuf itself would leave out, two bytes longer than the plain size.
    item = PubsubMessage(data=b"abc").SerializeToString() + b"\x2a\x00"
    raw = Request(topic=TOPIC).SerializeToString() + b"\x12" + bytes([len(item)]) + item
    assert as_tuple(raw) == (TOPIC, [b"abc"], [None], [None])
    assert checks == [1]


@pytest.mark.parametrize("where", ["request", "message"])
def test_an_unknown_field_is_named(where: str) -> None:
    item = PubsubMessage(data=b"abc").SerializeToString()
    if where == "message":
        item += UNKNOWN_FIELD
    raw = Request(topic=TOPIC).SerializeToString() + b"\x12" + bytes([len(item)]) + item
    if where == "request":
        raw += UNKNOWN_FIELD
    with pytest.raises(errors.InvalidArgument) as failure:
        read(raw)
    holder = (
        "PubsubMessage at 'PublishRequest.messages[0]'" if where == "message" else "PublishRequest"
    )
    assert f"unknown field number 999 in google.pubsub.v1.{holder}" in str(failure.value)


def test_a_malformed_request_is_invalid() -> None:
    with pytest.raises(errors.InvalidArgument, match="malformed PublishRequest"):
        read(b"\x12\x05ab")
