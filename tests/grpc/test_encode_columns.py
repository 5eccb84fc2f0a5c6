"""Deliveries written from the messages table's columns (api/grpc/encode_columns.py):
the same bytes as one delivery at a time (api/grpc/encode.py, itself judged by
protobuf in test_encode.py), and responses cut as StreamingPull sends them."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from google.pubsub_v1.types import pubsub as ps

from api.grpc import encode, encode_columns
from lakepubsub import Engine, Subscription, Topic
from lakepubsub._lake import table_schemas
from lakepubsub.messages import Message, PublishMessage, Received, ReceivedMessage, Run
from lakepubsub.resources.names import SubscriptionName, TopicName

StreamingPullResponse: Any = ps.StreamingPullResponse.pb()


def stored(rng: random.Random, n: int, first: int = 100) -> pa.Table:
    """Rows of the messages table as a publish stores them, with every kind of field:
    null and empty data and attributes, data past one- and two-byte lengths, unicode
    keys and values, ordering keys, equal and different publish times."""
    columns: dict[str, list[Any]] = {name: [] for name in table_schemas.MESSAGES.names}
    us = 1_764_000_000_123_456
    for i in range(n):
        if rng.random() < 0.2:
            us = rng.choice([0, 999_999, 1_000_000, us + rng.randint(1, 10**6)])
        lengths = [1, 127, 128, 1024, 16_384, 70_000]
        data = rng.choice([None, b"", *(rng.randbytes(n) for n in lengths)])
        attributes = rng.choice([None, [], [("k", "v")], [("ключ", ""), ("a" * 130, "☃" * 6000)]])
        key = rng.choice([None, "", "order-ключ", "k" * 200])
        size = len(data or b"") + sum(
            len(k.encode()) + len(v.encode()) for k, v in attributes or []
        )
        for name, value in zip(
            table_schemas.MESSAGES.names,
            (first + i, f"id-{first + i}", us, data, attributes, key, size),
            strict=True,
        ):
            columns[name].append(value)
    return pa.table(columns, schema=table_schemas.MESSAGES)


def run_of(table: pa.Table) -> Run:
    offsets = table.column("offset").to_pylist()
    return Run(table, [f"0a1b2c3d-m{o}-{o * 3 + 1}" for o in offsets])


@pytest.mark.parametrize("attempts", [False, True])
def test_a_run_is_written_as_one_delivery_at_a_time_would_be(attempts: bool) -> None:
    rng = random.Random(5)
    table = stored(rng, 300)
    # whole, sliced (the columns start inside their buffers), and in several chunks
    chunked = pa.concat_tables([table.slice(0, 7), table.slice(7, 200), table.slice(207)])
    for part in (table, table.slice(1, 1), table.slice(13, 250), chunked):
        run = run_of(part)
        one_at_a_time = encode.received_messages(run.received(), attempts=attempts)
        assert encode_columns.run_messages(run, attempts=attempts) == one_at_a_time
    plain = pa.table(
        {
            "offset": list(range(600)),
            "message_id": [str(10**6 + i) for i in range(600)],
            "publish_time": [1_764_000_000_000_000] * 600,
            "data": [b"x" * 1024] * 600,
            "attributes": [None] * 600,
            "ordering_key": [None] * 600,
            "size": [1024] * 600,
        },
        schema=table_schemas.MESSAGES,
    )
    run = run_of(plain)
    assert encode_columns.run_messages(run, attempts=attempts) == encode.received_messages(
        run.received(), attempts=attempts
    )


def parsed(responses: list[tuple[int, bytes]]) -> list[Any]:
    return [StreamingPullResponse.FromString(r) for _, r in responses]


def test_responses_cut_runs_and_single_deliveries_in_order() -> None:
    rng = random.Random(9)
    rows = stored(rng, 1500, first=1000)
    # encoded whole, then cut: in chunks as the dispatcher's runs come, cut across them
    long_run = run_of(pa.concat_tables([rows.slice(0, 600), rows.slice(600, 0), rows.slice(600)]))
    assert long_run.table.column("data").num_chunks == 3
    short_run = run_of(stored(rng, 30, first=5000))  # one delivery at a time
    again = run_of(stored(rng, 5, first=10)).received()
    received = Received([again, long_run, short_run])
    properties = encode.subscription_properties(exactly_once=False, ordering=True)
    cut = list(encode_columns.responses(received, limit=1000, attempts=True, then=properties))
    assert [sent for sent, _ in cut] == [1000, 1535]
    answers = parsed(cut)
    assert all(a.subscription_properties.message_ordering_enabled for a in answers)
    got = [m for a in answers for m in a.received_messages]
    expected = StreamingPullResponse.FromString(
        encode.received_messages(list(received), attempts=True)
    ).received_messages
    assert got == list(expected)
    assert [m.ack_id for m in got] == received.ack_ids()
    # a plain list goes as before, cut the same way
    listed = list(encode_columns.responses(again, limit=2, attempts=False, then=b""))
    assert [sent for sent, _ in listed] == [2, 4, 5]


def message(offset: int) -> ReceivedMessage:
    m = Message(offset, str(offset), 1, b"abc", {}, "", 3)
    return ReceivedMessage(f"0a1b2c3d-m{offset}-{offset}", 2, m)


def test_received_reads_as_the_sequence_it_holds() -> None:
    rng = random.Random(3)
    run = run_of(stored(rng, 40, first=50))
    head = [message(1), message(2)]
    received = Received([head, run, [message(99)]])
    flat = [*head, *run.received(), message(99)]
    assert len(received) == 43
    assert received.ack_ids() == [r.ack_id for r in flat]
    assert received.size() == sum(r.message.size for r in flat if r.message)
    for start, stop in ((0, 43), (1, 5), (2, 42), (41, 43), (10, 10), (-3, None)):
        part = received[start:stop]
        assert isinstance(part, Received)
        assert list(part) == flat[start:stop]
        assert part.ack_ids() == [r.ack_id for r in flat[start:stop]]
    assert received[::2] == flat[::2]
    assert received[5] == flat[5] and received[-1] == flat[-1]
    with pytest.raises(IndexError):
        received[43]
    joined = received.__add__([message(7)])  # a Received, not a list
    assert received == flat and isinstance(joined, Received)
    assert joined == [*flat, message(7)]
    assert not Received() and Received([[], run_of(stored(rng, 0))]) == []


def test_a_pull_of_new_messages_hands_out_a_run(engine: Engine) -> None:
    topic = TopicName("p", "runs")
    sub = SubscriptionName("p", "runs-sub")
    engine.create_topic(Topic(topic))
    engine.create_subscription(Subscription(sub, topic))
    published = [PublishMessage(f"m{i}".encode(), {"i": str(i)}) for i in range(20)]
    engine.publish(topic, published)
    received = engine.pull_future(sub, max_messages=50).result()
    assert isinstance(received, Received)
    assert [type(p) for p in received.parts] == [Run]
    assert [r.message.data for r in received if r.message] == [m.data for m in published]
    assert [r.delivery_attempt for r in received] == [1] * 20
    engine.acknowledge(sub, received.ack_ids())
    assert engine.pull(sub, max_messages=50, return_immediately=True) == []
