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


def plain(first: int, sizes: list[tuple[int, int]], times: list[int]) -> pa.Table:
    """Rows without attributes or ordering keys, as most publishers store them:
    ``count`` messages of ``size`` bytes for each pair of ``sizes``, publish times
    taken in turn from ``times``, 300 rows each."""
    lengths = [size for size, count in sizes for _ in range(count)]
    n = len(lengths)
    return pa.table(
        {
            "offset": list(range(first, first + n)),
            "message_id": [str(first + i) for i in range(n)],
            "publish_time": [times[i // 300 % len(times)] for i in range(n)],
            "data": [bytes([i % 251]) * size for i, size in enumerate(lengths)],
            "attributes": [None] * n,
            "ordering_key": [None] * n,
            "size": lengths,
        },
        schema=table_schemas.MESSAGES,
    )


@pytest.mark.parametrize("attempts", [False, True])
def test_runs_of_plain_rows_are_laid_out_in_stretches_with_the_same_bytes(attempts: bool) -> None:
    # Lengths change mid-run: data (one- and two-byte varints, empty), ack ids and
    # message ids (offsets and delivery ids past a power of ten), publish times (their
    # nanoseconds' varints: none, one byte, four, five).
    sizes = [(1024, 300), (5, 200), (0, 150), (200, 250), (1024, 300)]
    times = [1_764_000_000_000_000, 1_764_000_000_000_001, 1_764_000_000_999_999, 0, 7]
    table = plain(99_700, sizes, times)
    chunked = pa.concat_tables([table.slice(0, 250), table.slice(250, 0), table.slice(250)])
    for part in (table, table.slice(3, 500), chunked, table.slice(650, 100)):
        by_text = run_of(part)
        offsets = part.column("offset").to_pylist()
        numbered = Run(part, None, range(9_999_990, 9_999_990 + len(offsets)), "0a1b2c3d")
        for run in (by_text, numbered):
            one_at_a_time = encode.received_messages(run.received(), attempts=attempts)
            pieces = encode_columns.run_pieces(run, attempts=attempts)
            assert b"".join(bytes(rows) for rows, _ in pieces) == one_at_a_time
            if part is chunked:  # laid out whole, not joined chunk by chunk
                assert len(pieces) == 1
            for rows, starts in pieces:
                assert len(starts) == len(run) + 1 and starts[0] == 0 and starts[-1] == len(rows)
            cut = list(encode_columns.responses(Received([run]), limit=97, attempts=attempts))
            messages = [m for a in parsed(cut) for m in a.received_messages]
            assert [m.ack_id for m in messages] == run.ack_ids
            assert [m.message.data for m in messages] == part.column("data").to_pylist()
    # Rows that change layout on nearly every row are joined as before.
    ragged = plain(5, [(size, 1) for size in range(1, 300)], times)
    run = run_of(pa.concat_tables([ragged.slice(0, 100), ragged.slice(100)]))
    pieces = encode_columns.run_pieces(run, attempts=attempts)
    assert len(pieces) == 2
    one_at_a_time = encode.received_messages(run.received(), attempts=attempts)
    assert b"".join(bytes(rows) for rows, _ in pieces) == one_at_a_time


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
