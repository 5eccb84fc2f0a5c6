"""Who may call at all: API keys (configured as SHA-256 hashes), JWTs from a JWKS,
and anonymous callers, on real servers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from authkit import ROOT, Issuer, P, denied, key_config, ok, policy, serving, sha256
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from api.app import create_app
from api.auth import AuthSettings, parse_api_keys
from lakepubsub import errors

AUDIENCE = "https://pubsub.lakepubsub.test"
KEYS = {
    ROOT: {"roles": {"*": ["roles/pubsub.admin"]}},
    "viewer": {"roles": {"demo": ["roles/pubsub.viewer"]}},
    "ci": {"principal": "serviceAccount:ci@demo.iam.gserviceaccount.com"},
}
KNOWN = "projects/demo/topics/known"
ALL = [
    "pubsub.topics.get",
    "pubsub.topics.list",
    "pubsub.topics.create",
    "pubsub.topics.publish",
    "pubsub.subscriptions.consume",
]


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    yield made
    made.close()


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory, issuer: Issuer) -> Iterator[httpx.Client]:
    """A server with API keys and JWTs configured, and a client that sends no credentials."""
    env = {
        "LAKEPUBSUB_API_KEYS": key_config(KEYS),
        "LAKEPUBSUB_JWKS_URL": issuer.jwks_url,
        "LAKEPUBSUB_JWT_AUDIENCE": AUDIENCE,
        "LAKEPUBSUB_JWT_ISSUER": issuer.name,
    }
    with serving(tmp_path_factory.mktemp("authn-lake"), env) as server, server.client() as client:
        root = {"authorization": f"Bearer {ROOT}-key"}
        ok(client.put(f"{P}/topics/known", json={}, headers=root))
        grants = policy(
            (
                "roles/pubsub.viewer",
                ["user:alice@example.com", "principal:https://issuer.test/robot-7"],
            ),
            ("roles/pubsub.publisher", ["domain:example.org"]),
            ("roles/pubsub.editor", ["serviceAccount:ci@demo.iam.gserviceaccount.com"]),
        )
        ok(client.post(f"{P}:setIamPolicy", json=grants, headers=root))
        yield client


def topics(response: httpx.Response) -> set[str]:
    return {t["name"] for t in ok(response).get("topics", [])}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def held(http: httpx.Client, headers: dict[str, str]) -> list[str]:
    """The permissions the caller holds on the project (testIamPermissions needs none)."""
    response = http.post(f"{P}:testIamPermissions", json={"permissions": ALL}, headers=headers)
    return list(ok(response).get("permissions", []))


# -- API keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer viewer-key"},
        {"authorization": "bearer viewer-key"},
        {"x-goog-api-key": "viewer-key"},
    ],
    ids=["bearer", "lower-case-scheme", "x-goog-api-key"],
)
def test_api_key_is_accepted(http: httpx.Client, headers: dict[str, str]) -> None:
    assert KNOWN in topics(http.get(f"{P}/topics", headers=headers))


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer no-such-key"},
        {"x-goog-api-key": "no-such-key"},
        {"authorization": "Bearer VIEWER-KEY"},
        # Whoever reads the configuration learns the hash, which is no credential.
        {"authorization": f"Bearer {sha256('viewer-key')}"},
        {"x-goog-api-key": sha256("viewer-key")},
        # A good key next to a bad bearer token does not rescue the request.
        {"authorization": "Bearer no-such-key", "x-goog-api-key": "viewer-key"},
    ],
    ids=["unknown", "unknown-x-goog", "wrong-case", "the-hash", "the-hash-x-goog", "mixed"],
)
def test_unknown_key_is_unauthenticated(http: httpx.Client, headers: dict[str, str]) -> None:
    response = http.get(f"{P}/topics", headers=headers)
    denied(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_anonymous_is_refused_once_keys_are_configured(http: httpx.Client) -> None:
    """Even from loopback, which is admitted only while no identities are configured."""
    denied(http.get(f"{P}/topics"), 401)
    denied(http.put(f"{P}/topics/by-nobody", json={}), 401)
    denied(http.get(f"{P}/topics/known:getIamPolicy"), 401)
    denied(http.post(f"{P}:testIamPermissions", json={"permissions": ALL}), 401)
    denied(http.get(f"{P}/topics", headers={"authorization": "Basic dXNlcjpwYXNz"}), 401)
    assert KNOWN in topics(http.get(f"{P}/topics", headers=bearer(f"{ROOT}-key")))


def test_operational_routes_need_no_credentials(http: httpx.Client) -> None:
    """Health checks, metrics and the push JWKS are outside ``/v1/``."""
    for path in ("/healthz", "/readyz", "/metrics", "/.well-known/jwks.json"):
        assert http.get(path).status_code == 200, path
    discovery = ok(http.get("/.well-known/openid-configuration"))
    assert discovery["jwks_uri"].endswith("/.well-known/jwks.json")


def test_a_key_acts_as_its_principal(http: httpx.Client) -> None:
    """A key with a ``principal`` gets the roles policies grant that member."""
    ci = {"x-goog-api-key": "ci-key"}
    assert held(http, ci) == ALL
    ok(http.put(f"{P}/topics/by-ci", json={}, headers=ci))


# -- JWTs -----------------------------------------------------------------------------------


def test_jwt_from_the_jwks_is_accepted(http: httpx.Client, issuer: Issuer) -> None:
    alice = bearer(issuer.token(audience=AUDIENCE, email="alice@example.com"))
    assert KNOWN in topics(http.get(f"{P}/topics", headers=alice))
    # Authenticated, but not allowed: 403, not 401.
    denied(http.put(f"{P}/topics/by-alice", json={}, headers=alice), 403)
    assert http.get(f"{P}/topics/by-alice", headers=bearer(f"{ROOT}-key")).status_code == 404


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"email": "alice@example.com"}, ["pubsub.topics.get", "pubsub.topics.list"]),
        ({"email": "bob@example.org"}, ["pubsub.topics.publish"]),  # domain:example.org
        ({"email": "ci@demo.iam.gserviceaccount.com"}, ALL),  # serviceAccount:
        ({"subject": "robot-7"}, ["pubsub.topics.get", "pubsub.topics.list"]),  # principal:
        ({"email": "mallory@example.net"}, []),
    ],
    ids=["user", "domain", "service-account", "subject", "no-grant"],
)
def test_jwt_principal_is_matched_to_policy_members(
    http: httpx.Client, issuer: Issuer, claims: dict[str, Any], expected: list[str]
) -> None:
    token = issuer.token(audience=AUDIENCE, **claims)
    assert held(http, bearer(token)) == expected


def _forged(issuer: Issuer, case: str) -> str:
    """A token that must be refused, for each way a token can be wrong."""
    claims = {"audience": AUDIENCE, "email": "alice@example.com"}
    if case == "wrong-audience":
        return issuer.token(**{**claims, "audience": "https://elsewhere.test"})
    if case == "no-audience":
        return issuer.token(**{**claims, "audience": None})
    if case == "expired":
        return issuer.token(**claims, lifetime_s=-60)
    if case == "no-expiry":
        token = issuer.token(**claims, exp=None)
        assert "exp" not in jwt.decode(token, options={"verify_signature": False})
        return token
    if case == "wrong-issuer":
        return issuer.token(**claims, iss="https://impostor.test")
    if case == "other-key":
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return issuer.token(**claims, key=other)
    if case == "tampered":
        head, body, signature = issuer.token(**claims).split(".")
        doc = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        doc["email"] = "ci@demo.iam.gserviceaccount.com"
        forged = base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
        return f"{head}.{forged}.{signature}"
    if case == "unsigned":
        payload = jwt.decode(issuer.token(**claims), options={"verify_signature": False})
        return jwt.encode(payload, None, algorithm="none", headers={"kid": issuer.kid})
    if case == "hmac-with-public-key":
        public = issuer.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        payload = jwt.decode(issuer.token(**claims), options={"verify_signature": False})
        # PyJWT itself refuses to sign with a PEM public key as an HMAC secret, so
        # the classic algorithm-confusion token is assembled by hand.
        return _hs256(payload, issuer.kid, public)
    if case == "unknown-kid":
        token = issuer.token(**claims)
        header = {"alg": "RS256", "typ": "JWT", "kid": "no-such-kid"}
        head = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
        return head + token[token.index(".") :]
    raise AssertionError(case)


def _hs256(payload: dict[str, Any], kid: str, secret: bytes) -> str:
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    signing_input = f"{part({'alg': 'HS256', 'typ': 'JWT', 'kid': kid})}.{part(payload)}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


@pytest.mark.parametrize(
    "case",
    [
        "wrong-audience",
        "no-audience",
        "expired",
        "no-expiry",
        "wrong-issuer",
        "other-key",
        "tampered",
        "unsigned",
        "hmac-with-public-key",
        "unknown-kid",
    ],
)
def test_bad_jwt_is_unauthenticated(http: httpx.Client, issuer: Issuer, case: str) -> None:
    token = _forged(issuer, case)
    denied(http.get(f"{P}/topics", headers=bearer(token)), 401)
    denied(http.put(f"{P}/topics/by-{case}", json={}, headers=bearer(token)), 401)
    assert http.get(f"{P}/topics/by-{case}", headers=bearer(f"{ROOT}-key")).status_code == 404


# -- anonymous callers ----------------------------------------------------------------------

# uvicorn trusts X-Forwarded-For from loopback (FORWARDED_ALLOW_IPS), as it would
# from a proxy in front of the server: the request then comes from that address.
REMOTE = {"x-forwarded-for": "203.0.113.9"}


def test_no_identities_admits_loopback_only(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The embedded default: no keys, no JWKS; loopback callers may do everything."""
    env = {"FORWARDED_ALLOW_IPS": "127.0.0.1"}
    with serving(tmp_path_factory.mktemp("open"), env) as server, server.client() as http:
        ok(http.put(f"{P}/topics/local", json={}))
        assert held(http, {}) == ALL
        denied(http.get(f"{P}/topics", headers=REMOTE), 401)
        denied(http.put(f"{P}/topics/remote", json={}, headers=REMOTE), 401)
        assert http.get(f"{P}/topics/remote").status_code == 404


def test_anonymous_can_be_turned_off_without_identities(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    env = {"LAKEPUBSUB_ALLOW_ANONYMOUS": "false"}
    with serving(tmp_path_factory.mktemp("closed"), env) as server, server.client() as http:
        denied(http.get(f"{P}/topics"), 401)
        denied(http.put(f"{P}/topics/local", json={}), 401)
        assert http.get("/healthz").status_code == 200


@pytest.mark.parametrize("mode", ["true", "loopback"])
def test_admitted_anonymous_gets_only_what_all_users_are_granted(
    tmp_path_factory: pytest.TempPathFactory, mode: str
) -> None:
    env = {
        "LAKEPUBSUB_API_KEYS": key_config(KEYS),
        "LAKEPUBSUB_ALLOW_ANONYMOUS": mode,
        "FORWARDED_ALLOW_IPS": "127.0.0.1",
    }
    root = bearer(f"{ROOT}-key")
    with serving(tmp_path_factory.mktemp(mode), env) as server, server.client() as http:
        # Admitted (so not 401), but holding nothing.
        denied(http.get(f"{P}/topics"), 403)
        assert held(http, {}) == []
        grants = policy(
            ("roles/pubsub.viewer", ["allUsers"]),
            ("roles/pubsub.publisher", ["allAuthenticatedUsers"]),
        )
        ok(http.post(f"{P}:setIamPolicy", json=grants, headers=root))
        assert ok(http.get(f"{P}/topics")) == {"topics": []}
        assert held(http, {}) == ["pubsub.topics.get", "pubsub.topics.list"]
        assert held(http, {"x-goog-api-key": "viewer-key"}) == [*ALL[:2], "pubsub.topics.publish"]
        remote = http.get(f"{P}/topics", headers=REMOTE)
        if mode == "true":
            assert ok(remote) == {"topics": []}
        else:
            denied(remote, 401)


# -- configuration --------------------------------------------------------------------------


def test_configuration_holds_only_hashes() -> None:
    keys = parse_api_keys(key_config(KEYS))
    assert set(keys) == {sha256(f"{name}-key") for name in KEYS}
    assert "viewer-key" not in repr(keys)
    assert keys[sha256("viewer-key")].grants == {"demo": frozenset({"roles/pubsub.viewer"})}
    assert keys[sha256("viewer-key")].principal == "apiKey:viewer"
    # The short form, and an upper-case digest, are the same key.
    assert parse_api_keys(json.dumps({"viewer": sha256("viewer-key").upper()})).keys() == {
        sha256("viewer-key")
    }


@pytest.mark.parametrize(
    "env",
    [
        {"LAKEPUBSUB_API_KEYS": '{"ci": "the-key-itself"}'},
        {"LAKEPUBSUB_API_KEYS": json.dumps({"ci": {"sha256": sha256("k")[:40]}})},
        {"LAKEPUBSUB_API_KEYS": json.dumps({"a": sha256("k"), "b": sha256("k")})},
        {"LAKEPUBSUB_API_KEYS": json.dumps({"a": {"sha256": sha256("k"), "roles": ["x"]}})},
        {"LAKEPUBSUB_API_KEYS": json.dumps({"a": {"sha256": sha256("k"), "roles": {"*": ["x"]}}})},
        {"LAKEPUBSUB_API_KEYS": json.dumps({"a": {"sha256": sha256("k"), "principal": "bob"}})},
        {
            "LAKEPUBSUB_API_KEYS": json.dumps(
                {"a": {"sha256": sha256("k"), "principal": "allUsers"}}
            )
        },
        {"LAKEPUBSUB_API_KEYS": "not json"},
        {"LAKEPUBSUB_API_KEYS": "[]"},
        {"LAKEPUBSUB_JWKS_URL": "http://127.0.0.1:1/jwks.json"},
        {"LAKEPUBSUB_ALLOW_ANONYMOUS": "sometimes"},
    ],
    ids=[
        "plain-key",
        "short-hash",
        "repeated-hash",
        "roles-not-object",
        "unknown-role",
        "bad-principal",
        "all-users-principal",
        "not-json",
        "not-object",
        "jwks-without-audience",
        "bad-anonymous",
    ],
)
def test_bad_configuration_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidArgument):
        AuthSettings.from_env(env)


def test_server_does_not_start_with_a_bad_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEPUBSUB_API_KEYS", '{"ci": "the-key-itself"}')
    with pytest.raises(errors.InvalidArgument):
        create_app()


@pytest.mark.parametrize(
    ("env", "anonymous"),
    [
        ({}, "loopback"),
        ({"LAKEPUBSUB_API_KEYS": json.dumps({"a": sha256("k")})}, "false"),
        ({"LAKEPUBSUB_JWKS_URL": "http://x/jwks", "LAKEPUBSUB_JWT_AUDIENCE": "a"}, "false"),
        (
            {
                "LAKEPUBSUB_API_KEYS": json.dumps({"a": sha256("k")}),
                "LAKEPUBSUB_ALLOW_ANONYMOUS": "yes",
            },
            "true",
        ),
        ({"LAKEPUBSUB_ALLOW_ANONYMOUS": "0"}, "false"),
        ({"LAKEPUBSUB_ALLOW_ANONYMOUS": "Loopback"}, "loopback"),
    ],
)
def test_anonymous_default_follows_the_identities(env: dict[str, str], anonymous: str) -> None:
    assert AuthSettings.from_env(env).anonymous == anonymous
