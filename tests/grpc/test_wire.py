"""The gRPC door at the wire: StreamingPull's protocol, flow control, confirmations and
errors, driven through a plain grpcio channel with the message classes Google ships."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.pubsub_v1.types import pubsub as ps
from google.rpc import error_details_pb2, status_pb2
from grpckit import Names, Serve, rest, wait_until

PUB = "/google.pubsub.v1.Publisher/"
SUB = "/google.pubsub.v1.Subscriber/"
StreamingPullRequest = ps.StreamingPullRequest.pb()
StreamingPullResponse = ps.StreamingPullResponse.pb()


class Wire:
    """Unary calls and streams over one channel."""

    def __init__(self, host: str) -> None:
        self.channel = grpc.insecure_channel(host)

    def call(self, path: str, request: Any, response_type: Any, **kwargs: Any) -> Any:
        method = self.channel.unary_unary(
            path,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return method(request, timeout=30, **kwargs)

    def stream(self, first: Any) -> Stream:
        return Stream(self.channel, first)


class Stream:
    """A StreamingPull call: requests go in through ``send``, responses come out of ``next``."""

    def __init__(self, channel: grpc.Channel, first: Any) -> None:
        self.requests: queue.Queue[Any] = queue.Queue()
        self.requests.put(first)
        method = channel.stream_stream(
            SUB + "StreamingPull",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=StreamingPullResponse.FromString,
        )
        self.call = method(self._requests())
        self.responses: queue.Queue[Any] = queue.Queue()
        self.error: grpc.RpcError | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[Any]:
        while True:
            item = self.requests.get()
            if item is None:
                return
            yield item

    def _read(self) -> None:
        try:
            for response in self.call:
                self.responses.put(response)
        except grpc.RpcError as exc:
            self.error = exc
        self.responses.put(None)

    def send(self, request: Any) -> None:
        self.requests.put(request)

    def next(self, timeout_s: float = 15.0) -> Any:
        return self.responses.get(timeout=timeout_s)

    def messages(self, count: int, timeout_s: float = 15.0) -> list[Any]:
        got: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            try:
                response = self.next(max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if response is None:
                break
            got += list(response.received_messages)
        return got

    def close(self) -> None:
        self.call.cancel()
        self.requests.put(None)
        self._reader.join(10)


@pytest.fixture
def wire(emulator: Serve) -> Iterator[Wire]:
    w = Wire(emulator.host)
    yield w
    w.channel.close()


def make(wire: Wire, names: Names, **sub_options: Any) -> tuple[str, str]:
    topic = wire.call(PUB + "CreateTopic", ps.Topic.pb()(name=names.topic()), ps.Topic.pb()).name
    sub = ps.Subscription.pb()(name=names.subscription(), topic=topic, **sub_options)
    wire.call(SUB + "CreateSubscription", sub, ps.Subscription.pb())
    return topic, sub.name


def publish(wire: Wire, topic: str, count: int, size: int = 10) -> list[str]:
    message = ps.PubsubMessage.pb()
    request = ps.PublishRequest.pb()(
        topic=topic,
        messages=[message(data=str(i).encode().ljust(size, b".")) for i in range(count)],
    )
    return list(wire.call(PUB + "Publish", request, ps.PublishResponse.pb()).message_ids)


def first_request(sub: str, **fields: Any) -> Any:
    fields.setdefault("stream_ack_deadline_seconds", 60)
    return StreamingPullRequest(subscription=sub, **fields)


def test_malformed_protobuf_and_unknown_method(wire: Wire, names: Names) -> None:
    raw = wire.channel.unary_unary(PUB + "Publish")
    with pytest.raises(grpc.RpcError) as failure:
        raw(b"\xff\xff\xff\xff", timeout=10)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed" in (failure.value.details() or "")
    unknown = wire.channel.unary_unary(PUB + "NoSuchMethod")
    with pytest.raises(grpc.RpcError) as failure:
        unknown(b"", timeout=10)
    assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_oversized_and_invalid_publish_change_nothing(wire: Wire, names: Names) -> None:
    topic, sub = make(wire, names)
    message = ps.PubsubMessage.pb()
    too_big = ps.PublishRequest.pb()(topic=topic, messages=[message(data=b"x" * 10_500_000)])
    with pytest.raises(grpc.RpcError) as failure:
        wire.call(PUB + "Publish", too_big, ps.PublishResponse.pb())
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad_attr = ps.PublishRequest.pb()(
        topic=topic, messages=[message(data=b"ok"), message(attributes={"": "v"})]
    )
    with pytest.raises(grpc.RpcError) as failure:
        wire.call(PUB + "Publish", bad_attr, ps.PublishResponse.pb())
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    pulled = wire.call(
        SUB + "Pull",
        ps.PullRequest.pb()(subscription=sub, max_messages=10),
        ps.PullResponse.pb(),
    )
    assert list(pulled.received_messages) == []


def test_streaming_pull_bad_first_requests(wire: Wire, names: Names) -> None:
    _, sub = make(wire, names)
    for request, code in [
        (StreamingPullRequest(stream_ack_deadline_seconds=10), grpc.StatusCode.INVALID_ARGUMENT),
        (first_request(sub, stream_ack_deadline_seconds=5), grpc.StatusCode.INVALID_ARGUMENT),
        (first_request(names.subscription("nope")), grpc.StatusCode.NOT_FOUND),
        (first_request("garbage"), grpc.StatusCode.INVALID_ARGUMENT),
    ]:
        stream = wire.stream(request)
        assert stream.next() is None
        assert stream.error is not None and stream.error.code() == code, request
        stream.close()


def test_server_side_flow_control(wire: Wire, names: Names) -> None:
    topic, sub = make(wire, names)
    publish(wire, topic, 50)
    stream = wire.stream(first_request(sub, max_outstanding_messages=10))
    try:
        got = stream.messages(10)
        assert len(got) == 10
        assert stream.messages(1, timeout_s=1.5) == []  # no room until something is acked
        stream.send(StreamingPullRequest(ack_ids=[m.ack_id for m in got[:4]]))
        more = stream.messages(4)
        assert len(more) == 4
        assert stream.messages(1, timeout_s=1.0) == []
        # A nack (deadline 0) frees room as well, and the message comes back.
        stream.send(
            StreamingPullRequest(
                modify_deadline_ack_ids=[got[4].ack_id], modify_deadline_seconds=[0]
            )
        )
        again = stream.messages(1)
        assert len(again) == 1
        assert again[0].message.message_id == got[4].message.message_id
        assert again[0].delivery_attempt == 0  # reported only with a dead-letter policy
    finally:
        stream.close()


def test_unary_acks_free_room_of_streams(wire: Wire, names: Names) -> None:
    """Google's clients ack through the unary Acknowledge call, not on the stream."""
    topic, sub = make(wire, names)
    publish(wire, topic, 30)
    stream = wire.stream(first_request(sub, max_outstanding_messages=10))
    try:
        got = stream.messages(10)
        request = ps.AcknowledgeRequest.pb()(subscription=sub, ack_ids=[m.ack_id for m in got])
        wire.call(SUB + "Acknowledge", request, ps.PullResponse.pb())
        assert len(stream.messages(10)) == 10
    finally:
        stream.close()


def _unchanged_count(serve: Serve) -> float:
    with rest(serve) as http:
        text = http.get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("lakepubsub_deadline_changes_"))
    return float(line.split()[-1])


def test_receipt_deadline_changes_take_no_dispatcher_cycle(
    wire: Wire, names: Names, emulator: Serve
) -> None:
    """A deadline change that would leave a stream's lease as it is (Google's clients
    send one for every message received, often after its ack) is answered without
    a dispatcher cycle; one that changes the lease still reaches it and takes effect."""
    topic, sub = make(wire, names)
    publish(wire, topic, 3)
    stream = wire.stream(first_request(sub))
    try:
        got = stream.messages(3)
        assert len(got) == 3
        m0, m1, m2 = (m.ack_id for m in got)
        start = _unchanged_count(emulator)

        def modack(ack_ids: list[str], seconds: int) -> None:
            request = ps.ModifyAckDeadlineRequest.pb()(
                subscription=sub, ack_ids=ack_ids, ack_deadline_seconds=seconds
            )
            wire.call(SUB + "ModifyAckDeadline", request, ps.PullResponse.pb())

        modack([m0, m1], 60)  # the stream's own deadline, a moment later: unchanged
        assert _unchanged_count(emulator) == start + 2
        request = ps.AcknowledgeRequest.pb()(subscription=sub, ack_ids=[m1])
        wire.call(SUB + "Acknowledge", request, ps.PullResponse.pb())
        modack([m1], 60)  # after the ack: nothing left to change
        stream.send(
            StreamingPullRequest(modify_deadline_ack_ids=[m2], modify_deadline_seconds=[60])
        )
        assert wait_until(lambda: _unchanged_count(emulator) == start + 4, timeout_s=10)
        modack([m0], 10)  # shorter than the lease: the dispatcher must write it
        modack([m2], 600)  # longer: the same
        assert _unchanged_count(emulator) == start + 4
        with pytest.raises(grpc.RpcError) as failure:
            modack([m2], 601)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # m0's lease now ends in 10 s, not the stream's 60: it comes back.
        again = stream.messages(1, timeout_s=20)
        assert [m.message.message_id for m in again] == [got[0].message.message_id]
    finally:
        stream.close()
    other = wire.stream(first_request(sub))
    try:
        assert other.messages(1, timeout_s=3) == []  # m2 lasts 600 s; m0 leased again; m1 acked
    finally:
        other.close()


def test_exactly_once_confirmations_on_the_stream(wire: Wire, names: Names) -> None:
    topic, sub = make(wire, names, enable_exactly_once_delivery=True, enable_message_ordering=True)
    publish(wire, topic, 3)
    stream = wire.stream(first_request(sub))
    try:
        got = stream.messages(3)
        assert len(got) == 3
        stale = got[0].ack_id
        stream.send(
            StreamingPullRequest(modify_deadline_ack_ids=[stale], modify_deadline_seconds=[0])
        )
        modack = stream.next()
        assert list(modack.modify_ack_deadline_confirmation.ack_ids) == [stale]
        assert modack.subscription_properties.exactly_once_delivery_enabled
        assert modack.subscription_properties.message_ordering_enabled
        fresh = stream.messages(1)[0]
        assert fresh.ack_id != stale
        stream.send(StreamingPullRequest(ack_ids=[stale, fresh.ack_id, "bogus", got[1].ack_id]))
        confirmation = stream.next().acknowledge_confirmation
        assert sorted(confirmation.ack_ids) == sorted([fresh.ack_id, got[1].ack_id])
        assert sorted(confirmation.invalid_ack_ids) == sorted([stale, "bogus"])
    finally:
        stream.close()


def test_unary_exactly_once_failure_has_error_info(wire: Wire, names: Names) -> None:
    topic, sub = make(wire, names, enable_exactly_once_delivery=True)
    publish(wire, topic, 1)
    pulled = wire.call(
        SUB + "Pull", ps.PullRequest.pb()(subscription=sub, max_messages=1), ps.PullResponse.pb()
    )
    ack_id = pulled.received_messages[0].ack_id
    request = ps.AcknowledgeRequest.pb()(subscription=sub, ack_ids=[ack_id])
    wire.call(SUB + "Acknowledge", request, ps.PullResponse.pb())
    with pytest.raises(grpc.RpcError) as failure:
        wire.call(SUB + "Acknowledge", request, ps.PullResponse.pb())
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(failure.value.trailing_metadata() or ())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "EXACTLY_ONCE_ACKID_FAILURE"
    assert info.metadata[ack_id] == "PERMANENT_FAILURE_INVALID_ACK_ID"


def test_closed_stream_redelivers_after_its_deadline(wire: Wire, names: Names) -> None:
    topic, sub = make(wire, names)
    publish(wire, topic, 1)
    stream = wire.stream(first_request(sub, stream_ack_deadline_seconds=10))
    first = stream.messages(1)
    stream.close()
    assert len(first) == 1
    started = time.monotonic()
    second = wire.stream(first_request(sub, stream_ack_deadline_seconds=10))
    try:
        again = second.messages(1, timeout_s=20)
    finally:
        second.close()
    assert [m.message.message_id for m in again] == [first[0].message.message_id]
    assert time.monotonic() - started > 5  # not before the lease ran out
    assert again[0].delivery_attempt == 0  # reported only with a dead-letter policy


def test_stream_sees_truncation_event_first(wire: Wire, names: Names, emulator: Serve) -> None:
    topic, sub = make(wire, names)
    publish(wire, topic, 4)
    project, _, sub_id = sub.split("/")[1:]
    with rest(emulator) as http:
        assert http.post(f"/v1/projects/{project}/subscriptions/{sub_id}:truncate").is_success
    publish(wire, topic, 1)
    stream = wire.stream(first_request(sub))
    try:
        got = stream.messages(2)
    finally:
        stream.close()
    assert got[0].message.attributes["lakepubsub.event"] == "truncated"
    assert got[0].message.attributes["lakepubsub.first_offset"] == "0"
    assert got[0].message.attributes["lakepubsub.end_offset"] == "4"
    assert got[1].message.data.startswith(b"0")


def test_shutdown_ends_streams_with_unavailable(wire: Wire, names: Names, emulator: Serve) -> None:
    _, sub = make(wire, names)
    stream = wire.stream(first_request(sub))
    time.sleep(0.5)
    emulator.process.terminate()
    try:
        assert stream.next(timeout_s=30) is None
        assert stream.error is not None
        assert stream.error.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stream.close()
    # uvicorn re-raises the SIGTERM once it has shut down cleanly.
    assert emulator.process.wait(timeout=30) in (0, -15)
    assert "Traceback" not in emulator.log()


@pytest.mark.parametrize("exactly_once", [False, True])
def test_a_malformed_ack_id_gets_one_answer_on_both_doors(
    emulator: Serve, wire: Wire, names: Names, exactly_once: bool
) -> None:
    """A malformed ack id is an invalid ack id (ackids.split_malformed): the request's
    other ids take effect, and the answer is INVALID_ARGUMENT whose ErrorInfo names it
    PERMANENT_FAILURE_INVALID_ACK_ID, on REST and on gRPC, for acks and deadline changes;
    on a stream with exactly-once it is among the confirmation's invalid_ack_ids."""
    topic, sub = make(wire, names, enable_exactly_once_delivery=exactly_once)
    publish(wire, topic, 3)
    pull = ps.PullRequest.pb()(subscription=sub, max_messages=3)
    got: list[Any] = []
    while len(got) < 3:
        got += wire.call(SUB + "Pull", pull, ps.PullResponse.pb()).received_messages
    bad = "not-an-ack-id"
    path = f"/v1/{sub}"
    with rest(emulator) as http:
        for verb, extra in (("modifyAckDeadline", {"ackDeadlineSeconds": 30}), ("acknowledge", {})):
            body = {"ackIds": [got[0].ack_id, bad], **extra}
            answer = http.post(f"{path}:{verb}", json=body)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["status"] == "INVALID_ARGUMENT"
            assert error["details"][0]["metadata"] == {bad: "PERMANENT_FAILURE_INVALID_ACK_ID"}
        # The well-formed id took effect: with exactly-once, a second ack of it fails.
        again = http.post(f"{path}:acknowledge", json={"ackIds": [got[0].ack_id]})
        assert again.status_code == (400 if exactly_once else 200), again.text
    for method, request in (
        ("ModifyAckDeadline", ps.ModifyAckDeadlineRequest.pb()(
            subscription=sub, ack_ids=[got[1].ack_id, bad], ack_deadline_seconds=30)),
        ("Acknowledge", ps.AcknowledgeRequest.pb()(subscription=sub, ack_ids=[got[1].ack_id, bad])),
    ):  # fmt: skip
        with pytest.raises(grpc.RpcError) as failure:
            wire.call(SUB + method, request, ps.PullResponse.pb())
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        trailers = dict(failure.value.trailing_metadata() or ())
        status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        info = error_details_pb2.ErrorInfo()
        assert status.details[0].Unpack(info)
        assert dict(info.metadata) == {bad: "PERMANENT_FAILURE_INVALID_ACK_ID"}
    # On a stream the malformed id fails alone and the stream goes on.
    stream = wire.stream(first_request(sub))
    try:
        stream.send(StreamingPullRequest(ack_ids=[bad, got[2].ack_id]))
        if exactly_once:
            confirmation = stream.next().acknowledge_confirmation
            assert list(confirmation.invalid_ack_ids) == [bad]
            assert list(confirmation.ack_ids) == [got[2].ack_id]
        publish(wire, topic, 1)
        (fresh,) = stream.messages(1)
        assert fresh.message.data.startswith(b"0")
    finally:
        stream.close()
