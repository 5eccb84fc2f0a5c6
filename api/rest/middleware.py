"""ASGI middleware: admission control, request size limit and HTTP metrics. Pure ASGI
for low overhead."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from lakepubsub import constants
from lakepubsub.settings import Settings

# Twice the 10 MB publish limit covers base64's 4/3 growth and JSON framing;
# anything larger is refused before it is read into memory.
MAX_BODY_BYTES = 20 * 1024 * 1024

HTTP_REQUESTS = Counter(
    "lakepubsub_http_requests_total", "HTTP requests", ["method", "route", "code"]
)
OVERLOAD_REFUSED = Counter(
    "lakepubsub_overload_refused_total", "Requests refused with 429 because the process was full"
)
HTTP_SECONDS = Histogram(
    "lakepubsub_http_request_seconds",
    "HTTP request latency",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


class HttpMiddleware:
    """Pure ASGI middleware that handles HTTP requests (``handle``); the lifespan and
    other scopes pass through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class Admission(HttpMiddleware):
    """Answer RESOURCE_EXHAUSTED (429, ``Retry-After``) at once when this process already
    has ``max_inflight_requests`` API requests or ``max_inflight_body_bytes`` of request
    bodies in flight, or when its event loop lags more than ``MAX_LOOP_LAG_S`` with
    requests in flight (they are queueing before they are even read), instead of
    letting work queue without bound: past its capacity the server keeps answering
    quickly, and memory stays bounded. Pulls are not refused (a long poll waits by
    design; each holds one connection and no body). The limits are the app's engine's
    settings, read on the first request."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app)
        self.requests = 0
        self.body_bytes = 0
        self.limits: tuple[int, int] | None = None
        self.lag_s = 0.0

    def _probe(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        now = loop.time()
        self.lag_s = now - due
        loop.call_at(
            now + constants.LOOP_LAG_PROBE_S, self._probe, loop, now + constants.LOOP_LAG_PROBE_S
        )

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if not path.startswith("/v1/") or path.endswith(":pull"):
            await self.app(scope, receive, send)
            return
        if self.limits is None:
            engine = getattr(scope["app"].state, "engine", None)
            settings: Settings = engine.settings if engine is not None else Settings()
            self.limits = (settings.max_inflight_requests, settings.max_inflight_body_bytes)
            loop = asyncio.get_running_loop()
            self._probe(loop, loop.time())
        size = 0
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit():
                size = int(value)
        max_requests, max_bytes = self.limits
        full = self.body_bytes and self.body_bytes + size > max_bytes
        lagging = (
            self.lag_s > constants.MAX_LOOP_LAG_S
            and self.requests >= constants.LAG_REFUSAL_MIN_INFLIGHT
        )
        if self.requests >= max_requests or full or lagging:
            await _overloaded(scope, receive, send)
            return
        self.requests += 1
        self.body_bytes += size
        try:
            await self.app(scope, receive, send)
        finally:
            self.requests -= 1
            self.body_bytes -= size


async def _overloaded(scope: Scope, receive: Receive, send: Send) -> None:
    OVERLOAD_REFUSED.inc()
    await _discard_body(receive)
    response = error_response(
        429, "RESOURCE_EXHAUSTED", "The server is overloaded; retry after a moment."
    )
    response.headers["retry-after"] = str(constants.OVERLOAD_RETRY_AFTER_S)
    await response(scope, receive, send)


class BodyTooLarge(Exception):
    pass


class LimitBody(HttpMiddleware):
    """Refuse request bodies over ``MAX_BODY_BYTES`` with 413 in the Pub/Sub error shape,
    and read every API body as JSON whatever its declared content type (curl's default
    form type included): the API has no other body format."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        if scope["path"].startswith("/v1/") and b"json" not in headers.get(b"content-type", b""):
            headers[b"content-type"] = b"application/json"
            scope = {**scope, "headers": list(headers.items())}
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            await _too_large(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                raise BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except BodyTooLarge:
            await _too_large(scope, receive, send)


async def _discard_body(receive: Receive) -> None:
    """Read the request body to its end: a connection closed with unread bytes is reset
    by the kernel, and the client sees ECONNRESET instead of the answer."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _too_large(scope: Scope, receive: Receive, send: Send) -> None:
    response = error_response(
        413, "INVALID_ARGUMENT", f"Request payload size exceeds the limit: {MAX_BODY_BYTES} bytes."
    )
    await response(scope, receive, send)


class Metrics(HttpMiddleware):
    """Count requests and time them per route template."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = [500]

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            route = _route_name(scope)
            HTTP_REQUESTS.labels(scope["method"], route, str(status[0])).inc()
            HTTP_SECONDS.labels(route).observe(time.perf_counter() - started)


def _route_name(scope: Scope) -> str:
    route = scope.get("route")
    name = getattr(route, "name", None)
    return str(name) if name else "unmatched"
