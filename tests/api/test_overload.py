"""Admission control on a real server: past its in-flight limits a process answers
RESOURCE_EXHAUSTED (429, Retry-After) at once and changes nothing; the request that
holds the room still succeeds, and room frees when it ends."""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Iterator

import orjson
import pytest

from tests.support import LakeSpec, Server, start_server, stop_server


@pytest.fixture
def server(local_lake: LakeSpec) -> Iterator[Server]:
    running = start_server(local_lake, extra_env={"LAKEPUBSUB_MAX_INFLIGHT_REQUESTS": "1"})
    yield running
    stop_server(running)


def _port(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _hold(server: Server, start: bytes, length: int) -> socket.socket:
    """A publish request sent up to part of its body."""
    held = socket.create_connection(("127.0.0.1", _port(server)))
    held.sendall(
        b"POST /v1/projects/p/topics/orders:publish HTTP/1.1\r\nhost: x\r\n"
        b"content-type: application/json\r\n" + f"content-length: {length}\r\n\r\n".encode() + start
    )
    return held


def _finish(held: socket.socket, rest: bytes) -> bytes:
    """Send the rest of the held request; its answer's status code."""
    held.sendall(rest)
    head = b""
    while b"\r\n" not in head:
        chunk = held.recv(65536)
        assert chunk, head
        head += chunk
    held.close()
    return head.split(b" ")[1]


def test_past_the_limit_requests_are_refused_at_once_and_change_nothing(server: Server) -> None:
    with server.client() as http:
        created = http.put("/v1/projects/p/topics/orders", json={})
        assert created.status_code == 200, created.text
        subscription = {"topic": "projects/p/topics/orders"}
        assert (
            http.put("/v1/projects/p/subscriptions/orders-sub", json=subscription).status_code
            == 200
        )
        body = orjson.dumps({"messages": [{"data": base64.b64encode(b"held").decode()}]})
        refused, held = None, None
        for _ in range(20):
            # A publish whose body arrives slowly holds the process's only room, once
            # the server has read its head and the request before it has left.
            time.sleep(0.2)
            held = _hold(server, body[:10], len(body))
            time.sleep(0.2)
            answer = http.put("/v1/projects/p/topics/other", json={})
            if answer.status_code == 429:
                refused = answer
                break
            # The held request came too early (refused) or too late: start again.
            assert answer.status_code == 200, answer.text
            assert http.delete("/v1/projects/p/topics/other").status_code == 200
            assert _finish(held, body[10:]) in (b"200", b"429")
        assert refused is not None
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert refused.json()["error"]["code"] == 429
        # Pulls and operational routes are not counted; the refused create changed nothing.
        assert http.get("/healthz").status_code == 200
        pulled = http.post(
            "/v1/projects/p/subscriptions/orders-sub:pull",
            json={"maxMessages": 1, "returnImmediately": True},
        )
        assert pulled.status_code == 200
        assert http.get("/v1/projects/p/topics/other").status_code == 429
        # The held request completes; then the room is free again.
        assert held is not None
        assert _finish(held, body[10:]) == b"200"
        assert http.get("/v1/projects/p/topics/other").status_code == 404
        listed = http.get("/v1/projects/p/topics").json()["topics"]
        assert [t["name"] for t in listed] == ["projects/p/topics/orders"]
