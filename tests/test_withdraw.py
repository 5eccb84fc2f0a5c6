"""Withdrawn pulls and released deliveries: a receiver that goes away strands nothing.

A pull whose caller gave up (a StreamingPull stream or a long poll that ended)
leases nothing once withdrawn, and what it had already been given is released:
deliverable again at once, to the next receiver, with the attempt not counted.
"""

from __future__ import annotations

import threading
import time

from lakepubsub import (
    Engine,
    PublishMessage,
    Subscription,
    SubscriptionName,
    Topic,
    TopicName,
)
from lakepubsub.resources.subscriptions import DeadLetterPolicy, RetryPolicy

TOPIC = TopicName("proj", "work")
SUB = SubscriptionName("proj", "workers")
# Far longer than any test waits: a message stranded on a lease would not come back.
LONG_DEADLINE_S = 600


def setup(engine: Engine, **options: object) -> None:
    engine.create_topic(Topic(TOPIC))
    engine.create_subscription(
        Subscription(SUB, TOPIC, ack_deadline_s=LONG_DEADLINE_S, **options)  # type: ignore[arg-type]
    )


def publish(engine: Engine, *datas: bytes) -> None:
    engine.publish(TOPIC, [PublishMessage(d) for d in datas])


def test_withdrawn_waiting_pull_leases_nothing(engine: Engine) -> None:
    setup(engine)
    waiting = engine.pull_future(SUB, max_messages=10)
    time.sleep(0.2)  # the dispatcher has planned it and waits for messages
    engine.withdraw(SUB, waiting)
    assert waiting.cancelled()
    publish(engine, b"after")
    got = engine.pull(SUB, max_messages=10)
    assert [r.message.data for r in got if r.message] == [b"after"]
    assert got[0].delivery_attempt == 1


def test_withdrawn_answered_pull_is_released(engine: Engine) -> None:
    setup(engine)
    publish(engine, b"a", b"b")
    answered = engine.pull_future(SUB, max_messages=10)
    first = answered.result(timeout=30)
    assert len(first) == 2
    # The receiver went away before writing them: the next pull gets both now,
    # with the same attempt (the first never reached anyone).
    engine.withdraw(SUB, answered)
    again = engine.pull(SUB, max_messages=10)
    assert sorted(r.message.data for r in again if r.message) == [b"a", b"b"]
    assert {r.delivery_attempt for r in again} == {1}
    assert {r.ack_id for r in again}.isdisjoint(r.ack_id for r in first)
    # A stale ack id of the released delivery removes nothing it should not.
    engine.acknowledge(SUB, [r.ack_id for r in again])
    assert engine.pull(SUB, max_messages=10, return_immediately=True) == []


def test_release_skips_back_off_and_keeps_attempts_for_dead_letter(engine: Engine) -> None:
    engine.create_topic(Topic(TopicName("proj", "dead")))
    setup(
        engine,
        dead_letter_policy=DeadLetterPolicy(TopicName("proj", "dead"), max_delivery_attempts=5),
        retry_policy=RetryPolicy(
            minimum_backoff_s=LONG_DEADLINE_S, maximum_backoff_s=LONG_DEADLINE_S
        ),
    )
    publish(engine, b"x")
    for _ in range(8):  # more releases than the dead-letter limit
        answered = engine.pull_future(SUB, max_messages=1)
        assert len(answered.result(timeout=30)) == 1
        engine.withdraw(SUB, answered)
    got = engine.pull(SUB, max_messages=1, return_immediately=False)
    assert [r.message.data for r in got if r.message] == [b"x"]
    assert got[0].delivery_attempt == 1


def test_withdraw_racing_the_answer_strands_nothing(engine: Engine) -> None:
    """Withdraw pulls at random moments while messages arrive: every message is
    still delivered, to a pull that kept its answer, within a second or two."""
    setup(engine)
    kept: list[bytes] = []
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            pull = engine.pull_future(SUB, max_messages=5)
            time.sleep(0.003)
            engine.withdraw(SUB, pull)

    churners = [threading.Thread(target=churn) for _ in range(3)]
    for thread in churners:
        thread.start()
    try:
        for i in range(20):
            publish(engine, f"m{i}".encode())
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in churners:
            thread.join()
    deadline = time.monotonic() + 10
    while len(kept) < 20 and time.monotonic() < deadline:
        got = engine.pull(SUB, max_messages=20)
        kept += [r.message.data for r in got if r.message]
        if got:
            engine.acknowledge(SUB, [r.ack_id for r in got])
    assert sorted(kept) == sorted(f"m{i}".encode() for i in range(20))
