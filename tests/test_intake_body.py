"""One intake commit's rows built together (``lakepubsub/publish/intake_body.py``):
each topic's rows numbered from its head, sharing one table's buffers; a request
whose values do not make Arrow columns fails alone; publishes reach the intake
without a thread per topic (real tables, real threads)."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pyarrow as pa
import pytest
from support import LakeSpec

from lakepubsub import Engine, errors
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.batches import Batch, checked, combined
from lakepubsub.publish.intake_body import Body
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic


def _buffer_span(column: pa.ChunkedArray) -> tuple[int, int]:
    """Where the values buffer of a binary column's one chunk lies in memory."""
    (chunk,) = column.chunks
    values = chunk.buffers()[2]
    return values.address, values.address + values.size


def test_each_topic_is_numbered_from_its_head_in_one_table() -> None:
    a1 = checked([b"a1", b"a2"], [None, [("k", "v")]], [None, "key"])
    b1 = checked([b"b1"], [None], [None])
    # A group another process forwarded arrives as columns, not lists.
    c1 = Batch(combined([checked([b"c1", b"c2"], [None, None], ["o", None])]), 4)
    a2 = checked([b"a3"], [None], [None])
    # A topic's batches come apart in the queue; its rows come out next to each other.
    body = Body([("A", a1), ("B", b1), ("A", a2), ("C", c1)])
    assert body.spans == {"A": (0, 3), "B": (3, 1), "C": (4, 2)}

    rows = body.numbered({"A": 10, "B": 0, "C": 7}, 1_234)
    assert rows.column("topic_uid").to_pylist() == ["A", "A", "A", "B", "C", "C"]
    assert rows.column("offset").to_pylist() == [10, 11, 12, 0, 7, 8]
    assert rows.column("message_id").to_pylist() == ["10", "11", "12", "0", "7", "8"]
    assert rows.column("data").to_pylist() == [b"a1", b"a2", b"a3", b"b1", b"c1", b"c2"]
    assert rows.column("ordering_key").to_pylist() == [None, "key", None, None, "o", None]
    assert rows.column("attributes").to_pylist()[1] == [("k", "v")]
    assert set(rows.column("publish_time").cast(pa.int64()).to_pylist()) == {1_234}

    topics = body.by_topic(rows)
    assert topics["A"].column("data").to_pylist() == [b"a1", b"a2", b"a3"]
    assert topics["C"].column("offset").to_pylist() == [7, 8]
    assert "topic_uid" not in topics["B"].column_names
    # A topic's rows are a view of the commit's table, not a copy of their own.
    lo, hi = _buffer_span(rows.column("data"))
    c_lo, c_hi = _buffer_span(topics["C"].column("data"))
    assert lo <= c_lo and c_hi <= hi

    # A lost race renumbers from the new heads, with the same rows.
    again = body.numbered({"A": 20, "B": 5, "C": 7}, 1_300)
    assert again.column("offset").to_pylist() == [20, 21, 22, 5, 7, 8]


def test_a_request_that_makes_no_columns_fails_alone(local_lake: LakeSpec) -> None:
    """Three topics publish into one intake commit; one request carries an attribute
    value Arrow cannot store (only a caller past ``checked`` could send it). It
    fails with InvalidArgument; the others land and are delivered."""
    settings = local_lake.settings(intake=True, flush_ms=400.0, intake_move_s=3600.0)
    with Engine(settings) as engine:
        uids = []
        for i in range(3):
            topic = TopicName("body", f"topic-{i}")
            engine.create_topic(Topic(topic))
            engine.create_subscription(Subscription(SubscriptionName("body", f"sub-{i}"), topic))
            uids.append(engine.resources.topic_entry(topic).uid)
        engine.publish(TopicName("body", "topic-0"), [PublishMessage(b"first")])  # opens the window
        bad = Batch(None, 1, ([b"x"], [[("k", 5)]], [None], [1]))  # type: ignore[list-item]
        futures: list[Future[list[str]]] = [
            engine.publishers.submit(uids[0], checked([b"zero"], [None], [None])),
            engine.publishers.submit(uids[1], bad),
            engine.publishers.submit(uids[2], checked([b"two"], [None], [None])),
        ]
        assert futures[0].result(timeout=30) == ["1"]
        with pytest.raises(errors.InvalidArgument):
            futures[1].result(timeout=30)
        assert futures[2].result(timeout=30) == ["0"]
        for i, want in ((0, [b"first", b"zero"]), (2, [b"two"])):
            sub = SubscriptionName("body", f"sub-{i}")
            got = [r.message.data for r in engine.pull(sub, max_messages=10) if r.message]
            while len(got) < len(want):
                got += [r.message.data for r in engine.pull(sub, max_messages=10) if r.message]
            assert sorted(got) == sorted(want)
        # The failed request took no offset: the topic's next message is its first.
        assert engine.publish(TopicName("body", "topic-1"), [PublishMessage(b"one")]) == ["0"]


def test_publishes_reach_the_intake_without_a_thread_per_topic(local_lake: LakeSpec) -> None:
    settings = local_lake.settings(intake=True, flush_ms=20.0, intake_move_s=3600.0)
    with Engine(settings) as engine:
        topics = [TopicName("body", f"queue-{i}") for i in range(5)]
        for topic in topics:
            engine.create_topic(Topic(topic))

        def publish(topic: TopicName) -> list[str]:
            ids: list[str] = []
            for n in range(20):
                ids += engine.publish(topic, [PublishMessage(f"{n}".encode())])
            return ids

        results: dict[TopicName, list[str]] = {}
        threads = [
            threading.Thread(target=lambda t=t: results.__setitem__(t, publish(t))) for t in topics
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(results[t] == [str(n) for n in range(20)] for t in topics)
        # Each went from the caller to the intake's committer: no topic's thread ran.
        assert not [t.name for t in threading.enumerate() if t.name.startswith("publish-")]
