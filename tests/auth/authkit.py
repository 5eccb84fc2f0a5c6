"""Helpers for the access-control tests: API keys, servers configured with them, a
JWT issuer with its JWKS on 127.0.0.1, and reading a lake's state with the root key."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from support import LakeSpec, Server, start_server, stop_server

P = "/v1/projects/demo"
ROOT = "root"  # the key every test reads and sets up state with: admin on every project
# Push delivery is not under test here; without it no dispatcher mints tokens or
# pushes to the endpoints some tests configure.
NO_PUSH = {"LAKEPUBSUB_PUSH": "false"}
# The server's long poll (tests/support.py sets LAKEPUBSUB_PULL_WAIT_S=2) times this.
DRAIN_TIMEOUT_S = 20.0


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_config(keys: dict[str, dict[str, Any]]) -> str:
    """``LAKEPUBSUB_API_KEYS`` for keys named after themselves: the key is ``<name>-key``."""
    return json.dumps(
        {name: {"sha256": sha256(f"{name}-key"), **spec} for name, spec in keys.items()}
    )


def as_key(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {name}-key"}


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def denied(response: httpx.Response, status: int = 403) -> None:
    """A refusal in Pub/Sub's error shape, and nothing else in the body."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "status"}, error
    assert error["code"] == status
    assert error["status"] == {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}[status]
    assert error["message"]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def policy(*bindings: tuple[str, list[str]], etag: str = "") -> dict[str, Any]:
    """A ``:setIamPolicy`` body: ``policy(("roles/pubsub.viewer", ["user:a@b.c"]))``."""
    doc: dict[str, Any] = {"bindings": [{"role": r, "members": m} for r, m in bindings]}
    if etag:
        doc["etag"] = etag
    return {"policy": doc}


@contextmanager
def serving(lake_dir: Path, env: dict[str, str]) -> Iterator[Server]:
    """A uvicorn process on 127.0.0.1 over a local lake in ``lake_dir``."""
    server = start_server(LakeSpec(str(lake_dir), {}), extra_env={**NO_PUSH, **env})
    try:
        yield server
    finally:
        stop_server(server)


@contextmanager
def clients(server: Server, *names: str) -> Iterator[dict[str, httpx.Client]]:
    """One client per key name (``""``: no credentials), closed afterwards."""
    made = {name: server.client() for name in names}
    for name, client in made.items():
        if name:
            client.headers.update(as_key(name))
    try:
        yield made
    finally:
        for client in made.values():
            client.close()


def drain(root: httpx.Client, project_path: str, topic: str, sub: str) -> list[str]:
    """What the subscription delivers now, read with the root key.

    Publishes a marker, pulls (and acknowledges) until it arrives, and returns
    the payloads delivered before it; a truncation event reads ``<truncated>``.
    """
    marker = f"marker-{time.monotonic_ns()}"
    ok(
        root.post(
            f"{project_path}/topics/{topic}:publish", json={"messages": [{"data": b64(marker)}]}
        )
    )
    seen: list[str] = []
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    body: dict[str, Any] = {"maxMessages": 100}
    while True:
        got = ok(root.post(f"{project_path}/subscriptions/{sub}:pull", json=body))
        items = got.get("receivedMessages", [])
        for item in items:
            message = item["message"]
            if message.get("attributes", {}).get("lakepubsub.event") == "truncated":
                seen.append("<truncated>")
            else:
                seen.append(base64.b64decode(message.get("data", "")).decode())
        if items:
            ack = {"ackIds": [i["ackId"] for i in items]}
            ok(root.post(f"{project_path}/subscriptions/{sub}:acknowledge", json=ack))
        if body.get("returnImmediately"):
            break
        if marker in seen:
            body["returnImmediately"] = True  # one more look, for anything ordered after it
        assert time.monotonic() < deadline, f"the marker never arrived; saw {seen}"
    return [s for s in seen if s != marker]


class Issuer:
    """A JWT issuer: signs tokens with an RSA key and serves its JWKS on 127.0.0.1."""

    def __init__(self, name: str = "https://issuer.test") -> None:
        self.name = name
        self.kid = "issuer-key-1"
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        document = json.dumps({"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]})
        payload = document.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/jwks.json"

    def token(
        self,
        *,
        audience: str,
        subject: str = "subject-1",
        lifetime_s: int = 300,
        key: rsa.RSAPrivateKey | None = None,
        **claims: Any,
    ) -> str:
        """An RS256 token; ``key`` signs instead of the published one (a forgery)."""
        now = int(time.time())
        body = {
            "iss": self.name,
            "aud": audience,
            "sub": subject,
            "iat": now,
            "exp": now + lifetime_s,
            **claims,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": self.kid})

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)
