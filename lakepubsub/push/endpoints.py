"""Sending push requests: one HTTP client for every endpoint, with the safety rules
applied where connections are made.

The client's network backend connects only to addresses the ``Guard`` checked
for the request being sent (the request names its endpoint through a context
variable; a connection opened for anything else is refused). Pooled
connections are keyed by host name, so TLS is verified against the endpoint's
own name. The backend also watches each response's first bytes for an
informational ``102 Processing``, which Pub/Sub counts as an acknowledgement
although an HTTP client skips it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import ssl
import time
import typing
from dataclasses import dataclass, field
from http import HTTPStatus

import httpcore
import httpx

from lakepubsub import errors
from lakepubsub.push.envelope import PushRequest
from lakepubsub.push.flow import Outcome
from lakepubsub.push.safety import Endpoint, Guard, IPAddress, Origin
from lakepubsub.settings.push import PushSettings

log = logging.getLogger(__name__)

# Status codes that acknowledge a push (seed 003).
ACK_STATUSES = frozenset({102, 200, 201, 202, 204})
# The informational (1xx) status codes; of them, 102 Processing acknowledges a push.
INFORMATIONAL = range(HTTPStatus.CONTINUE, HTTPStatus.OK)
PROCESSING = int(HTTPStatus.PROCESSING)
# Status codes that also ask the sender to slow down (seed 000's UNAVAILABLE).
PUSHBACK_STATUSES = frozenset({429, 503})
# Failures of a request that got no answer on a reused connection: retried once.
_STALE_CONNECTION = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
# How long a resolved and checked address list is reused for new connections.
RESOLVE_TTL_S = 30.0
# Bytes of a response's head inspected for informational responses.
MAX_SNIFF_BYTES = 8 * 1024
# Idle pooled connections are closed after this.
KEEPALIVE_EXPIRY_S = 30.0


@dataclass
class _Attempt:
    """The request being sent in the current task, and what was seen of its response."""

    endpoint: Endpoint
    resolver: _Resolver
    processing: asyncio.Event = field(default_factory=asyncio.Event)
    informational: list[int] = field(default_factory=list)
    _head: bytes = b""
    _done: bool = False

    def feed(self, data: bytes) -> None:
        if self._done:
            return
        self._head = (self._head + data)[:MAX_SNIFF_BYTES]
        while True:
            line_end = self._head.find(b"\r\n")
            if line_end < 0:
                self._done = len(self._head) >= MAX_SNIFF_BYTES
                return
            version, _, rest = self._head[:line_end].partition(b" ")
            code = rest.split(b" ", 1)[0]
            if not version.startswith(b"HTTP/") or not code.isdigit():
                self._done = True
                return
            status = int(code)
            if status not in INFORMATIONAL:
                self._done = True
                return
            self.informational.append(status)
            if status == PROCESSING:
                self.processing.set()
            head_end = self._head.find(b"\r\n\r\n")
            if head_end < 0:
                return
            self._head = self._head[head_end + 4 :]


_current: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar(
    "lakepubsub_push_attempt", default=None
)


class _Resolver:
    """Resolved, checked addresses per origin, reused for ``RESOLVE_TTL_S``."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        self._cache: dict[Origin, tuple[float, list[IPAddress]]] = {}

    async def addresses(self, origin: Origin) -> list[IPAddress]:
        now = time.monotonic()
        cached = self._cache.get(origin)
        if cached is not None and now - cached[0] < RESOLVE_TTL_S:
            return cached[1]
        addresses = await self._guard.resolve(origin)
        self._cache[origin] = (now, addresses)
        return addresses


class _WatchedStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = await self._inner.read(max_bytes, timeout)
        attempt = _current.get()
        if attempt is not None:
            attempt.feed(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        inner = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return _WatchedStream(inner)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to the checked addresses of the endpoint being pushed to."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        attempt = _current.get()
        origin = attempt.endpoint.origin if attempt is not None else None
        if attempt is None or origin is None or (origin.host, origin.port) != (host, port):
            raise httpcore.ConnectError(f"connection to {host}:{port} outside a push attempt")
        failure: Exception | None = None
        for address in await attempt.resolver.addresses(origin):
            try:
                stream = await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return _WatchedStream(stream)
        raise failure or httpcore.ConnectError(f"no address to connect to for {host}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("push endpoints are never unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _PushTransport(httpx.AsyncHTTPTransport):
    def __init__(self, settings: PushSettings) -> None:
        verify: ssl.SSLContext | bool = True
        if settings.ca_bundle:
            verify = ssl.create_default_context(cafile=settings.ca_bundle)
        super().__init__(verify=verify, trust_env=False)
        ssl_context = verify if isinstance(verify, ssl.SSLContext) else None
        if ssl_context is None:
            ssl_context = httpx.create_ssl_context(verify=True, trust_env=False)
        # httpx builds its connection pool without a way to pass a network
        # backend; replace the pool with one that has ours (tests/push cover it).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=None,
            max_keepalive_connections=settings.endpoint_concurrency * 4,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
            network_backend=_GuardedBackend(httpcore.AnyIOBackend()),
        )


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    status: int | None  # None: no response (timeout, connection error, refused endpoint)
    error: str = ""
    unsafe: bool = False  # the endpoint is refused by the push settings


class Sender:
    """Posts push requests; one per process, shared by every subscription's loop."""

    def __init__(self, settings: PushSettings) -> None:
        self._settings = settings
        self._guard = Guard(settings)
        self._resolver = _Resolver(self._guard)
        self._client = httpx.AsyncClient(
            transport=_PushTransport(settings), follow_redirects=False, trust_env=False
        )
        self._limits: dict[Origin, asyncio.Semaphore] = {}
        self._busy: dict[Origin, int] = {}

    def _limit(self, origin: Origin) -> asyncio.Semaphore:
        semaphore = self._limits.get(origin)
        if semaphore is None:
            semaphore = asyncio.Semaphore(self._settings.endpoint_concurrency)
            self._limits[origin] = semaphore
        return semaphore

    def available(self, origin: Origin) -> int:
        """Requests the endpoint's concurrency limit admits now (at least 1, to make progress)."""
        return max(1, self._settings.endpoint_concurrency - self._busy.get(origin, 0))

    async def send(
        self,
        endpoint: Endpoint,
        request: PushRequest,
        *,
        authorization: str | None,
        timeout_s: float,
    ) -> Result:
        """POST one push request; the outcome is an ack, a nack or a push-back."""
        origin = endpoint.origin
        self._busy[origin] = self._busy.get(origin, 0) + 1
        try:
            async with self._limit(origin):
                attempt = _Attempt(endpoint, self._resolver)
                token = _current.set(attempt)
                try:
                    return await self._send(attempt, request, authorization, timeout_s)
                finally:
                    _current.reset(token)
        finally:
            self._busy[origin] -= 1

    async def _send(
        self, attempt: _Attempt, request: PushRequest, authorization: str | None, timeout_s: float
    ) -> Result:
        endpoint = attempt.endpoint
        try:
            await self._resolver.addresses(endpoint.origin)
        except errors.InvalidArgument as exc:
            return Result(Outcome.NACK, None, exc.message, unsafe=True)
        except errors.LakePubSubError as exc:
            return Result(Outcome.NACK, None, exc.message)
        headers = dict(request.headers)
        if authorization:
            headers["authorization"] = authorization
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, self._settings.connect_timeout_s))
        http_request = self._client.build_request(
            "POST", endpoint.url, content=request.body, headers=headers, timeout=timeout
        )
        exchange = asyncio.ensure_future(self._exchange(http_request))
        processing = asyncio.ensure_future(attempt.processing.wait())
        try:
            done, _ = await asyncio.wait(
                {exchange, processing}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            processing.cancel()
        if exchange in done:
            status, error = exchange.result()
        else:
            exchange.cancel()
            status, error = None, "timed out (ack deadline)"
            await asyncio.gather(exchange, return_exceptions=True)
        if PROCESSING in attempt.informational:
            return Result(Outcome.ACK, PROCESSING)
        if status is None:
            return Result(Outcome.NACK, None, error)
        if status in ACK_STATUSES:
            return Result(Outcome.ACK, status)
        if status in PUSHBACK_STATUSES:
            return Result(Outcome.PUSHBACK, status)
        return Result(Outcome.NACK, status)

    async def _exchange(self, request: httpx.Request) -> tuple[int | None, str]:
        try:
            try:
                response = await self._client.send(request, stream=True)
            except _STALE_CONNECTION:
                # Most often a pooled keep-alive connection the endpoint had closed:
                # once more on a fresh one (push is at least once; a duplicate is allowed).
                response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"
        try:
            seen = 0
            async for chunk in response.aiter_raw():
                seen += len(chunk)
                if seen > self._settings.max_response_bytes:
                    break  # the rest is dropped with the connection
        except httpx.HTTPError:
            pass  # the status is what counts
        finally:
            await response.aclose()
        return response.status_code, ""

    async def aclose(self) -> None:
        await self._client.aclose()
