"""Endpoint rules, envelopes, settings and token signing, without a server."""

from __future__ import annotations

import asyncio
import dataclasses

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from lakepubsub import errors
from lakepubsub.messages import Message, ReceivedMessage, TruncationEvent
from lakepubsub.push import envelope
from lakepubsub.push.oidc import Signer, generate_pem
from lakepubsub.push.safety import Guard, UnsafeEndpoint, parse_endpoint
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import DeadLetterPolicy, PushConfig, Subscription
from lakepubsub.settings.push import PushSettings


def check(url: str, **settings: object) -> None:
    endpoint = parse_endpoint(url)
    asyncio.run(Guard(PushSettings(**settings)).resolve(endpoint.origin))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        "https://8.8.8.8/push",
        "https://[2001:4860:4860::8888]:8443/push?token=x",
        "http://127.0.0.1:8080/push",
        "http://[::1]/push",
        "http://localhost:9000/",
    ],
)
def test_allowed_endpoints(url: str) -> None:
    check(url)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://8.8.8.8/", "https"),
        ("https://user:pw@8.8.8.8/", "credentials"),
        ("https:///nohost", "host"),
        ("http://8.8.8.8/", "plain http"),
        ("https://10.1.2.3/", "non-public"),
        ("https://172.16.0.1/", "non-public"),
        ("https://192.168.1.1/", "non-public"),
        ("https://100.64.0.1/", "non-public"),
        ("https://169.254.10.10/", "non-public"),
        ("https://169.254.169.254/latest/meta-data", "metadata"),
        ("https://[fd00:ec2::254]/", "metadata"),
        ("https://metadata.google.internal/", "metadata"),
        ("https://[fe80::1]/", "non-public"),
        ("https://[::ffff:10.0.0.1]/", "non-public"),
        ("https://[64:ff9b::a00:1]/", "non-public"),
        ("https://0.0.0.0/", "non-public"),
        ("https://224.0.0.1/", "non-public"),
        ("https://" + "a" * 3000 + ".com/", "longer"),
    ],
)
def test_refused_endpoints(url: str, reason: str) -> None:
    with pytest.raises(UnsafeEndpoint, match=reason):
        check(url)


def test_loopback_can_be_turned_off() -> None:
    with pytest.raises(UnsafeEndpoint, match="loopback"):
        check("http://127.0.0.1:8080/", allow_loopback=False)


def test_allow_lists() -> None:
    check("https://10.1.2.3/", allow_networks=("10.0.0.0/8",))
    check("http://10.1.2.3/", allow_networks=("10.0.0.0/8",), allow_http_hosts=("10.1.2.0/24",))
    with pytest.raises(UnsafeEndpoint, match="plain http"):
        check("http://10.1.2.3/", allow_networks=("10.0.0.0/8",))
    check("http://8.8.8.8/", allow_http_hosts=("8.8.8.8",))
    with pytest.raises(UnsafeEndpoint, match="non-public"):
        check("https://10.9.9.9/", allow_networks=("10.1.0.0/16",))


def test_settings_from_env() -> None:
    settings = PushSettings.from_env(
        {
            "LAKEPUBSUB_PUSH": "false",
            "LAKEPUBSUB_PUSH_ALLOW_HTTP": "a.internal, 10.0.0.0/8",
            "LAKEPUBSUB_PUSH_AUTHORIZATION": '{"https://a/": "Basic x", "https://a/b/": "Basic y"}',
        }
    )
    assert not settings.enabled
    assert settings.allow_http_hosts == ("a.internal", "10.0.0.0/8")
    assert settings.authorization_for("https://a/b/c") == "Basic y"
    assert settings.authorization_for("https://a/x") == "Basic x"
    assert settings.authorization_for("https://b/") is None
    with pytest.raises(errors.InvalidArgument):
        PushSettings.from_env({"LAKEPUBSUB_PUSH_AUTHORIZATION": "[1]"})
    with pytest.raises(errors.InvalidArgument):
        PushSettings.from_env({"LAKEPUBSUB_PUSH_ALLOW_NETWORKS": "not-a-cidr"})
    with pytest.raises(errors.InvalidArgument):
        PushSettings.from_env(
            {"LAKEPUBSUB_PUSH_MIN_BACKOFF_S": "5", "LAKEPUBSUB_PUSH_MAX_BACKOFF_S": "1"}
        )


# -- envelopes ------------------------------------------------------------------------------

SUB = Subscription(SubscriptionName("demo", "sub-one"), TopicName("demo", "topic-one"))
MESSAGE = Message(7, "7", 1_700_000_000_123_456, b"\x00\xffdata", {"a": "1"}, "", 10)
EVENT = TruncationEvent(3, 9, "maxBytes", 1_700_000_000_000_000)


def test_wrapped_message() -> None:
    request = envelope.build(SUB, ReceivedMessage("ack-1", 3, message=MESSAGE))
    doc = orjson.loads(request.body)
    assert doc == {
        "message": {
            "data": "AP9kYXRh",
            "attributes": {"a": "1"},
            "messageId": "7",
            "message_id": "7",
            "publishTime": "2023-11-14T22:13:20.123456Z",
            "publish_time": "2023-11-14T22:13:20.123456Z",
        },
        "subscription": "projects/demo/subscriptions/sub-one",
    }  # no deliveryAttempt: Pub/Sub sets it only with a dead-letter policy
    dead_letter = DeadLetterPolicy(TopicName("demo", "dead-letters"))
    with_policy = dataclasses.replace(SUB, dead_letter_policy=dead_letter)
    request = envelope.build(with_policy, ReceivedMessage("ack-1", 3, message=MESSAGE))
    assert orjson.loads(request.body)["deliveryAttempt"] == 3


def test_unwrapped_event_is_marked_even_without_metadata() -> None:
    sub = Subscription(SUB.name, SUB.topic, push_config=PushConfig("https://x/", no_wrapper=True))
    request = envelope.build(sub, ReceivedMessage("ack-2", 1, event=EVENT))
    assert request.body == b""
    assert request.headers["lakepubsub.event"] == "truncated"
    assert (
        request.message_id
        == envelope.build(sub, ReceivedMessage("ack-9", 2, event=EVENT)).message_id
    )


def test_attributes_that_cannot_be_headers_are_left_out() -> None:
    sub = Subscription(
        SUB.name,
        SUB.topic,
        push_config=PushConfig("https://x/", no_wrapper=True, write_metadata=True),
    )
    odd = {"ok": "1", "bad key": "2", "crlf": "a\r\nInjected: yes", "Host": "evil", "ünï": "3"}
    message = Message(1, "1", 0, b"x", odd, "", 1)
    headers = envelope.build(sub, ReceivedMessage("ack", 1, message=message)).headers
    assert headers["ok"] == "1"
    for name in ("bad key", "crlf", "Host", "ünï", "injected"):
        assert name not in headers


# -- token signing -----------------------------------------------------------------------------


def test_rsa_tokens_verify_with_the_published_key() -> None:
    signer = Signer.from_pem(generate_pem(), issuer="https://issuer.example", lifetime_s=600)
    token = signer.token(email="a@b.iam.gserviceaccount.com", audience="https://endpoint/")
    assert signer.token(email="a@b.iam.gserviceaccount.com", audience="https://endpoint/") == token
    assert signer.token(email="a@b.iam.gserviceaccount.com", audience="https://other/") != token
    key = jwt.PyJWK.from_dict(signer.public_jwk)
    claims = jwt.decode(token, key.key, algorithms=["RS256"], audience="https://endpoint/")
    assert claims["iss"] == "https://issuer.example"
    assert claims["exp"] - claims["iat"] == 600
    assert jwt.get_unverified_header(token)["kid"] == signer.kid
    assert "d" not in signer.public_jwk, "never the private part"


def test_ec_keys_sign_es256_and_key_ids_are_thumbprints() -> None:
    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    one = Signer.from_pem(pem, issuer="i", lifetime_s=60)
    two = Signer.from_pem(pem, issuer="other", lifetime_s=60)
    assert one.algorithm == "ES256"
    assert one.kid == two.kid
    token = one.token(email="e@x", audience="aud")
    claims = jwt.decode(
        token, jwt.PyJWK.from_dict(one.public_jwk).key, algorithms=["ES256"], audience="aud"
    )
    assert claims["email"] == "e@x"
    with pytest.raises(errors.InvalidArgument):
        Signer.from_pem("not a key", issuer="i", lifetime_s=60)
