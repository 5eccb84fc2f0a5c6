"""Deliveries in protobuf's wire format (api/grpc/encode.py), judged by the protobuf
classes google-cloud-pubsub ships: what they parse equals what they build."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.pubsub_v1.types import pubsub as ps

from api import convert
from api.grpc import encode
from lakepubsub.messages import Message, ReceivedMessage, TruncationEvent

PullResponse: Any = ps.PullResponse.pb()
StreamingPullResponse: Any = ps.StreamingPullResponse.pb()


def built(received: list[ReceivedMessage], *, attempts: bool, response: Any) -> Any:
    """The same deliveries, filled in with protobuf's own classes."""
    out = response()
    for r in received:
        item = out.received_messages.add(ack_id=r.ack_id)
        if attempts:
            item.delivery_attempt = r.delivery_attempt
        if r.message is None:
            assert r.event is not None
            us = r.event.time_us
            item.message.message_id = convert.event_message_id(r.ack_id)
            item.message.attributes.update(r.event.attributes())
        else:
            m = r.message
            us = m.publish_time_us
            item.message.data = m.data
            item.message.message_id = m.message_id
            item.message.attributes.update(m.attributes)
            item.message.ordering_key = m.ordering_key
        item.message.publish_time.seconds = us // 1_000_000
        item.message.publish_time.nanos = us % 1_000_000 * 1000
    return out


def message(offset: int, data: bytes, *, attributes: dict[str, str] | None = None,
            key: str = "", us: int = 1_764_000_000_123_456) -> Message:  # fmt: skip
    attrs = attributes or {}
    return Message(offset, str(offset), us, data, attrs, key, len(data))


def deliveries(rng: random.Random, n: int) -> list[ReceivedMessage]:
    out = []
    for i in range(n):
        kind = rng.random()
        ack_id = f"0a1b2c3d-m{i}-{rng.randint(1, 10**12)}"
        if kind < 0.1:
            event = TruncationEvent(i, i + rng.randint(1, 99), "max_bytes", rng.randint(0, 2**52))
            out.append(ReceivedMessage(f"0a1b2c3d-e{i}-{i + 1}", rng.randint(1, 5), event=event))
            continue
        size = rng.choice([0, 1, 127, 128, 1024, 16383, 16384, 70_000])
        attributes = (
            {f"k{j}é": "v" * rng.randint(0, 300) + "☃" for j in range(rng.randint(1, 4))}
            if kind < 0.4 or size == 0
            else None
        )
        key = rng.choice(["", "", "order-ключ", "k" * 200])
        us = rng.choice([0, 999_999, 1_000_000, 1_764_000_000_000_000, rng.randint(0, 2**55)])
        msg = message(i, rng.randbytes(size), attributes=attributes, key=key, us=us)
        out.append(ReceivedMessage(ack_id, rng.randint(0, 300), msg))
    return out


@pytest.mark.parametrize("attempts", [False, True])
def test_what_protobuf_parses_is_what_it_would_build(attempts: bool) -> None:
    rng = random.Random(7)
    for n in (0, 1, 2, 50):
        received = deliveries(rng, n)
        wire = encode.received_messages(received, attempts=attempts)
        expected = built(received, attempts=attempts, response=PullResponse)
        assert PullResponse.FromString(wire) == expected
        # Fields in number order, as protobuf writes them: the same bytes (but for the
        # order of map entries, which protobuf does not fix).
        plain = [r for r in received if not (r.message and r.message.attributes) and r.message]
        expected_plain = built(plain, attempts=attempts, response=PullResponse)
        assert encode.received_messages(plain, attempts=attempts) == (
            expected_plain.SerializeToString()
        )


@pytest.mark.parametrize(("exactly_once", "ordering"), [(False, False), (True, False),
                                                        (False, True), (True, True)])  # fmt: skip
def test_a_streaming_response_carries_the_subscription_properties(
    exactly_once: bool, ordering: bool
) -> None:
    received = deliveries(random.Random(11), 20)
    properties = encode.subscription_properties(exactly_once=exactly_once, ordering=ordering)
    wire = encode.received_messages(received, attempts=True, then=properties)
    parsed = StreamingPullResponse.FromString(wire)
    expected = built(received, attempts=True, response=StreamingPullResponse)
    expected.subscription_properties.exactly_once_delivery_enabled = exactly_once
    expected.subscription_properties.message_ordering_enabled = ordering
    assert parsed == expected
    assert parsed.HasField("subscription_properties")


def test_varints_match_protobuf() -> None:
    for value in (0, 1, 127, 128, 300, 16383, 16384, 2**31, 2**63 - 1, -1):
        stamp = StreamingPullResponse()
        stamp.received_messages.add(ack_id="a").message.publish_time.seconds = value
        item = stamp.received_messages[0].SerializeToString()
        assert encode.varint(value) in item
        assert len(encode.varint(value)) == (
            10 if value < 0 else max(1, -(-value.bit_length() // 7))
        )
