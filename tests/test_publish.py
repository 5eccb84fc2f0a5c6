"""Publish: ids in order, dense offsets, limits, group commit."""

from __future__ import annotations

import threading

import pyarrow.compute as pc
import pytest

from lakepubsub import Engine, PublishMessage, Topic, TopicName, errors
from lakepubsub.publish.messages_table import MessagesTable

TOPIC = TopicName("proj", "events")


@pytest.fixture
def topic(engine: Engine) -> TopicName:
    engine.create_topic(Topic(TOPIC))
    return TOPIC


def stored(engine: Engine, topic: TopicName):  # type: ignore[no-untyped-def]
    table = MessagesTable(engine.lake, engine.get_topic(topic).uid)
    return table.read_range(0, table.head())


def test_ids_are_returned_in_order_with_dense_offsets(engine: Engine, topic: TopicName) -> None:
    first = engine.publish(topic, [PublishMessage(b"a"), PublishMessage(b"b", {"k": "v"})])
    second = engine.publish(topic, [PublishMessage(attributes={"only": "attrs"})])
    assert first == ["0", "1"]
    assert second == ["2"]
    rows = stored(engine, topic)
    assert rows["offset"].to_pylist() == [0, 1, 2]
    assert rows["data"].to_pylist() == [b"a", b"b", b""]
    assert rows["attributes"].to_pylist()[1] == [("k", "v")]
    assert rows["size"].to_pylist() == [1, 3, 9]
    times = rows["publish_time"]
    assert pc.min(times).as_py() is not None


def test_ordering_key_is_stored(engine: Engine, topic: TopicName) -> None:
    engine.publish(topic, [PublishMessage(b"x", ordering_key="user-1")])
    assert stored(engine, topic)["ordering_key"].to_pylist() == ["user-1"]


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([], "no messages"),
        ([PublishMessage(b"x")] * 1001, "1001 messages"),
        ([PublishMessage()], "non-empty data or an attribute"),
        ([PublishMessage(b"x", {f"k{i}": "v" for i in range(101)})], "101 attributes"),
        ([PublishMessage(b"x", {"k" * 257: "v"})], "attribute key of 257 bytes"),
        ([PublishMessage(b"x", {"k": "v" * 1025})], "1025 bytes"),
        ([PublishMessage(b"x" * 5_000_000), PublishMessage(b"x" * 5_000_001)], "the limit is"),
        ([PublishMessage(b"x", {"googkey": "v"})], "reserved"),
    ],
)
def test_limits_are_enforced_and_change_nothing(
    engine: Engine, topic: TopicName, messages: list[PublishMessage], fragment: str
) -> None:
    with pytest.raises(errors.InvalidArgument, match=fragment):
        engine.publish(topic, messages)
    assert stored(engine, topic).num_rows == 0


def test_publish_to_missing_topic(engine: Engine) -> None:
    with pytest.raises(errors.NotFound):
        engine.publish(TopicName("proj", "missing"), [PublishMessage(b"x")])


def test_concurrent_publishes_are_group_committed(engine: Engine, topic: TopicName) -> None:
    table = MessagesTable(engine.lake, engine.get_topic(topic).uid)
    before = table.version
    results: dict[int, list[str]] = {}

    def publish(i: int) -> None:
        results[i] = engine.publish(topic, [PublishMessage(f"{i}-{j}".encode()) for j in range(50)])

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table.refresh()
    commits = table.version - before
    assert commits < 16, "concurrent requests should share commits"
    rows = stored(engine, topic)
    assert rows.num_rows == 800
    assert rows["offset"].to_pylist() == list(range(800))
    data = rows["data"].to_pylist()
    for i, ids in results.items():
        # each request's messages are contiguous and in request order
        offsets = [int(x) for x in ids]
        assert offsets == list(range(offsets[0], offsets[0] + 50))
        assert [data[o] for o in offsets] == [f"{i}-{j}".encode() for j in range(50)]
