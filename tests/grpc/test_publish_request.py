"""A Publish request read by ``api/grpc/publish_request.py``: a request of its topic
and messages of data alone is walked by hand, one of its topic, data and ordering
keys alone skips attributes and the unknown-field check; any other request is read
the general way, each with the same answers as ``door.parse``. And the answer's
bytes are protobuf's."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.pubsub_v1.types import pubsub as ps

from api.grpc import publish_request
from api.grpc.door import parse
from api.grpc.publish_request import PUBLISH_REQUEST, plain_size, read
from lakepubsub import errors
from lakepubsub.publish import batches

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
    columns = body.batch().columns
    attributes = [sorted(a) if a else None for a in columns.column("attributes").to_pylist()]
    data, keys = columns.column("data").to_pylist(), columns.column("ordering_key").to_pylist()
    return body.topic, data, attributes, keys


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
    assert read(raw).batch().columns.column("attributes").null_count == 199


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


def request(*messages: Any, topic: str = TOPIC) -> bytes:
    return bytes(Request(topic=topic, messages=list(messages)).SerializeToString())


@pytest.mark.parametrize(
    "sizes",
    [[1], [127], [128], [16_383], [16_384], [2_097_152], [1024] * 100, [5, 1024, 5, 20_000]],
)
@pytest.mark.parametrize("topic", [TOPIC, "projects/p/topics/" + "t" * 200])
def test_messages_of_data_alone_are_walked_and_read_the_same(
    checks: list[int], sizes: list[int], topic: str
) -> None:
    raw = request(
        *(PubsubMessage(data=bytes([i % 251]) * n) for i, n in enumerate(sizes)), topic=topic
    )
    walked = publish_request.data_only(raw)
    assert walked is not None
    assert walked[0] == topic
    assert isinstance(walked[1], range) == (len(set(sizes)) == 1)
    assert read(raw).slices is not None
    assert as_tuple(raw) == general(raw)
    assert checks == []


@pytest.mark.parametrize(
    "raw",
    [
        # another field in a message, or a message without data
        request(PubsubMessage(data=b"a"), PubsubMessage(data=b"b", ordering_key="k")),
        request(PubsubMessage(data=b"a"), PubsubMessage(data=b"b", attributes={"k": "v"})),
        request(PubsubMessage(data=b"a"), PubsubMessage(attributes={"k": "v"})),
        request(PubsubMessage(data=b"a"), PubsubMessage(data=b"b", message_id="m")),
        # a message's data written out though empty, or a message written empty
        request() + b"\x12\x03\x0a\x01a" + b"\x12\x02\x0a\x00",
        request() + b"\x12\x03\x0a\x01a" + b"\x12\x00",
        # an unknown field after the messages, or in one
        request(PubsubMessage(data=b"a")) + UNKNOWN_FIELD,
        request() + b"\x12\x06\x0a\x01a" + UNKNOWN_FIELD,
        # the topic twice, or none, or not valid UTF-8
        request(PubsubMessage(data=b"a")) + b"\x0a\x01t",
        request(PubsubMessage(data=b"a"), topic=""),
        b"\x0a\x02\xff\xfe" + request(PubsubMessage(data=b"a"), topic=""),
        # no messages
        request(),
    ],
)
def test_any_other_shape_is_not_walked_and_reads_as_protobuf_does(raw: bytes) -> None:
    assert publish_request.data_only(raw) is None
    try:
        _, data, attributes, keys = general(raw)
        expected: Any = batches.checked(data, attributes, keys).columns
    except errors.InvalidArgument as exc:
        with pytest.raises(errors.InvalidArgument) as failure:
            read(raw).batch()
        assert str(failure.value) == str(exc)
        return
    assert read(raw).batch().columns.equals(expected)


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 1029, 1031, 2059, 3089])
def test_a_cut_request_is_not_walked_and_is_malformed(cut: int) -> None:
    """Cut anywhere, alike messages included: the walk declines, protobuf refuses."""
    raw = request(*(PubsubMessage(data=b"x" * 1024) for _ in range(3)))
    assert publish_request.data_only(raw[:-cut]) is None
    with pytest.raises(errors.InvalidArgument, match="malformed PublishRequest"):
        read(raw[:-cut])


def test_alike_messages_but_one_header_are_walked_one_by_one() -> None:
    # The last message's data length is written in two bytes (a valid, longer
    # varint): the messages are not alike, so no range, and still read right.
    one = b"\x12\x06\x0a\x04abcd"
    alike = request() + one * 3
    walked = publish_request.data_only(alike)
    assert walked is not None and isinstance(walked[1], range)
    odd = request() + one * 2 + b"\x12\x07\x0a\x84\x00abcd"
    walked = publish_request.data_only(odd)
    assert walked is not None and not isinstance(walked[1], range)
    assert as_tuple(odd) == general(odd) == (TOPIC, [b"abcd"] * 3, [None] * 3, [None] * 3)


@pytest.mark.parametrize(
    "ids",
    [
        ["1"],
        [str(n) for n in range(95, 105)],
        [str(n) for n in range(10**6, 10**6 + 1000)],
        ["id-" + "x" * 200, "short"],
        ["é", "ab"],
        ["ключ" * 40],
    ],
)
def test_the_answer_is_protobufs_encoding(ids: list[str]) -> None:
    expected = ps.PublishResponse.pb()(message_ids=ids).SerializeToString()
    assert publish_request.answer(ids) == expected


def outcome(read_it: Any) -> Any:
    try:
        return read_it()
    except errors.InvalidArgument as exc:
        return ("refused", str(exc))


def test_random_requests_and_their_corruptions_read_as_protobuf_reads_them() -> None:
    """Requests of random shapes, each also with a byte changed and cut short: read
    here and by protobuf with the batch's checks, the same columns or the same error."""
    rng = random.Random(28)

    def message() -> Any:
        fields: dict[str, Any] = {"data": rng.randbytes(rng.choice([0, 1, 3, 200, 1024, 17_000]))}
        if rng.random() < 0.1:
            fields["ordering_key"] = rng.choice(["k", "ключ"])
        if rng.random() < 0.05:
            fields["attributes"] = {"a": "b"}
        return PubsubMessage(**fields)

    def protobuf_way(raw: bytes) -> Any:
        topic, data, attributes, keys = general(raw)
        return topic, batches.checked(data, attributes, keys).columns

    for _ in range(300):
        alike = rng.random() < 0.5
        first = message()
        raw = request(*(first if alike else message() for _ in range(rng.randint(1, 40))))
        variants = [raw, raw[: rng.randrange(1, len(raw))]]
        changed = bytearray(raw)
        changed[rng.randrange(len(raw))] = rng.randrange(256)
        variants.append(bytes(changed))
        for variant in variants:
            ours = outcome(lambda v=variant: (read(v).topic, read(v).batch().columns))
            theirs = outcome(lambda v=variant: protobuf_way(v))
            if isinstance(theirs, tuple) and theirs[0] == "refused":
                assert ours == theirs
            else:
                assert ours[0] == theirs[0] and ours[1].equals(theirs[1])
