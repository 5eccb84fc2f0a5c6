"""The heads the intake numbers from are read off the committer's thread: a topic
whose head is being read, or cannot be read, holds up no other topic's publish
(real tables on a local lake, real threads)."""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from support import LakeSpec

from lakepubsub import Engine, constants, errors
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.intake_heads import Heads
from lakepubsub.resources.names import TopicName
from lakepubsub.resources.topics import Topic


class _Reads:
    """A head read that takes ``delay_s`` and records how many ran at once."""

    def __init__(self, delay_s: float, fail: set[str] | None = None) -> None:
        self.delay_s = delay_s
        self.fail = fail or set()
        self.lock = threading.Lock()
        self.running = self.most = self.calls = 0
        self.woken = threading.Event()

    def read(self, topic_uid: str) -> int:
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.delay_s)
        with self.lock:
            self.running -= 1
        if topic_uid in self.fail:
            raise errors.NotFound(f"no table for {topic_uid}")
        return 100 + int(topic_uid[1:])

    def wake(self) -> None:
        self.woken.set()


def _until(check: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_heads_of_many_topics_are_read_at_once_and_known_when_they_land() -> None:
    reads = _Reads(0.3)
    heads = Heads(reads.read, reads.wake)
    try:
        topics = [f"t{i}" for i in range(6)]
        started = time.monotonic()
        assert [heads.known(t) for t in topics] == [None] * 6  # reads under way
        assert [heads.known(t) for t in topics] == [None] * 6  # not read twice
        _until(lambda: all(heads.known(t) is not None for t in topics))
        took = time.monotonic() - started
        assert [heads.known(t) for t in topics] == [100 + i for i in range(6)]
        assert reads.calls == 6 and reads.most >= 2, (reads.calls, reads.most)
        assert took < 6 * 0.3, took  # not one after another
        assert reads.woken.is_set()
    finally:
        heads.close()


def test_an_old_head_numbers_while_it_is_reread_and_a_failed_read_fails_once() -> None:
    reads = _Reads(0.2, fail={"t2"})
    heads = Heads(reads.read, reads.wake)
    try:
        old = time.monotonic() - constants.INTAKE_HEAD_MAX_AGE_S - 1
        heads.note("t1", 7, old)
        assert heads.known("t1") == 7  # still fit to number from; a reread starts
        _until(lambda: heads.known("t1") == 101)
        assert reads.calls == 1
        # Too old to number from: wait for the read.
        heads.note("t3", 9, time.monotonic() - constants.INTAKE_HEAD_STALE_S - 1)
        assert heads.known("t3") is None
        _until(lambda: heads.known("t3") == 103)
        # A topic whose head cannot be read: its error once, then a new read.
        assert heads.known("t2") is None
        _until(lambda: reads.calls >= 3 and reads.running == 0)
        with pytest.raises(errors.NotFound):
            heads.known("t2")
        assert heads.known("t2") is None
        _until(lambda: reads.calls >= 4)
    finally:
        heads.close()


def _topics(engine: Engine, n: int, *, made_elsewhere: bool = False) -> list[TopicName]:
    """``n`` new topics; ``made_elsewhere``: this process does not know their heads,
    as of topics another process created (their first publish here reads them)."""
    names = [TopicName("heads", f"topic-{i}") for i in range(n)]
    for name in names:
        engine.create_topic(Topic(name))
        if made_elsewhere:
            assert engine.intake is not None
            engine.intake.mover.heads.forget(engine.resources.topic_entry(name).uid)
    return names


def test_a_topic_whose_head_is_being_read_holds_up_no_other(local_lake: LakeSpec) -> None:
    """The first publish to a topic waits for its table's head; another topic's
    publishes in the same windows are committed meanwhile (before, the committer
    read heads itself, and every topic waited for the slowest)."""
    with Engine(local_lake.settings(intake=True, flush_ms=50.0, intake_move_s=3600.0)) as engine:
        known, first = _topics(engine, 2, made_elsewhere=True)
        assert engine.publish(known, [PublishMessage(b"a")]) == ["0"]
        intake = engine.intake
        assert intake is not None
        # A read of a table not held yet opens it, then keeps it under the mover's
        # lock: with the lock taken (as a move takes it), that read cannot land.
        with intake.mover._lock:
            waiting = engine.publish_future(first, [PublishMessage(b"first")])
            ids = [
                engine.publish_future(known, [PublishMessage(f"m{n}".encode())]).result(timeout=10)
                for n in range(3)
            ]
            assert ids == [["1"], ["2"], ["3"]]
            assert not waiting.done()
        assert waiting.result(timeout=10) == ["0"]


def test_a_topic_whose_table_is_gone_fails_only_its_own_publishes(local_lake: LakeSpec) -> None:
    with Engine(local_lake.settings(intake=True, flush_ms=300.0, intake_move_s=3600.0)) as engine:
        good, broken = _topics(engine, 2, made_elsewhere=True)
        uid = engine.resources.topic_entry(broken).uid
        shutil.rmtree(Path(engine.lake.messages_uri(uid)))
        assert engine.publish(good, [PublishMessage(b"a")]) == ["0"]
        # Both inside the next flush window: one commit would have carried them.
        lost: Future[list[str]] = engine.publish_future(broken, [PublishMessage(b"x")])
        kept = engine.publish_future(good, [PublishMessage(b"b")])
        assert kept.result(timeout=10) == ["1"]
        with pytest.raises(errors.LakePubSubError):
            lost.result(timeout=10)


def test_a_topic_created_here_is_numbered_without_a_read(local_lake: LakeSpec) -> None:
    """The process that made a topic's (empty) table knows its head: the first
    publish opens nothing (100 first reads cost a run on S3 Standard its first 20 s),
    nor does the reread of its head a minute later, which looks at its next commit
    through the handle made with the table."""
    with Engine(local_lake.settings(intake=True, flush_ms=20.0, intake_move_s=3600.0)) as engine:
        (topic,) = _topics(engine, 1)
        intake = engine.intake
        assert intake is not None
        uid = engine.resources.topic_entry(topic).uid
        assert intake.mover.heads.known(uid) == 0
        assert engine.publish(topic, [PublishMessage(b"a")]) == ["0"]
        held, _ = intake.mover._tables[uid]
        loads = held._log.generation
        assert intake.mover.read_head(uid) == 0  # its row is still in the intake
        assert intake.mover._tables[uid][0] is held
        assert held._log.generation == loads  # tailed, not opened again
