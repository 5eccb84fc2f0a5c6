"""Push delivery end to end: a real server pushes to real local endpoints."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from pushkit import (
    ACK,
    PUSH_ENV,
    Delivery,
    Endpoint,
    P,
    Reply,
    always,
    create_push,
    publish,
    set_push,
)
from support import LakeSpec, MotoServer, start_server, stop_server

from lakepubsub import Engine, SubscriptionName

ACK_CODES = (102, 200, 201, 202, 204)
NACK_CODES = (302, 400, 404, 409, 500)


def outstanding(engine: Engine, sub: str) -> int:
    return engine.subscription_state(SubscriptionName("demo", sub)).outstanding()


def test_delivers_the_seed_003_envelope_and_acks(
    http: httpx.Client, endpoint: Endpoint, lake_engine: Engine
) -> None:
    create_push(http, "envelope", endpoint.url())
    ids = publish(http, 40, "envelope-topic", attributes={"kind": "order"}, orderingKey="k1")
    endpoint.wait_acked(set(ids), timeout_s=15)
    first = next(d for d in endpoint.snapshot() if d.message_id == ids[0])
    doc = first.doc
    assert doc["subscription"] == "projects/demo/subscriptions/envelope"
    assert "deliveryAttempt" not in doc  # set only with a dead-letter policy
    message = doc["message"]
    assert first.data == b"m0"
    assert message["attributes"] == {"kind": "order"}
    assert message["messageId"] == message["message_id"] == ids[0]
    assert message["publishTime"] == message["publish_time"]
    assert message["publishTime"].endswith("Z")
    assert message["orderingKey"] == "k1"
    assert first.headers["content-type"] == "application/json"
    assert "authorization" not in first.headers
    # Acknowledged means gone: no redelivery, nothing outstanding in the lease table.
    time.sleep(1.5)
    assert sorted(d.message_id for d in endpoint.snapshot()) == sorted(ids)
    assert outstanding(lake_engine, "envelope") == 0


def test_seed_003_success_codes_ack_and_every_other_status_nacks(
    http: httpx.Client, endpoint: Endpoint, lake_engine: Engine
) -> None:
    def behaviour(delivery: Delivery) -> Reply:
        code = int(delivery.path.strip("/"))
        if code == 102:
            return Reply(raw=b"HTTP/1.1 102 Processing\r\n\r\n")
        if code in NACK_CODES and delivery.nth == 1:
            return Reply(code)
        return Reply(code if code in ACK_CODES else ACK)

    endpoint.behaviour = behaviour
    for code in (*ACK_CODES, *NACK_CODES):
        create_push(http, f"code-{code}", endpoint.url(f"/{code}"), topic="codes")
    ids = publish(http, 3, "codes")
    endpoint.wait_for(
        lambda ds: len([d for d in ds if d.status in ACK_CODES]) >= 3 * len(ACK_CODES + NACK_CODES),
        timeout_s=30,
    )
    time.sleep(1.0)
    seen = endpoint.snapshot()
    for code in ACK_CODES:
        tries = [d for d in seen if d.path == f"/{code}"]
        assert sorted(d.message_id for d in tries) == sorted(ids), f"{code} acks at once"
        assert outstanding(lake_engine, f"code-{code}") == 0
    for code in NACK_CODES:
        for message_id in ids:
            tries = [d for d in seen if d.path == f"/{code}" and d.message_id == message_id]
            assert [d.status for d in tries] == [code, ACK], f"{code} is a nack"


def test_a_slow_endpoint_times_out_at_the_ack_deadline(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    endpoint.behaviour = lambda d: Reply(ACK, delay_s=12.0 if d.nth == 1 else 0.0)
    create_push(http, "slow", endpoint.url(), ackDeadlineSeconds=10)
    [message_id] = publish(http, 1, "slow-topic")
    endpoint.wait_for(lambda ds: len(ds) >= 2, timeout_s=30)
    first, second = endpoint.snapshot()[:2]
    assert second.message_id == first.message_id == message_id
    waited = second.at - first.at
    assert 8.0 <= waited <= 12.0, f"redelivered {waited:.1f}s after a push that hung"
    endpoint.wait_acked({message_id}, timeout_s=5)


def test_connection_errors_nack_until_a_new_endpoint_takes_them(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    dead = Endpoint()
    dead_url = dead.url()
    dead.close()  # nothing listens there any more: connection refused
    create_push(http, "moving", dead_url)
    ids = publish(http, 5, "moving-topic")
    time.sleep(1.5)  # refused pushes are nacked (and backed off), not lost
    set_push(http, "moving", endpoint.url())
    endpoint.wait_acked(set(ids), timeout_s=20)


def test_empty_push_config_pauses_and_pull_takes_over(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    create_push(http, "switch", endpoint.url())
    set_push(http, "switch", None)
    # The dispatcher sees the change within a second on a quiet machine; a loaded
    # one (CI beside other runs) has needed more.
    time.sleep(3.0)
    held = publish(http, 5, "switch-topic", prefix="held")
    time.sleep(1.5)
    assert endpoint.snapshot() == [], "a paused subscription is not pushed"
    pulled = http.post(
        f"{P}/subscriptions/switch:pull", json={"maxMessages": 10, "returnImmediately": True}
    ).json()["receivedMessages"]
    assert sorted(r["message"]["messageId"] for r in pulled) == sorted(held)
    http.post(
        f"{P}/subscriptions/switch:acknowledge", json={"ackIds": [r["ackId"] for r in pulled]}
    )
    later = publish(http, 3, "switch-topic", prefix="later")
    set_push(http, "switch", endpoint.url())
    endpoint.wait_acked(set(later), timeout_s=15)
    assert not ({d.message_id for d in endpoint.snapshot()} & set(held))


def test_truncation_events_are_pushed_marked(http: httpx.Client, endpoint: Endpoint) -> None:
    create_push(http, "trunc", None)
    publish(http, 4, "trunc-topic")
    event = http.post(f"{P}/subscriptions/trunc:truncate").json()["event"]
    assert event["truncated"] is True
    set_push(http, "trunc", endpoint.url())
    endpoint.wait_for(lambda ds: any(d.status == ACK for d in ds), timeout_s=15)
    time.sleep(0.5)
    [pushed] = endpoint.snapshot()
    doc = pushed.doc
    assert doc["event"]["truncated"] is True
    assert doc["event"]["endOffset"] == event["endOffset"]
    assert doc["message"]["attributes"]["lakepubsub.event"] == "truncated"
    assert doc["message"]["messageId"] == doc["message"]["message_id"]
    assert doc["subscription"] == "projects/demo/subscriptions/trunc"
    assert "data" not in doc["message"]


def test_no_wrapper_sends_raw_data_and_metadata_headers(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    meta_config = {"noWrapper": {"writeMetadata": True}}
    create_push(http, "raw-meta", endpoint.url("/meta"), "raw", pushConfig=meta_config)
    create_push(http, "raw-plain", endpoint.url("/plain"), "raw", pushConfig={"noWrapper": {}})
    attributes = {"color": "blue", "Authorization": "Bearer x", "x-goog-pubsub-message-id": "x"}
    [message_id] = publish(http, 1, "raw", attributes=attributes, orderingKey="key-1")
    endpoint.wait_for(lambda ds: len(ds) >= 2, timeout_s=15)
    by_path = {d.path: d for d in endpoint.snapshot()}
    meta, plain = by_path["/meta"], by_path["/plain"]
    for delivery in (meta, plain):
        assert delivery.body == b"m0"
        assert delivery.headers["content-type"] == "application/octet-stream"
        assert "authorization" not in delivery.headers, "attributes never set our headers"
    assert meta.headers["color"] == "blue"
    assert meta.headers["x-goog-pubsub-message-id"] == message_id
    assert meta.headers["x-goog-pubsub-subscription-name"] == "projects/demo/subscriptions/raw-meta"
    assert "x-goog-pubsub-delivery-attempt" not in meta.headers  # no dead-letter policy
    assert meta.headers["x-goog-pubsub-ordering-key"] == "key-1"
    assert meta.headers["x-goog-pubsub-publish-time"].endswith("Z")
    assert "color" not in plain.headers
    assert "x-goog-pubsub-message-id" not in plain.headers


def test_bounded_response_reading(http: httpx.Client, endpoint: Endpoint) -> None:
    huge = b"x" * (8 * 1024 * 1024)
    endpoint.behaviour = lambda _: Reply(200, body=huge)
    create_push(http, "chatty", endpoint.url())
    ids = publish(http, 3, "chatty-topic")
    endpoint.wait_for(lambda ds: {d.message_id for d in ds} >= set(ids), timeout_s=15)
    time.sleep(1.5)
    assert [d.nth for d in endpoint.snapshot()] == [1, 1, 1], "acked without reading 8 MB"


def test_deleted_subscription_is_no_longer_pushed(http: httpx.Client, endpoint: Endpoint) -> None:
    create_push(http, "doomed", endpoint.url())
    first = publish(http, 2, "doomed-topic")
    endpoint.wait_acked(set(first), timeout_s=15)
    assert http.delete(f"{P}/subscriptions/doomed").status_code == 200
    publish(http, 2, "doomed-topic")
    time.sleep(1.5)
    assert len(endpoint.snapshot()) == 2


def test_per_endpoint_concurrency_limit(local_lake: LakeSpec, endpoint: Endpoint) -> None:
    env = {**PUSH_ENV, "LAKEPUBSUB_PUSH_ENDPOINT_CONCURRENCY": "3"}
    server = start_server(local_lake, extra_env=env)
    try:
        endpoint.behaviour = always(ACK, delay_s=0.1)
        with server.client() as http:
            # Two subscriptions on one endpoint share its limit.
            create_push(http, "limited-a", endpoint.url("/a"), "limited")
            create_push(http, "limited-b", endpoint.url("/b"), "limited")
            publish(http, 30, "limited")
            endpoint.wait_for(lambda ds: len([d for d in ds if d.status]) >= 60, timeout_s=30)
    finally:
        stop_server(server)
    peak = max(d.concurrent for d in endpoint.snapshot())
    assert 2 <= peak <= 3


def test_unsafe_endpoints_are_refused(local_lake: LakeSpec, endpoint: Endpoint) -> None:
    server = start_server(
        local_lake, extra_env={**PUSH_ENV, "LAKEPUBSUB_PUSH_ALLOW_LOOPBACK": "false"}
    )
    try:
        with server.client() as http, Engine(local_lake.settings()) as engine:
            create_push(http, "loopback", endpoint.url(), "unsafe")
            create_push(http, "metadata", "http://169.254.169.254/latest/", "unsafe")
            create_push(http, "private", "https://10.1.2.3/push", "unsafe")
            publish(http, 3, "unsafe")
            time.sleep(2.0)
            assert endpoint.snapshot() == []
            for sub in ("loopback", "metadata", "private"):
                state = engine.subscription_state(SubscriptionName("demo", sub))
                assert state.outstanding() >= 1, f"{sub}: refused, so nacked, not dropped"
    finally:
        stop_server(server)


@pytest.mark.s3
def test_push_on_s3(moto_server: MotoServer, endpoint: Endpoint) -> None:
    lake = LakeSpec(f"s3://{moto_server.bucket}/{uuid.uuid4().hex}", moto_server.storage_options)
    server = start_server(lake, extra_env=PUSH_ENV)
    try:
        with server.client() as http:
            create_push(http, "on-s3", endpoint.url())
            ids = publish(http, 20, "on-s3-topic")
            endpoint.wait_acked(set(ids), timeout_s=30)
    finally:
        stop_server(server)
