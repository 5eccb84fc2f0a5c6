"""Push with the subscription policies (ordering, retry, dead letter), endpoint
authentication, and several dispatcher processes on one lake, one of them killed."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import httpx
import jwt
import pytest
from pushkit import (
    ACK,
    PUSH_ENV,
    Delivery,
    Endpoint,
    P,
    Reply,
    always,
    b64,
    create_push,
    publish,
)
from support import LakeSpec, Server, start_server, stop_server

from lakepubsub import Engine, SubscriptionName, TopicName

ORDERED_KEYS = ("alpha", "beta", "gamma")


def verify(token: str, server_url: str, audience: str) -> dict[str, object]:
    """Check a push token the way an endpoint would: against the server's JWKS."""
    kid = jwt.get_unverified_header(token)["kid"]
    if kid not in _KEYS:
        jwks = httpx.get(f"{server_url}/.well-known/jwks.json").json()
        _KEYS.update({k.key_id: k for k in jwt.PyJWKSet.from_dict(jwks).keys})
    key = _KEYS[kid]
    return jwt.decode(token, key.key, algorithms=["RS256", "ES256"], audience=audience)  # type: ignore[no-any-return]


_KEYS: dict[str | None, jwt.PyJWK] = {}


def test_ordering_keys_are_pushed_in_order_one_at_a_time(
    http: httpx.Client, endpoint: Endpoint
) -> None:
    def flaky(delivery: Delivery) -> Reply:
        seq = int(delivery.data.split(b"-")[1])
        return Reply(500 if seq % 4 == 1 and delivery.nth == 1 else ACK, delay_s=0.02)

    endpoint.behaviour = flaky
    create_push(http, "ordered", endpoint.url(), enableMessageOrdering=True)
    messages = [
        {"data": b64(f"{key}-{seq}".encode()), "orderingKey": key}
        for seq in range(12)
        for key in ORDERED_KEYS
    ]
    response = http.post(f"{P}/topics/ordered-topic:publish", json={"messages": messages})
    assert response.status_code == 200
    endpoint.wait_for(lambda ds: len([d for d in ds if d.status == ACK]) >= 36, timeout_s=60)
    by_key: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in endpoint.snapshot():
        by_key[delivery.doc["message"]["orderingKey"]].append(delivery)
    for key, deliveries in by_key.items():
        seqs = [int(d.data.split(b"-")[1]) for d in deliveries]
        assert seqs == sorted(seqs), f"{key}: never a later message before an earlier one"
        acked = [int(d.data.split(b"-")[1]) for d in deliveries if d.status == ACK]
        assert acked == list(range(12)), f"{key}: each acknowledged once, in order"
        assert any(d.status == 500 for d in deliveries), "and the nacked ones came back first"
        for earlier, later in itertools.pairwise(deliveries):
            assert later.at >= earlier.finished, f"{key}: one push at a time"


def test_retry_policy_spaces_redeliveries(http: httpx.Client, endpoint: Endpoint) -> None:
    endpoint.behaviour = lambda d: Reply(500 if d.nth <= 2 else ACK)
    create_push(
        http,
        "retrying",
        endpoint.url(),
        retryPolicy={"minimumBackoff": "1s", "maximumBackoff": "5s"},
    )
    [message_id] = publish(http, 1, "retrying-topic")
    endpoint.wait_acked({message_id}, timeout_s=20)
    first, second, third = endpoint.snapshot()[:3]
    assert second.at - first.at >= 0.95, "1 s after the first failure"
    assert third.at - second.at >= 1.95, "2 s after the second"
    assert first.message_id == second.message_id == third.message_id == message_id
    assert "deliveryAttempt" not in first.doc  # set only with a dead-letter policy


def test_dead_letter_policy_applies_to_push(http: httpx.Client, endpoint: Endpoint) -> None:
    endpoint.behaviour = always(500)
    create_push(http, "dlq-reader", None, topic="dead-letters")
    create_push(
        http,
        "doomed-push",
        endpoint.url(),
        deadLetterPolicy={
            "deadLetterTopic": "projects/demo/topics/dead-letters",
            "maxDeliveryAttempts": 5,
        },
    )
    [message_id] = publish(http, 1, "doomed-push-topic", prefix="poison")
    received: list[dict[str, object]] = []
    deadline = time.monotonic() + 30
    while not received and time.monotonic() < deadline:
        received = (
            http.post(
                f"{P}/subscriptions/dlq-reader:pull",
                json={"maxMessages": 1, "returnImmediately": True},
            )
            .json()
            .get("receivedMessages", [])
        )
        time.sleep(0.2)
    assert received, "the message reached the dead-letter topic"
    time.sleep(1.0)
    tries = [d for d in endpoint.snapshot() if d.message_id == message_id]
    assert [d.attempt for d in tries] == [1, 2, 3, 4, 5]


def test_oidc_tokens_verify_against_the_servers_jwks(
    server: Server, http: httpx.Client, endpoint: Endpoint
) -> None:
    email = "pusher@demo.iam.gserviceaccount.com"
    create_push(
        http,
        "signed",
        endpoint.url("/aud"),
        topic="signed",
        pushConfig={"oidcToken": {"serviceAccountEmail": email, "audience": "https://me.example"}},
    )
    create_push(
        http,
        "signed-default",
        endpoint.url("/default"),
        topic="signed",
        pushConfig={"oidcToken": {"serviceAccountEmail": email}},
    )
    publish(http, 2, "signed")
    endpoint.wait_for(lambda ds: len([d for d in ds if d.status == ACK]) >= 4, timeout_s=15)
    for delivery in endpoint.snapshot():
        scheme, _, token = delivery.headers["authorization"].partition(" ")
        assert scheme == "Bearer"
        audience = "https://me.example" if delivery.path == "/aud" else endpoint.url("/default")
        claims = verify(token, server.url, audience)
        assert claims["email"] == email
        assert claims["email_verified"] is True
        assert claims["iss"] == "lakepubsub"
        assert int(claims["exp"]) - int(claims["iat"]) == 3600  # type: ignore[call-overload]
        with pytest.raises(jwt.InvalidAudienceError):
            verify(token, server.url, "https://someone-else.example")
    discovery = httpx.get(f"{server.url}/.well-known/openid-configuration").json()
    assert discovery["jwks_uri"] == f"{server.url}/.well-known/jwks.json"


def test_configured_authorization_header(local_lake: LakeSpec, endpoint: Endpoint) -> None:
    header = {endpoint.url("/basic"): "Basic dXNlcjpwYXNz"}
    env = {**PUSH_ENV, "LAKEPUBSUB_PUSH_AUTHORIZATION": json.dumps(header)}
    server = start_server(local_lake, extra_env=env)
    try:
        with server.client() as http:
            create_push(http, "basic", endpoint.url("/basic"), topic="auth-header")
            create_push(http, "other", endpoint.url("/other"), topic="auth-header")
            publish(http, 1, "auth-header")
            endpoint.wait_for(lambda ds: len(ds) >= 2, timeout_s=15)
    finally:
        stop_server(server)
    by_path = {d.path: d for d in endpoint.snapshot()}
    assert by_path["/basic"].headers["authorization"] == "Basic dXNlcjpwYXNz"
    assert "authorization" not in by_path["/other"].headers


# -- several dispatchers on one lake, one killed -------------------------------------------


def start_dispatcher(lake: LakeSpec, issuer: str) -> subprocess.Popen[bytes]:
    env = {
        **lake.env(),
        **PUSH_ENV,
        "LAKEPUBSUB_PULL_WAIT_S": "2",
        "LAKEPUBSUB_PUSH_ISSUER": issuer,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "lakepubsub.cli", "--lake", lake.uri, "push"],
        env=env,
        stdout=subprocess.DEVNULL,
    )


def test_dispatchers_share_the_work_and_a_crash_loses_nothing(
    local_lake: LakeSpec, endpoint: Endpoint
) -> None:
    endpoint.behaviour = always(ACK, delay_s=0.05)
    email = "worker@demo.iam.gserviceaccount.com"
    server = start_server(local_lake, extra_env={**PUSH_ENV, "LAKEPUBSUB_PUSH_ISSUER": "api"})
    doomed = start_dispatcher(local_lake, "doomed")
    survivor: subprocess.Popen[bytes] | None = None
    try:
        with server.client() as http:
            create_push(
                http,
                "shared",
                endpoint.url(),
                pushConfig={"oidcToken": {"serviceAccountEmail": email}},
            )
            time.sleep(2.0)  # the standalone dispatcher is up and polling
            ids = publish(http, 600, "shared-topic")
            endpoint.wait_for(lambda ds: len(ds) >= 150, timeout_s=30)
            os.kill(doomed.pid, signal.SIGKILL)  # mid-delivery: its leases are in flight
            doomed.wait()
            survivor = start_dispatcher(local_lake, "survivor")
            endpoint.wait_acked(set(ids), timeout_s=60)
            # The endpoint answered everything; the lake must record every ack too,
            # including those the killed dispatcher never sent (after its leases expire).
            with Engine(local_lake.settings()) as engine:
                name = SubscriptionName("demo", "shared")
                head = engine.topic_head(TopicName("demo", "shared-topic"))
                deadline = time.monotonic() + 40
                while time.monotonic() < deadline:
                    state = engine.subscription_state(name)
                    if state.outstanding() == 0 and state.floor() == head:
                        break
                    time.sleep(0.5)
                assert state.outstanding() == 0 and state.floor() == head
            issuers = {
                str(verify(d.headers["authorization"][7:], server.url, endpoint.url())["iss"])
                for d in endpoint.snapshot()
            }
    finally:
        for process in (doomed, survivor):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
        stop_server(server)
    assert {"api", "doomed"} <= issuers, "both dispatchers pushed (and their keys verify)"
    by_id: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in endpoint.snapshot():
        by_id[delivery.message_id].append(delivery)
    for message_id, deliveries in by_id.items():
        deliveries.sort(key=lambda d: d.at)
        for earlier, later in itertools.pairwise(deliveries):
            assert later.at >= earlier.finished, f"{message_id} was pushed twice at once"
    assert len(by_id) == 600
    assert any(len(d) > 1 for d in by_id.values()), "the crash cut deliveries short"
