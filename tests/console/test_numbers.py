"""What the console shows, against a real lake (local and S3): the sampler's backlog,
backlog bytes, leases out and head, and the message browser's offset, time and
attribute queries, which leave every subscription as it was."""

from __future__ import annotations

import time

from api.console import browse
from api.console.sampler import Sampler, SubscriptionPoint, TopicPoint
from api.console.tables import pending_events
from jobs.common import JobContext
from jobs.truncate import Truncation, record
from lakepubsub import Engine
from lakepubsub.messages import PublishMessage
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic

TOPIC = TopicName("demo", "orders")
SUB = SubscriptionName("demo", "orders-sub")


def setup(engine: Engine, messages: list[PublishMessage]) -> tuple[str, str]:
    engine.create_topic(Topic(TOPIC))
    engine.create_subscription(Subscription(SUB, TOPIC))
    half = len(messages) // 2
    engine.publish(TOPIC, messages[:half])  # two files
    engine.publish(TOPIC, messages[half:])
    view = engine.catalog.view()
    topic = view.get(cat.TOPIC, TOPIC.project, TOPIC.id)
    sub = view.get(cat.SUBSCRIPTION, SUB.project, SUB.id)
    assert topic is not None and sub is not None
    return topic.uid, sub.uid


def test_backlog_counts_and_sizes_exactly_the_unacknowledged_messages(engine: Engine) -> None:
    messages = [PublishMessage(b"x" * (10 * (i + 1)), {"i": str(i)}) for i in range(6)]
    topic_uid, sub_uid = setup(engine, messages)
    received = engine.pull(SUB, max_messages=4)
    assert received
    acked = [r for i, r in enumerate(received) if i % 2]
    engine.acknowledge(SUB, [r.ack_id for r in acked])
    gone = {r.message.offset for r in acked if r.message is not None}

    sampler = Sampler(engine)
    sampler.sample()
    sampler.sample()  # the second reads nothing again, and must say the same
    head = sampler.points(topic_uid)[-1]
    point = sampler.points(sub_uid)[-1]
    assert isinstance(head, TopicPoint) and head.head == 6
    assert isinstance(point, SubscriptionPoint)
    unacked = [i for i in range(6) if i not in gone]
    assert point.backlog == len(unacked)
    assert point.backlog_bytes == sum(messages[i].size for i in unacked)
    assert point.leases_out == len(received) - len(acked)
    assert 0 <= point.oldest_unacked_s < 60
    assert point.deliveries == len(received)
    series = sampler.series(sub_uid)
    assert series is not None and series.size is not None and series.size.files >= 1


def test_browsing_reads_offsets_times_and_attributes_without_touching_a_subscription(
    engine: Engine,
) -> None:
    messages = [
        PublishMessage(f'{{"n": {i}}}'.encode(), {"parity": "odd" if i % 2 else "even"})
        for i in range(10)
    ]
    topic_uid, _ = setup(engine, messages)
    handles = browse.Handles()

    newest = browse.read(handles, engine, topic_uid, browse.Query())
    assert [m.offset for m in newest.messages] == list(range(9, -1, -1))
    assert (newest.oldest, newest.head) == (0, 10)

    window = browse.read(
        handles, engine, topic_uid, browse.Query(start=3, end=6, newest_first=False)
    )
    assert [m.offset for m in window.messages] == [3, 4, 5]

    odd = browse.read(handles, engine, topic_uid, browse.Query(attribute=("parity", "odd")))
    assert [m.offset for m in odd.messages] == [9, 7, 5, 3, 1]

    later = int(time.time() * 1e6) + 60_000_000
    assert browse.read(handles, engine, topic_uid, browse.Query(since_us=later)).messages == []
    since = browse.read(handles, engine, topic_uid, browse.Query(since_us=0))
    assert [m.offset for m in since.messages] == list(range(10))

    assert browse.as_json(b'{"n": 1}') == '{\n  "n": 1\n}'
    assert browse.as_json(b"\xff") is None
    assert browse.as_hex(b"AB\x00").startswith("00000000  41 42 00")

    # Nothing was delivered: the subscription hands out all ten.
    got = engine.pull(SUB, max_messages=20)
    assert sorted(r.message.offset for r in got if r.message is not None) == list(range(10))


def test_truncations_recorded_by_the_job_and_pending_events_are_listed(engine: Engine) -> None:

    _, sub_uid = setup(engine, [PublishMessage(b"x" * 10) for _ in range(4)])
    sampler = Sampler(engine)
    sampler.sample()
    assert sampler.truncations(sub_uid) == []
    # What the truncation job writes when a policy drops backlog (its own writer).
    ctx = JobContext(engine.settings)
    row = Truncation(SUB.path, sub_uid, 1_000_000, "maxBytes", 0, 2, 2, 20)
    record(ctx, [row])
    record(ctx, [Truncation(SUB.path, "another-uid", 2_000_000, "maxAge", 0, 1, 1, 10)])
    engine.truncate(SUB)  # an explicit truncation: an event waits for the next pull
    sampler.sample()
    recorded = sampler.truncations(sub_uid)
    assert [(t.reason, t.first_offset, t.end_offset, t.messages, t.bytes) for t in recorded] == [
        ("maxBytes", 0, 2, 2, 20)
    ]
    series = sampler.series(sub_uid)
    assert series is not None and series.state is not None
    pending = pending_events(series.state)
    assert [(t.reason, t.end_offset, t.messages) for t in pending] == [("request", 4, None)]
    assert sampler.series("truncations") is not None
