"""Publish is served before FastAPI's router (``api/rest/fast.py``). It must answer exactly
what the router's publish route answers: the same requests, sent to a server with
the fast lane and to one without it (each on its own lake, in the same state), get
the same status, content type and body, and leave the same messages behind."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from support import LakeSpec, Server, start_server, stop_server

from api.app import create_app
from api.rest.fast import FastRoutes
from lakepubsub import Engine, Settings
from lakepubsub.resources.names import TopicName
from lakepubsub.resources.topics import Topic

P = "/v1/projects/demo"
HERE = Path(__file__).parent


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# (what, method, path under P, keyword arguments for httpx)
CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        "two messages",
        "POST",
        "/topics/orders:publish",
        {"json": {"messages": [{"data": b64(b"one")}, {"attributes": {"k": "v"}}]}},
    ),
    (
        "an ordering key",
        "POST",
        "/topics/orders:publish",
        {"json": {"messages": [{"data": b64(b"o"), "orderingKey": "key"}]}},
    ),
    (
        "snake_case fields",
        "POST",
        "/topics/orders:publish",
        {"json": {"messages": [{"data": b64(b"s"), "ordering_key": "key"}]}},
    ),
    (
        "a text/plain body",
        "POST",
        "/topics/orders:publish",
        {"content": b'{"messages": [{"data": "eA=="}]}', "headers": {"content-type": "text/plain"}},
    ),
    (
        "query parameters",
        "POST",
        "/topics/orders:publish?alt=json&prettyPrint=false",
        {"json": {"messages": [{"data": "eQ=="}]}},
    ),
    ("broken JSON", "POST", "/topics/orders:publish", {"content": b"{not json"}),
    ("an empty body", "POST", "/topics/orders:publish", {"content": b""}),
    ("null", "POST", "/topics/orders:publish", {"content": b"null"}),
    ("a list", "POST", "/topics/orders:publish", {"json": [1, 2]}),
    (
        "an unknown field",
        "POST",
        "/topics/orders:publish",
        {"json": {"messages": [{"data": "eA=="}], "bogus": 1}},
    ),
    (
        "an unknown message field",
        "POST",
        "/topics/orders:publish",
        {"json": {"messages": [{"data": "eA==", "bogus": 1}]}},
    ),
    ("bad base64", "POST", "/topics/orders:publish", {"json": {"messages": [{"data": "*"}]}}),
    ("no messages", "POST", "/topics/orders:publish", {"json": {"messages": []}}),
    ("an empty message", "POST", "/topics/orders:publish", {"json": {"messages": [{}]}}),
    (
        "a message over the limit",
        "POST",
        "/topics/orders:publish",
        {"json": {"messages": [{"data": b64(b"x" * (10 * 1024 * 1024 + 1))}]}},
    ),
    (
        "a body over the limit",
        "POST",
        "/topics/orders:publish",
        {"content": b"x" * (21 * 1024 * 1024)},
    ),
    ("a missing topic", "POST", "/topics/nope:publish", {"json": {"messages": [{"data": "eA=="}]}}),
    (
        "a malformed topic name",
        "POST",
        "/topics/-orders:publish",
        {"json": {"messages": [{"data": "eA=="}]}},
    ),
    (
        "an escaped colon",
        "POST",
        "/topics/orders%3Ax:publish",
        {"json": {"messages": [{"data": "eA=="}]}},
    ),
    (
        "a nested path",
        "POST",
        "/topics/orders/u:publish",
        {"json": {"messages": [{"data": "eA=="}]}},
    ),
    ("GET", "GET", "/topics/orders:publish", {}),
    ("another verb", "POST", "/topics/orders:unknownVerb", {"json": {}}),
]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    fast = start_server(LakeSpec(str(tmp_path / "fast"), {}))
    try:
        routed = start_server(
            LakeSpec(str(tmp_path / "routed"), {}), app=f"{HERE}/router_only_app:create_app"
        )
    except BaseException:
        stop_server(fast)
        raise
    yield fast, routed
    stop_server(routed)
    stop_server(fast)


def test_publish_answers_as_the_router_does(servers: tuple[Server, Server]) -> None:
    clients = [server.client() for server in servers]
    for http in clients:
        assert http.put(f"{P}/topics/orders", json={}).status_code == 200
        body = {"topic": "projects/demo/topics/orders", "enableMessageOrdering": True}
        assert http.put(f"{P}/subscriptions/sub", json=body).status_code == 200
    statuses = set()
    for what, method, path, kwargs in CASES:
        fast, routed = (http.request(method, P + path, **kwargs) for http in clients)
        assert fast.status_code == routed.status_code, (what, fast.text, routed.text)
        assert fast.headers["content-type"] == routed.headers["content-type"], what
        assert fast.json() == routed.json(), what
        statuses.add(fast.status_code)
    # The cases reach success, refusals of the body, of the name and of the route.
    assert {200, 400, 404, 405, 413} <= statuses
    pulled = []
    for http in clients:
        pull = {"maxMessages": 100, "returnImmediately": True}
        got = http.post(f"{P}/subscriptions/sub:pull", json=pull).json()["receivedMessages"]
        pulled.append(sorted((m["message"]["messageId"], _content(m["message"])) for m in got))
        assert 'route="publish"' in http.get("/metrics").text
    assert pulled[0] == pulled[1]
    assert len(pulled[0]) == 6  # the accepted requests' messages, and nothing else
    for http in clients:
        http.close()


def _content(message: dict[str, Any]) -> tuple[str, str, str]:
    return (
        message.get("data", ""),
        repr(sorted(message.get("attributes", {}).items())),
        message.get("orderingKey", ""),
    )


def test_publish_is_answered_before_the_router(tmp_path: Path) -> None:
    """The fast lane answers publish itself, and hands everything else on."""
    reached: list[str] = []

    async def router(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["path"])
        await Response(b"{}", status_code=418)(scope, receive, send)

    async def run(app: FastAPI) -> list[httpx.Response]:
        lane = FastRoutes(router)

        async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
            scope["app"] = app
            await lane(scope, receive, send)

        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://lane") as http:
            body = {"messages": [{"data": "eA=="}]}
            return [
                await http.post(f"{P}/topics/orders:publish", json=body),
                await http.post(f"{P}/topics/orders:unknownVerb", json={}),
                await http.post(f"{P}/topics/orders/u:publish", json=body),
                await http.get(f"{P}/topics/orders:publish"),
            ]

    with Engine(Settings(lake=str(tmp_path))) as engine:
        app = create_app(engine, grpc=False)
        app.state.engine = engine  # the lifespan, which sets it, is not run here
        engine.create_topic(Topic(name=TopicName("demo", "orders")))
        published, *others = asyncio.run(run(app))
        assert published.status_code == 200 and published.json() == {"messageIds": ["0"]}
        assert [r.status_code for r in others] == [418, 418, 418]
        assert reached == [
            "/v1/projects/demo/topics/orders:unknownVerb",
            "/v1/projects/demo/topics/orders/u:publish",
            "/v1/projects/demo/topics/orders:publish",
        ]
