"""Peering (lakepubsub/peering/): engines on one lake hand a topic's commits to its owner.

Two engines in this process, each with its own peer server (real gRPC on
127.0.0.1) and its membership object in the lake, as two ``lakepubsub serve``
processes would have. tests/api/test_scaleout.py runs real server processes.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import LakeSpec

from lakepubsub import (
    Engine,
    PublishMessage,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
    metrics,
)
from lakepubsub.delivery.ackids import INVALID_ACK_ID
from lakepubsub.messages import Pull
from lakepubsub.peering.membership import Member
from lakepubsub.peering.peers import Peering
from lakepubsub.peering.transport import Unreachable
from lakepubsub.publish.batches import from_messages
from lakepubsub.publish.messages_table import MessagesTable

TOPIC = TopicName("proj", "hot")


def _calls(method: str) -> float:
    return metrics.PEER_CALLS.labels(method)._value.get()


@pytest.fixture
def pair(local_lake: LakeSpec) -> Iterator[tuple[Engine, Engine]]:
    """(owner, other): two peered engines, named by who owns TOPIC's uid."""
    engines = [Engine(local_lake.settings()) for _ in range(2)]
    peerings = []
    for engine in engines:
        peering = Peering(engine)
        peering.start()  # the second announces itself to the first
        engine.peering = peering
        peerings.append(peering)
    try:
        engines[0].create_topic(Topic(TOPIC))
        uid = engines[0].resources.topic_entry(TOPIC).uid
        owners = {p.owner(uid) for p in peerings}
        assert len(owners) == 2  # each sees the other, or None for itself
        owner = engines[0] if peerings[1].owner(uid) == peerings[0].me else engines[1]
        yield owner, engines[1] if owner is engines[0] else engines[0]
    finally:
        for engine, peering in zip(engines, peerings, strict=True):
            engine.peering = None
            peering.stop()
            engine.close()


def test_members_agree_on_one_owner(pair: tuple[Engine, Engine]) -> None:
    owner, other = pair
    assert owner.peering is not None and other.peering is not None
    assert set(owner.peering.members) == set(other.peering.members)
    assert len(owner.peering.members) == 2
    for i in range(50):  # every uid has the same owner whichever process asks
        uid = f"uid-{i}"
        a, b = owner.peering.owner(uid), other.peering.owner(uid)
        assert (a is None) != (b is None)
        assert (a or owner.peering.me) == (b or other.peering.me)


def test_publish_through_the_other_is_committed_by_the_owner(
    pair: tuple[Engine, Engine],
) -> None:
    owner, other = pair
    before = _calls("publish")
    ids = other.publish(TOPIC, [PublishMessage(f"m{i}".encode()) for i in range(5)])
    mine = owner.publish(TOPIC, [PublishMessage(b"own")])
    assert _calls("publish") == before + 1
    assert [int(i) for i in ids] == list(range(int(ids[0]), int(ids[0]) + 5))
    assert sorted(int(i) for i in ids + mine) == list(range(6))
    uid = owner.resources.topic_entry(TOPIC).uid
    rows = MessagesTable(owner.lake, uid).read_range(0, 6)
    assert rows["data"].to_pylist() == [b"m0", b"m1", b"m2", b"m3", b"m4", b"own"] or rows[
        "data"
    ].to_pylist() == [b"own", b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_pull_ack_and_events_through_the_other(pair: tuple[Engine, Engine]) -> None:
    owner, other = pair
    sub = SubscriptionName("proj", "once")
    owner.create_subscription(Subscription(sub, TOPIC, enable_exactly_once_delivery=True))
    other.publish(
        TOPIC,
        [PublishMessage(b"a", {"k": "v"}, "key"), PublishMessage(b"", {"only": "attrs"})],
    )
    pulls = _calls("pull")
    got = other.pull(sub, max_messages=10)
    assert _calls("pull") == pulls + 1
    assert [(r.message.data, dict(r.message.attributes), r.message.ordering_key) for r in got] == [  # type: ignore[union-attr]
        (b"a", {"k": "v"}, "key"),
        (b"", {"only": "attrs"}, ""),
    ]
    assert all(r.delivery_attempt == 1 for r in got)
    first = got[0].ack_id
    assert other.acknowledge(sub, [first]) == {}
    # Exactly-once: the same delivery acknowledged again fails, through either process.
    assert other.acknowledge(sub, [first]) == {first: INVALID_ACK_ID}
    assert other.modify_ack_deadline(sub, [got[1].ack_id], 0) == {}
    again = other.pull(sub, max_messages=10)
    assert [r.message.data for r in again] == [b""]  # type: ignore[union-attr]
    other.acknowledge(sub, [again[0].ack_id])
    # A truncation event crosses as an event.
    other.publish(TOPIC, [PublishMessage(b"dropped")])
    owner.truncate(sub, reason="test")
    events = other.pull(sub, max_messages=10)
    assert len(events) == 1 and events[0].message is None
    assert events[0].event is not None and events[0].event.reason == "test"


def test_errors_cross_as_their_class(pair: tuple[Engine, Engine]) -> None:
    owner, other = pair
    sub = SubscriptionName("proj", "plain")
    owner.create_subscription(Subscription(sub, TOPIC))
    owner.delete_subscription(sub)
    assert other.peering is not None
    uid = owner.resources.topic_entry(TOPIC).uid
    member = other.peering.owner(uid)
    assert member is not None
    future = other.peering.pull(member, sub.path, Pull(1, 0.0))
    with pytest.raises(Exception) as raised:
        future.result()
    assert type(raised.value).__name__ == "NotFound"


def test_a_wrong_token_is_refused_and_handled_as_unreachable(
    pair: tuple[Engine, Engine],
) -> None:
    owner, other = pair
    assert owner.peering is not None and other.peering is not None and owner.peering.me
    impostor = Member(*owner.peering.me[:3], "0" * 32, owner.peering.me.hostname)
    with pytest.raises(Unreachable):
        other.peering.publish(
            impostor, "any", from_messages([PublishMessage(b"x")]).columns
        ).result()


def test_an_owner_that_left_is_replaced_by_the_caller(pair: tuple[Engine, Engine]) -> None:
    owner, other = pair
    assert owner.peering is not None and other.peering is not None
    stale = owner.peering.me
    assert stale is not None
    owner.peering.stop()  # says goodbye, deletes its membership object, ends its server
    owner.peering = None
    assert stale not in other.peering.members
    # A goodbye that was lost: ``other`` still lists it, the call fails, it commits itself.
    other.peering.joined(stale.key)
    assert stale in other.peering.members
    ids = other.publish(TOPIC, [PublishMessage(b"after")])
    assert ids == ["0"]
    assert stale not in other.peering.members


def test_an_unreachable_member_is_left_out_until_its_pause_ends_and_it_beats(
    pair: tuple[Engine, Engine],
) -> None:
    owner, other = pair
    assert owner.peering is not None and other.peering is not None
    member = owner.peering.me
    assert member is not None
    nobody = Member("0" * 12, "127.0.0.1", 9, "0" * 32, member.hostname)  # nothing listens
    with pytest.raises(Unreachable):
        other.peering.publish(nobody, "any", from_messages([PublishMessage(b"x")]).columns).result()

    other.peering.forget(member)
    other.peering.forget(member)  # calls already in flight: still one failure
    since, until = other.peering.membership._suspects[member]
    assert until - since == pytest.approx(5.0)
    owner.peering.membership.beat()
    other.peering.membership.beat()
    assert member not in other.peering.members  # it beat, but its pause lasts
    other.peering.membership._suspects[member] = (since, time.time() - 0.01)  # the pause is over
    time.sleep(0.02)  # file times come from a coarse clock
    owner.peering.membership.beat()
    other.peering.membership.beat()
    assert member in other.peering.members


def test_a_lake_that_cannot_be_written_leaves_the_process_serving_alone(
    local_lake: LakeSpec,
) -> None:
    with Engine(local_lake.settings()) as engine:
        (Path(engine.lake.root) / "peers").write_text("not a directory")  # every beat fails
        peering = Peering(engine)
        peering.start()
        try:
            assert peering.members == ()
            assert peering.owner("any-uid") is None  # commits here
        finally:
            peering.stop()


def test_a_pull_withdrawn_through_the_other_strands_nothing(pair: tuple[Engine, Engine]) -> None:
    """A long poll forwarded to the owner and withdrawn by its caller leaves the owner's
    dispatcher; one withdrawn after its answer came back is released on the owner."""
    owner, other = pair
    sub = SubscriptionName("proj", "withdrawn")
    long_lease_s = 600  # a stranded lease would outlast the test
    owner.create_subscription(Subscription(sub, TOPIC, ack_deadline_s=long_lease_s))
    waiting = other.pull_future(sub, max_messages=10)
    time.sleep(0.3)  # the call reached the owner, whose dispatcher waits for messages
    other.withdraw(sub, waiting)
    other.publish(TOPIC, [PublishMessage(b"first")])
    got = other.pull(sub, max_messages=10)
    assert [r.message.data for r in got if r.message] == [b"first"]
    assert got[0].delivery_attempt == 1
    # Answered, then withdrawn (the receiver went away before writing it out).
    other.withdraw(sub, other.pull_future(sub, max_messages=10))  # nothing there: waits
    other.publish(TOPIC, [PublishMessage(b"second")])
    answered = other.pull_future(sub, max_messages=10)
    second = answered.result(timeout=30)
    other.withdraw(sub, answered)
    again = other.pull(sub, max_messages=10)
    assert [r.message.data for r in again if r.message] == [b"second"]
    assert [r.message.data for r in second if r.message] == [b"second"]
    assert again[0].delivery_attempt == 1


def test_a_catalog_commit_is_told_to_the_peers_and_a_stop_says_goodbye(
    local_lake: LakeSpec,
) -> None:
    """With a catalog cached for an hour, only the notice can show the other's commit."""
    engines = [Engine(local_lake.settings(catalog_max_staleness_s=3600.0)) for _ in range(2)]
    peerings = []
    for engine in engines:
        peering = Peering(engine)
        peering.start()
        engine.peering = peering
        peerings.append(peering)
    first, second = engines
    try:
        assert (
            second.catalog.view(max_staleness_s=3600.0).get("topic", TOPIC.project, "told") is None
        )
        first.create_topic(Topic(TopicName(TOPIC.project, "told")))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            view = second.catalog.view(max_staleness_s=3600.0)
            if view.get("topic", TOPIC.project, "told") is not None:
                break
            time.sleep(0.02)
        assert view.get("topic", TOPIC.project, "told") is not None
        assert len(peerings[1].members) == 2
        first.peering = None
        peerings[0].stop()
        assert peerings[0].me not in peerings[1].members  # no beat needed
    finally:
        for engine, peering in zip(engines, peerings, strict=True):
            engine.peering = None
            peering.stop()
            engine.close()


def test_a_restart_after_kill_9_leaves_its_dead_predecessor_out_quietly(
    local_lake: LakeSpec, caplog: pytest.LogCaptureFixture
) -> None:
    """The killed process's membership object is still there (it expires later):
    the new process's hello to it fails, and that is no warning."""
    with Engine(local_lake.settings()) as engine:
        dead = Member("0" * 12, "127.0.0.1", 9, "0" * 32, socket.gethostname())  # nothing listens
        engine.lake.objects.put(engine.lake.uri("peers", dead.key), b"")
        peering = Peering(engine)
        with caplog.at_level(logging.INFO, logger="lakepubsub.peering"):
            peering.start()
        try:
            assert dead not in peering.members
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
            assert "unreachable" in caplog.text  # said, at INFO
        finally:
            peering.stop()
