"""Real push endpoints for the tests: a threaded HTTP server on 127.0.0.1 that records
every request and answers as the test's behaviour says (ack, nack, slow, 503...)."""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

P = "/v1/projects/demo"
ACK = 204
# Faster catalog pickup (1 s in production) and a back-off scaled down 10x at the
# bottom and 60x at the top, so that tests not about the back-off curve do not
# wait for it. tests/push/test_push_backoff.py measures it at full scale.
PUSH_ENV = {
    "LAKEPUBSUB_PUSH_REFRESH_S": "0.2",
    "LAKEPUBSUB_PUSH_MIN_BACKOFF_S": "0.01",
    "LAKEPUBSUB_PUSH_MAX_BACKOFF_S": "1",
}


@dataclass
class Delivery:
    """One request the endpoint received."""

    at: float  # time.monotonic() on arrival
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    concurrent: int  # requests in progress at arrival, this one included
    status: int = -1  # what the endpoint answered (-1: not yet, or hung up on)
    nth: int = 1  # how many times this message had arrived at this path, this time included
    finished: float = float("inf")  # time.monotonic() when answered

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.body)  # type: ignore[no-any-return]

    @property
    def message_id(self) -> str:
        if self.headers.get("content-type", "").startswith("application/json"):
            return str(self.doc["message"]["messageId"])
        return self.headers.get("x-goog-pubsub-message-id", "")

    @property
    def attempt(self) -> int:
        return int(self.doc["deliveryAttempt"])

    @property
    def data(self) -> bytes:
        return base64.b64decode(self.doc["message"].get("data", ""))


@dataclass
class Reply:
    status: int = ACK
    delay_s: float = 0.0
    body: bytes = b""
    raw: bytes | None = None  # written as is, then the connection is held and closed


Behaviour = Callable[[Delivery], Reply]


def always(status: int = ACK, delay_s: float = 0.0) -> Behaviour:
    return lambda _: Reply(status, delay_s)


@dataclass
class Endpoint:
    """The server; ``behaviour`` may be swapped while it runs."""

    behaviour: Behaviour = field(default_factory=always)
    deliveries: list[Delivery] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._seen: dict[str, int] = {}
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                endpoint._handle(self)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/push") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length)
        if len(body) < length:  # the sender died mid-request: no request arrived
            handler.close_connection = True
            return
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self._in_flight += 1
            delivery = Delivery(time.monotonic(), handler.path, headers, body, self._in_flight)
            key = _key(delivery)
            self._seen[key] = self._seen.get(key, 0) + 1
            delivery.nth = self._seen[key]
            self.deliveries.append(delivery)
        try:
            reply = self.behaviour(delivery)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            # Answered as the first byte of the reply leaves, not after the write:
            # the pusher may read the reply and send its next request before this
            # thread runs again, and that request must not look concurrent.
            if reply.raw is not None:
                self._answered(delivery)
                handler.wfile.write(reply.raw)
                handler.wfile.flush()
                time.sleep(0.5)
                handler.close_connection = True
                delivery.status = int(reply.raw.split(b" ")[1])
                return
            self._answered(delivery)
            handler.send_response(reply.status)
            handler.send_header("content-length", str(len(reply.body)))
            handler.end_headers()
            if reply.body:
                handler.wfile.write(reply.body)
            delivery.status = reply.status
        except OSError:
            pass  # the dispatcher hung up (timeout, bounded read)
        finally:
            self._answered(delivery)

    def _answered(self, delivery: Delivery) -> None:
        with self._lock:
            if delivery.finished == float("inf"):
                self._in_flight -= 1
                delivery.finished = time.monotonic()

    # -- what happened ----------------------------------------------------------------

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def acked(self) -> set[str]:
        ok = {102, 200, 201, 202, 204}
        return {d.message_id for d in self.snapshot() if d.status in ok}

    def wait_for(self, predicate: Callable[[list[Delivery]], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.snapshot()):
                return
            time.sleep(0.02)
        seen = self.snapshot()
        raise AssertionError(f"timed out after {timeout_s}s; {len(seen)} deliveries seen")

    def wait_acked(self, ids: set[str], timeout_s: float) -> None:
        self.wait_for(lambda _: ids <= self.acked(), timeout_s)


def _key(delivery: Delivery) -> str:
    """Per endpoint path and message: ``nth`` counts one subscription's tries."""
    try:
        return f"{delivery.path} {delivery.message_id}"
    except (ValueError, KeyError):
        return delivery.path


# -- REST helpers ---------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def create_topic(http: httpx.Client, topic: str = "orders") -> None:
    response = http.put(f"{P}/topics/{topic}", json={})
    assert response.status_code in (200, 409), response.text


def create_push(
    http: httpx.Client, sub: str, endpoint: str | None, topic: str = "", **body: Any
) -> dict[str, Any]:
    """A subscription (push unless ``endpoint`` is None) on ``topic``, by default a
    topic of its own named after it."""
    topic = topic or f"{sub}-topic"
    create_topic(http, topic)
    doc: dict[str, Any] = {"topic": f"projects/demo/topics/{topic}", **body}
    if endpoint is not None:
        doc["pushConfig"] = {"pushEndpoint": endpoint, **doc.get("pushConfig", {})}
    response = http.put(f"{P}/subscriptions/{sub}", json=doc)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def publish(
    http: httpx.Client, count: int, topic: str, *, prefix: str = "m", **fields: Any
) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, 500):
        messages = [
            {"data": b64(f"{prefix}{i}".encode()), **fields}
            for i in range(start, min(count, start + 500))
        ]
        response = http.post(f"{P}/topics/{topic}:publish", json={"messages": messages})
        assert response.status_code == 200, response.text
        ids += response.json()["messageIds"]
    return ids


def set_push(http: httpx.Client, sub: str, endpoint: str | None, **config: Any) -> None:
    push = {"pushEndpoint": endpoint, **config} if endpoint else {}
    response = http.post(f"{P}/subscriptions/{sub}:modifyPushConfig", json={"pushConfig": push})
    assert response.status_code == 200, response.text


def intervals(times: list[float]) -> Iterator[float]:
    return (b - a for a, b in itertools.pairwise(times))
