"""The intake: every topic a process publishes to commits together, rows move to
the topics' tables later, and readers see one history throughout (real tables,
real threads, local and on moto S3)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow.compute as pc
import pytest
from prometheus_client import REGISTRY
from support import LakeSpec, MotoServer

from lakepubsub import Engine, constants, errors
from lakepubsub._lake import Lake
from lakepubsub.messages import PublishMessage
from lakepubsub.publish.intake_ranges import RANGES_TAG, decode
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import Subscription
from lakepubsub.resources.topics import Topic

TOPICS = 8
PER_TOPIC = 40


def _names(i: int) -> tuple[TopicName, SubscriptionName]:
    return TopicName("intake", f"topic-{i}"), SubscriptionName("intake", f"sub-{i}")


def _intake_version(engine: Engine) -> int:
    return engine.lake.open(engine.lake.intake_uri()).version()


def _drain(engine: Engine, sub: SubscriptionName, want: int) -> list[tuple[str, bytes]]:
    got: list[tuple[str, bytes]] = []
    deadline = time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        received = engine.pull(sub, max_messages=100)
        engine.acknowledge(sub, [r.ack_id for r in received])
        got.extend((r.message.message_id, r.message.data) for r in received)
    return got


def test_topics_commit_together_and_deliver(lake: LakeSpec) -> None:
    settings = lake.settings(intake=True, flush_ms=100.0, intake_move_s=3600.0)
    with Engine(settings) as engine:
        for i in range(TOPICS):
            topic, sub = _names(i)
            engine.create_topic(Topic(topic))
            engine.create_subscription(Subscription(sub, topic))
        before = _intake_version(engine)

        def publish(i: int) -> list[str]:
            topic, _ = _names(i)
            ids = []
            for n in range(PER_TOPIC):
                ids += engine.publish(topic, [PublishMessage(f"{i}:{n}".encode())])
            return ids

        with ThreadPoolExecutor(TOPICS) as pool:
            ids = list(pool.map(publish, range(TOPICS)))
        commits = _intake_version(engine) - before
        # One commit per window for all topics: far fewer than the 320 publishes
        # (each topic publishes one message at a time, so per-topic commits
        # would be one per publish).
        assert commits < TOPICS * PER_TOPIC / 3, commits
        for i in range(TOPICS):
            assert ids[i] == [str(n) for n in range(PER_TOPIC)]
            topic, sub = _names(i)
            # Nothing moved yet: the topics' tables are empty, the history is in the intake.
            assert (
                MessagesTable(
                    engine.lake, engine.resources.topic_entry(topic).uid, overlay=False
                ).head()
                == 0
            )
            got = _drain(engine, sub, PER_TOPIC)
            assert sorted(got, key=lambda g: int(g[0])) == [
                (str(n), f"{i}:{n}".encode()) for n in range(PER_TOPIC)
            ]


def _engine_with_one_topic(lake: LakeSpec, **settings: object) -> Engine:
    engine = Engine(lake.settings(intake=True, **settings))
    topic, sub = _names(0)
    engine.create_topic(Topic(topic))
    engine.create_subscription(Subscription(sub, topic))
    return engine


def test_rows_move_to_the_topic_table_with_their_offsets(lake: LakeSpec) -> None:
    topic, sub = _names(0)
    with _engine_with_one_topic(lake, intake_move_s=0.5) as engine:
        uid = engine.resources.topic_entry(topic).uid
        for n in range(30):
            engine.publish(topic, [PublishMessage(f"m{n}".encode())])
        table = MessagesTable(engine.lake, uid, overlay=False)
        deadline = time.monotonic() + 30
        while table.head() < 30 and time.monotonic() < deadline:
            time.sleep(0.2)
            table.refresh()
        assert table.head() == 30
        rows = table.read_range(0, 30)
        assert rows["offset"].to_pylist() == list(range(30))
        assert rows["data"].to_pylist() == [f"m{n}".encode() for n in range(30)]
        # Published after the move: numbered on from the table's head.
        assert engine.publish(topic, [PublishMessage(b"after")]) == ["30"]
        got = _drain(engine, sub, 31)
        assert sorted(int(m) for m, _ in got) == list(range(31))


def test_a_restart_reads_and_continues_the_intake(lake: LakeSpec) -> None:
    topic, sub = _names(0)
    with _engine_with_one_topic(lake, intake_move_s=3600.0) as engine:
        engine.publish(topic, [PublishMessage(b"a"), PublishMessage(b"b")])
    # A new process, even one not asking for the intake, sees the lake's intake.
    with Engine(lake.settings()) as engine:
        assert engine.intake is not None
        assert engine.publish(topic, [PublishMessage(b"c")]) == ["2"]
        got = _drain(engine, sub, 3)
        assert sorted(got) == [("0", b"a"), ("1", b"b"), ("2", b"c")]


def test_two_writers_on_one_topic_never_share_an_offset(lake: LakeSpec) -> None:
    """Two engines (not peered, so both commit for the topic) contend on the intake's
    version sequence: the loser renumbers, and every message keeps its own id."""
    settings = lake.settings(intake=True, flush_ms=0.0, intake_move_s=1.0)
    topic, sub = _names(0)
    with Engine(settings) as setup:
        setup.create_topic(Topic(topic))
        setup.create_subscription(Subscription(sub, topic))
    answered: dict[str, bytes] = {}
    lock = threading.Lock()

    def writer(w: int) -> None:
        with Engine(settings) as engine:
            for n in range(40):
                data = f"{w}:{n}".encode()
                (mid,) = engine.publish(topic, [PublishMessage(data)])
                with lock:
                    assert mid not in answered, mid
                    answered[mid] = data

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(int(m) for m in answered) == list(range(80))
    with Engine(settings) as engine:
        got = dict(_drain(engine, sub, 80))
    assert got == answered


def test_moved_files_leave_the_intake(lake: LakeSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "INTAKE_REMOVE_GRACE_S", 0.0)
    monkeypatch.setattr("lakepubsub.publish.intake_moves.REMOVAL_PASS_S", 0.2)
    settings = lake.settings(intake=True, intake_move_s=0.2)
    topic, _ = _names(0)
    with Engine(settings) as engine:
        engine.create_topic(Topic(topic))
        for n in range(5):
            engine.publish(topic, [PublishMessage(f"m{n}".encode())])
        intake = Lake(settings).open(engine.lake.intake_uri())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            intake.update_incremental()
            if not intake.file_uris():
                break
            time.sleep(0.2)
        assert intake.file_uris() == []
        uid = engine.resources.topic_entry(topic).uid
        rows = MessagesTable(engine.lake, uid).read_range(0, 5)
        assert pc.sum(rows["offset"]).as_py() == sum(range(5))


@pytest.mark.s3
def test_fifty_topics_commit_within_the_flush_bound(moto_server: MotoServer) -> None:
    """On S3's defaults (intake on, 250 ms window), 50 topics publishing at once make at
    most one intake commit per window and no commit to their own tables."""
    spec = LakeSpec(f"s3://{moto_server.bucket}/{uuid.uuid4().hex}", moto_server.storage_options)
    settings = spec.settings(flush_ms=None)
    assert settings.uses_intake() and settings.flush_s() == 0.25
    topics = [TopicName("intake", f"many-{i}") for i in range(50)]
    with Engine(settings) as engine:
        for topic in topics:
            engine.create_topic(Topic(topic))
        stop = threading.Event()
        published = [0] * len(topics)

        def publish(i: int) -> None:
            while not stop.is_set():
                published[i] += len(engine.publish(topics[i], [PublishMessage(b"x")]))

        intake, messages = _commits("intake"), _commits("messages")
        started = time.monotonic()
        with ThreadPoolExecutor(len(topics)) as pool:
            running = [pool.submit(publish, i) for i in range(len(topics))]
            time.sleep(4.0)
            stop.set()
            for r in running:
                r.result()
        seconds = time.monotonic() - started
        made = _commits("intake") - intake
        assert all(published), published  # every topic got through
        assert made <= seconds / settings.flush_s() + 1, (made, seconds)
        assert sum(published) / made > 10  # many topics' messages per commit
        assert _commits("messages") == messages  # nothing moved yet: no per-topic commit


def _commits(table: str) -> float:
    return REGISTRY.get_sample_value("lakepubsub_delta_commits_total", {"table": table}) or 0.0


def test_a_files_rows_give_the_ranges_its_tag_gives(local_lake: LakeSpec) -> None:
    """Where a load cannot replay the log's tags, it reads the files: same ranges."""
    settings = local_lake.settings(intake=True, flush_ms=50.0, intake_move_s=3600.0)
    with Engine(settings) as engine:
        names = [TopicName("intake", f"ranges-{i}") for i in range(3)]
        for topic in names:
            engine.create_topic(Topic(topic))
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda t: engine.publish(t, [PublishMessage(b"r")] * 5), names * 4))
        intake = engine.intake
        assert intake is not None
        live = intake.view.log.files
        assert live
        for path, f in live.items():
            assert intake.view.ranges_of(path) == decode(f.tags[RANGES_TAG])


def test_the_intake_may_live_elsewhere_and_every_process_finds_it(lake: LakeSpec) -> None:
    """LAKEPUBSUB_INTAKE_LAKE puts the intake under another root (on S3, another
    bucket such as an Express One Zone one). The lake records the place, so a
    process without the setting finds it; one set to a third place is refused, and
    so is moving an intake that already exists."""
    elsewhere = f"{lake.uri}-hot"
    settings = lake.settings(intake=True, intake_lake=elsewhere, intake_move_s=3600.0)
    topic, sub = _names(0)
    with Engine(settings) as engine:
        assert engine.lake.intake_uri() == f"{elsewhere}/intake"
        engine.create_topic(Topic(topic))
        engine.create_subscription(Subscription(sub, topic))
        ids = engine.publish(topic, [PublishMessage(b"hot")])
        assert engine.lake.open(f"{elsewhere}/intake").version() > 0
        assert not engine.lake.exists(engine.lake.uri("intake"))
    plain = lake.settings(intake=True, intake_move_s=3600.0)
    with Engine(plain) as engine:  # no setting: the lake says where its intake is
        assert engine.lake.intake_uri() == f"{elsewhere}/intake"
        assert _drain(engine, sub, 1) == [(ids[0], b"hot")]
    with pytest.raises(errors.FailedPrecondition, match="intake is at"):
        Engine(lake.settings(intake=True, intake_lake=f"{lake.uri}-other")).close()
    root_only = LakeSpec(f"{lake.uri}-second", lake.storage_options)
    with Engine(root_only.settings(intake=True)) as engine:
        engine.create_topic(Topic(topic))
        engine.publish(topic, [PublishMessage(b"root")])
    with pytest.raises(errors.FailedPrecondition, match="cannot move"):
        Engine(root_only.settings(intake=True, intake_lake=elsewhere)).close()


def test_the_intake_drains_into_the_topics_tables_and_goes(lake: LakeSpec) -> None:
    """``lakepubsub intake drain``: refused while a server's heartbeat is fresh; then
    every topic's rows move to its table and the intake is removed, and servers
    without it deliver the same messages and number new ones on from them."""
    settings = lake.settings(intake=True, intake_move_s=3600.0)
    with Engine(settings) as engine:
        ids = {}
        for i in range(3):
            topic, sub = _names(i)
            engine.create_topic(Topic(topic))
            engine.create_subscription(Subscription(sub, topic))
            ids[i] = engine.publish(topic, [PublishMessage(f"{i}:{n}".encode()) for n in range(4)])
        intake_uri = engine.lake.intake_uri()
        peer = engine.lake.uri("peers", "a-running-server")
        engine.lake.objects.put(peer, b"")  # what a running server's heartbeat writes

    def drain() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "lakepubsub.cli", "--lake", lake.uri, "intake", "drain"]
        return subprocess.run(
            command, check=False, env=lake.env(), capture_output=True, text=True, timeout=120
        )

    refused = drain()
    assert refused.returncode != 0 and "stop them" in refused.stderr, refused
    Lake(settings).objects.delete(peer)
    done = drain()
    assert done.returncode == 0, done.stderr
    assert "12 messages of 3 topics" in done.stdout
    plain = lake.settings(intake=False)
    with Engine(plain) as engine:
        assert engine.intake is None and not engine.lake.exists(intake_uri)
        for i in range(3):
            topic, sub = _names(i)
            got = _drain(engine, sub, 4)
            assert got == [(ids[i][n], f"{i}:{n}".encode()) for n in range(4)]
            assert engine.publish(topic, [PublishMessage(b"after")]) == ["4"]
    assert "has no intake" in drain().stdout


def test_a_publish_does_not_wait_for_a_move(local_lake: LakeSpec) -> None:
    """Moves run on the housekeeper's thread under the mover's own lock: while one
    holds the topics' tables, publishes are numbered from the head last read."""
    topic, sub = _names(0)
    with _engine_with_one_topic(local_lake, intake_move_s=3600.0) as engine:
        assert engine.publish(topic, [PublishMessage(b"a")]) == ["0"]
        intake = engine.intake
        assert intake is not None
        pool = ThreadPoolExecutor(1)
        with intake.mover._lock:  # as a move does, for as long as it takes
            running = pool.submit(
                lambda: [engine.publish(topic, [PublishMessage(b"m")])[0] for _ in range(5)]
            )
            try:
                ids = running.result(timeout=10)
            except TimeoutError:
                ids = []  # it waited for the tables
        pool.shutdown()
        assert ids == ["1", "2", "3", "4", "5"]
        intake.move_all()  # and the move itself still lands the rows in the table
        uid = engine.resources.topic_entry(topic).uid
        table = MessagesTable(engine.lake, uid, overlay=False)
        assert table.head() == 6
        assert sorted(int(m) for m, _ in _drain(engine, sub, 6)) == list(range(6))


def test_reads_of_part_of_the_intake_give_exactly_those_offsets(local_lake: LakeSpec) -> None:
    """The overlay reads any range of a topic's offsets from the intake's slices (one
    per commit), each cut by position: every boundary, inside a slice and across
    several, gives exactly the offsets asked, in order."""
    topic, _ = _names(0)
    with _engine_with_one_topic(local_lake, intake_move_s=3600.0) as engine:
        for n in range(4):  # four commits: slices [0,3) [3,6) [6,9) [9,12)
            engine.publish(topic, [PublishMessage(f"m{n}-{i}".encode()) for i in range(3)])
        intake = engine.intake
        assert intake is not None
        uid = engine.resources.topic_entry(topic).uid
        for lo in range(13):
            for hi in range(lo, 14):
                rows = intake.read(uid, lo, hi)
                assert rows["offset"].to_pylist() == list(range(lo, min(hi, 12))), (lo, hi)
                data = [f"m{o // 3}-{o % 3}".encode() for o in range(lo, min(hi, 12))]
                assert rows["data"].to_pylist() == data
