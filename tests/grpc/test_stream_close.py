"""Receivers that go away strand nothing, and idle streams stay up.

With Google's unmodified Python client (``subscribe()`` and a clean shutdown) and
a plain HTTP client for REST long polls: the next receiver gets what was
published after the last one closed within a couple of seconds, not after a
lease held by a stream that no longer exists runs out. And a stream opened with
``protocol_version`` 1 (Google's Go and Java clients) has its keepalive pings
answered.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import grpc
import httpx
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message
from google.protobuf import timestamp_pb2
from google.pubsub_v1.types import pubsub as ps
from grpckit import Names, Serve, rest

# The bound: a message published after a subscriber closed reaches the next.
NEXT_RECEIVER_S = 2.0
# Ack deadline of the subscriptions here: far longer than the bound, so a message
# stranded on a dead receiver's lease could not meet it.
ACK_DEADLINE_S = 60
ROUNDS = 3


def _first_message(subscriber: pubsub_v1.SubscriberClient, sub: str, timeout_s: float) -> Any:
    """Subscribe, take one message (acked), shut the subscriber down cleanly."""
    got: queue.Queue[Message] = queue.Queue()

    def callback(message: Message) -> None:
        message.ack()
        got.put(message)

    future = subscriber.subscribe(sub, callback)
    try:
        return got.get(timeout=timeout_s)
    except queue.Empty:
        return None
    finally:
        future.cancel()
        future.result(timeout=30)


def _setup(publisher: pubsub_v1.PublisherClient, subscriber: Any, names: Names) -> tuple[str, str]:
    topic = publisher.create_topic(name=names.topic()).name
    sub = subscriber.create_subscription(
        request={
            "name": names.subscription(),
            "topic": topic,
            "ack_deadline_seconds": ACK_DEADLINE_S,
        }
    ).name
    return topic, sub


def test_closed_subscriber_strands_nothing(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = _setup(publisher, subscriber, names)
    publisher.publish(topic, b"round-0").result(timeout=30)
    first = _first_message(subscriber, sub, 30)
    assert first is not None and first.data == b"round-0"
    for round_ in range(1, ROUNDS + 1):
        publisher.publish(topic, f"round-{round_}".encode()).result(timeout=30)
        started = time.monotonic()
        message = _first_message(subscriber, sub, NEXT_RECEIVER_S + 3)
        took = time.monotonic() - started
        assert message is not None, f"round {round_}: nothing within {NEXT_RECEIVER_S + 3} s"
        assert message.data == f"round-{round_}".encode()
        assert took <= NEXT_RECEIVER_S + 1, f"round {round_} took {took:.1f} s"


def test_seek_after_close_replays_to_the_next_subscriber(
    publisher: pubsub_v1.PublisherClient, subscriber: pubsub_v1.SubscriberClient, names: Names
) -> None:
    topic, sub = _setup(publisher, subscriber, names)
    before = datetime.now(UTC)
    for i in range(3):
        publisher.publish(topic, f"m{i}".encode()).result(timeout=30)
    received: set[bytes] = set()
    lock = threading.Lock()

    def callback(message: Message) -> None:
        message.ack()
        with lock:
            received.add(message.data)

    future = subscriber.subscribe(sub, callback)
    deadline = time.monotonic() + 30
    while len(received) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    future.cancel()
    future.result(timeout=30)
    assert received == {b"m0", b"m1", b"m2"}
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(before)
    subscriber.seek(request={"subscription": sub, "time": stamp})
    received.clear()
    future = subscriber.subscribe(sub, callback)
    deadline = time.monotonic() + NEXT_RECEIVER_S + 3
    while len(received) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    future.cancel()
    future.result(timeout=30)
    assert received == {b"m0", b"m1", b"m2"}


def test_rest_long_poll_that_disconnects_strands_nothing(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
    serve: Serve,
) -> None:
    topic, sub = _setup(publisher, subscriber, names)
    path = f"/v1/{sub}:pull"
    # The long poll waits (LAKEPUBSUB_PULL_WAIT_S is 2): the client gives up first.
    with (
        httpx.Client(base_url=serve.url, timeout=0.5) as impatient,
        contextlib.suppress(httpx.TimeoutException),
    ):
        impatient.post(path, json={"maxMessages": 10})
    time.sleep(0.2)
    publisher.publish(topic, b"after").result(timeout=30)
    with rest(serve) as client:
        started = time.monotonic()
        got: list[dict[str, Any]] = []
        while not got and time.monotonic() - started < NEXT_RECEIVER_S + 3:
            answer = client.post(path, json={"maxMessages": 10})
            assert answer.status_code == 200, answer.text
            got = answer.json().get("receivedMessages", [])
    assert [m["message"]["data"] for m in got] == ["YWZ0ZXI="]  # base64 of "after"
    assert time.monotonic() - started <= NEXT_RECEIVER_S + 1


def _ping_answered(serve: Serve, sub: str, protocol_version: int) -> bool:
    """Open a stream with ``protocol_version``, send one empty request (a keepalive
    ping) and report whether a response came within two seconds."""
    requests: queue.Queue[Any] = queue.Queue()
    requests.put(
        ps.StreamingPullRequest(
            subscription=sub, stream_ack_deadline_seconds=10, protocol_version=protocol_version
        )
    )

    def request_iter() -> Iterator[Any]:
        while (item := requests.get()) is not None:
            yield ps.StreamingPullRequest.pb(item)

    with grpc.insecure_channel(serve.host) as channel:
        call = channel.stream_stream(
            "/google.pubsub.v1.Subscriber/StreamingPull",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=ps.StreamingPullResponse.pb().FromString,
        )(request_iter())
        responses: queue.Queue[Any] = queue.Queue()

        def read() -> None:
            try:
                for response in call:
                    responses.put(response)
            except grpc.RpcError:
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(0.5)  # the stream is open and waiting for messages
        requests.put(ps.StreamingPullRequest())
        try:
            response = responses.get(timeout=2)
        except queue.Empty:
            response = None
        call.cancel()
        requests.put(None)
        reader.join(timeout=10)
    if response is None:
        return False
    assert list(response.received_messages) == []
    return True


def test_keepalive_pings_are_answered_from_protocol_version_1(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
    serve: Serve,
) -> None:
    _, sub = _setup(publisher, subscriber, names)
    assert _ping_answered(serve, sub, protocol_version=1)
    # Clients that did not ask (Google's Python client) get no empty responses.
    assert not _ping_answered(serve, sub, protocol_version=0)


# The rolling restart: subscriber processes, messages published meanwhile, and how
# late the slowest message may reach a subscriber (far below ACK_DEADLINE_S).
SUBSCRIBER_PROCESSES = 3
RESTART_EVERY_S = 1.5
PUBLISH_EVERY_S = 0.02
MAX_LATENCY_S = 5.0


def _subscriber_process(host: str, sub: str, out: Any, stop: Any) -> None:
    """One subscriber process: Google's client, acks everything, reports arrivals."""
    os.environ["PUBSUB_EMULATOR_HOST"] = host

    def callback(message: Message) -> None:
        out.put((message.data.decode(), time.time()))
        message.ack()

    with pubsub_v1.SubscriberClient() as client:
        future = client.subscribe(sub, callback)
        stop.wait()
        future.cancel()
        future.result(timeout=30)


def test_rolling_restart_of_subscriber_processes(
    publisher: pubsub_v1.PublisherClient,
    subscriber: pubsub_v1.SubscriberClient,
    names: Names,
    serve: Serve,
) -> None:
    topic, sub = _setup(publisher, subscriber, names)
    spawn = multiprocessing.get_context("spawn")
    arrivals: Any = spawn.Queue()
    running: list[tuple[Any, Any]] = []

    def start() -> None:
        stop = spawn.Event()
        process = spawn.Process(target=_subscriber_process, args=(serve.host, sub, arrivals, stop))
        process.start()
        running.append((process, stop))

    for _ in range(SUBSCRIBER_PROCESSES):
        start()
    # The clock starts once a subscriber is up: starting a process that imports
    # Google's client takes seconds on a loaded machine, and is not stranding.
    publisher.publish(topic, b"warm-up").result(timeout=30)
    assert arrivals.get(timeout=120)[0] == "warm-up"
    sent: dict[str, float] = {}
    next_restart = time.monotonic() + RESTART_EVERY_S
    restarts = 0
    while restarts < 2 * SUBSCRIBER_PROCESSES:
        data = f"m{len(sent)}"
        publisher.publish(topic, data.encode()).result(timeout=30)
        sent[data] = time.time()
        time.sleep(PUBLISH_EVERY_S)
        if time.monotonic() >= next_restart:  # the oldest goes, cleanly; a new one comes
            process, stop = running.pop(0)
            stop.set()
            start()
            process.join(timeout=60)
            restarts += 1
            next_restart = time.monotonic() + RESTART_EVERY_S
    first: dict[str, float] = {}
    deadline = time.monotonic() + MAX_LATENCY_S + 5
    while len(first) < len(sent) and time.monotonic() < deadline:
        try:
            data, at = arrivals.get(timeout=0.5)
        except queue.Empty:
            continue
        first.setdefault(data, at)
    for process, stop in running:
        stop.set()
        process.join(timeout=60)
    missing = sorted(set(sent) - set(first))
    assert not missing, f"{len(missing)} of {len(sent)} never arrived: {missing[:10]}"
    latency = {data: first[data] - sent[data] for data in sent}
    slowest = max(latency, key=latency.__getitem__)
    assert latency[slowest] <= MAX_LATENCY_S, f"{slowest} took {latency[slowest]:.1f} s"
