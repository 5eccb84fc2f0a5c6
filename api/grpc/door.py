"""The gRPC server of one process, and what every call through it shares.

grpcio's asyncio server runs on a thread and event loop of its own, on a
loopback port that nobody is meant to dial: ``api.grpc.oneport`` hands it the
HTTP/2 connections that arrive on the public port, whose REST traffic uvicorn
serves. Calls authenticate and authorize exactly as REST requests do (the same
``api.auth`` rules), and engine errors leave as gRPC statuses through
``api.errors.rpc_status``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet
from prometheus_client import Counter
from pydantic import BaseModel, ValidationError

from api import auth
from api.errors import invalid_request, rpc_status
from api.grpc.streams import Streams
from api.grpc.wire import serialized
from lakepubsub import aio_loop, constants, errors
from lakepubsub.resources.iam import Principal
from lakepubsub.resources.names import validate_project
from lakepubsub.settings.doors import GrpcListen

log = logging.getLogger(__name__)
# One line per call, as uvicorn logs each REST request (``lakepubsub serve``
# configures it beside uvicorn's loggers).
ACCESS_LOG = logging.getLogger("api.grpc.access")

# Pub/Sub accepts publish requests up to 10 MB; protobuf framing adds little.
# Responses are bounded by the streams' outstanding-bytes limits and pull sizes.
MAX_RECEIVE_BYTES = 20 * 1024 * 1024
MAX_SEND_BYTES = 64 * 1024 * 1024
# Google's clients send keepalive pings every 30 s (some without calls in
# flight); grpc's default would answer them with GOAWAY "too_many_pings".
MIN_PING_INTERVAL_MS = 10_000
START_TIMEOUT_S = 30.0
# Streams get this long to end with UNAVAILABLE when the server stops.
STOP_GRACE_S = 5.0

GRPC_REQUESTS = Counter("lakepubsub_grpc_requests_total", "gRPC calls", ["method", "code"])

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    ("grpc.max_send_message_length", MAX_SEND_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.so_reuseport", 0),
]

M = TypeVar("M", bound=Message)
T = TypeVar("T", bound=BaseModel)
Handler = Callable[[Any, Any, "Call"], Awaitable[Message | bytes]]
# A method's request from its bytes, where ``parse`` is not enough.
Reader = Callable[[bytes], Any]
# Services' methods by name: the request's message type (or reader) and the handler.
Methods = dict[str, dict[str, tuple[type[Message] | Reader, Handler]]]
# Builds the server's method handlers for a door (``api.grpc.services.handlers``).
HandlerFactory = Callable[["GrpcDoor"], list[grpc.GenericRpcHandler]]


def project_of(path: str) -> str:
    prefix, _, project = path.partition("/")
    if prefix != "projects" or not project:
        raise errors.InvalidArgument(f"Invalid project {path!r}: expected projects/{{project}}")
    return validate_project(project)


class Call:
    """One call's context: who is calling, and the permission check for it."""

    def __init__(self, door: GrpcDoor, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.door = door
        self.context = context
        self._principal: Principal | None = None

    async def principal(self) -> Principal:
        if self._principal is None:
            authenticator = self.door.authenticator
            headers = []
            if authenticator.reads_headers:  # else not worth a call's metadata copied
                metadata = self.context.invocation_metadata() or ()
                headers = [
                    (key.encode("latin-1"), value.encode("latin-1"))
                    for key, value in metadata
                    if isinstance(value, str)
                ]
            scope = {"headers": headers, "client": self.door.client_address(self.context.peer())}
            self._principal = await authenticator.principal(scope)
        return self._principal

    async def check(self, rule: str, params: Mapping[str, str], body: Any = None) -> None:
        """Authenticate, then authorize as access rule ``rule`` (api/auth/rules.py RULES)."""
        principal = await self.principal()
        await auth.authorize(self.door.state, principal, rule, params, body)


class GrpcDoor:
    """Serves google.pubsub.v1 and google.iam.v1 on the engine of ``state``
    (the FastAPI app's state: ``engine``, ``policy_view``, ``auth_settings``)."""

    def __init__(self, state: Any, handlers: HandlerFactory) -> None:
        self.state = state
        self._handlers = handlers
        self.engine = state.engine
        self.authenticator = auth.Authenticator(state.auth_settings)
        # Local port of a connection forwarded from the public port -> the client's address.
        self.peers: dict[int, tuple[str, int]] = {}
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closing: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._serving: concurrent.futures.Future[None] | None = None
        self.streams = Streams()

    @property
    def target(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def start(self) -> None:
        # On the process's grpc.aio loop, with the peer server (lakepubsub/aio_loop.py).
        loop = aio_loop.GRPC.acquire()
        self._serving = asyncio.run_coroutine_threadsafe(self._run(), loop)
        if not self._ready.wait(START_TIMEOUT_S) or self._failure is not None:
            self.stop()
            raise RuntimeError("the gRPC server did not start") from self._failure

    def drain(self) -> None:
        """Begin stopping: streams end with UNAVAILABLE, calls in flight finish."""
        loop, stop = self.loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)

    def stop(self) -> None:
        self.drain()
        serving, self._serving = self._serving, None
        if serving is not None:  # a second stop does nothing
            concurrent.futures.wait([serving], STOP_GRACE_S + 5)
            aio_loop.GRPC.release()

    def client_address(self, peer: str) -> tuple[str, int] | None:
        """The real client of a call: forwarded connections are looked up by port."""
        host, _, port_text = peer.rpartition(":")
        if not port_text.isdigit():
            return None
        forwarded = self.peers.get(int(port_text))
        if forwarded is not None:
            return forwarded
        host = host.split(":", 1)[-1].strip("[]")
        return (host, int(port_text))

    def listen(self, server: grpc.aio.Server, where: GrpcListen) -> None:
        """Also listen at ``where`` by itself: Google's clients pointed there reach
        grpcio directly, without the one port's relay. The relay passes every byte
        through this process's event loop and interpreter lock: a StreamingPull drain
        cost ~10 % more server CPU per message through it (docs/architecture.md)."""
        if not where.address:
            return
        if where.tls_cert:
            with open(where.tls_key, "rb") as key, open(where.tls_cert, "rb") as cert:
                credentials = grpc.ssl_server_credentials([(key.read(), cert.read())])
            server.add_secure_port(where.address, credentials)
        else:
            server.add_insecure_port(where.address)
        log.info("gRPC also at %s", where.address)

    # -- the server ---------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._main()
        except BaseException as exc:  # reported to start(), or logged once running
            self._failure = exc
            log.exception("gRPC server failed")
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.closing = asyncio.Event()
        # Only when its lines would be printed: an interceptor costs every call.
        logged = ACCESS_LOG.isEnabledFor(logging.INFO)
        server = grpc.aio.server(
            options=SERVER_OPTIONS,
            maximum_concurrent_rpcs=constants.MAX_CONCURRENT_RPCS,
            interceptors=[AccessLog(self)] if logged else [],
        )
        server.add_generic_rpc_handlers(self._handlers(self))
        self.port = server.add_insecure_port("127.0.0.1:0")
        self.listen(server, GrpcListen.from_env())
        await server.start()
        self._ready.set()
        await self._stop.wait()
        self.closing.set()
        await server.stop(STOP_GRACE_S)


class AccessLog(grpc.aio.ServerInterceptor):
    """Logs each call when it ends, as uvicorn logs a REST request:
    ``127.0.0.1:50312 - "gRPC /google.pubsub.v1.Publisher/Publish" OK``."""

    def __init__(self, door: GrpcDoor) -> None:
        self.door = door

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        method: str = details.method
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._call(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            inner = handler.stream_stream
            wrapped = self._stream(method, inner) if inspect.isasyncgenfunction(inner) else None
            return grpc.stream_stream_rpc_method_handler(
                wrapped or self._call(method, inner),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _call(self, method: str, inner: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def logged(request: Any, context: Any) -> Any:
            try:
                response = await inner(request, context)
            except BaseException as exc:
                self._log(method, context, exc)
                raise
            self._log(method, context, None)
            return response

        return logged

    def _stream(self, method: str, inner: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
        async def logged(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                async for response in inner(request, context):
                    yield response
            except BaseException as exc:
                self._log(method, context, exc)
                raise
            self._log(method, context, None)

        return logged

    def _log(self, method: str, context: Any, exc: BaseException | None) -> None:
        code = context.code()
        if isinstance(code, grpc.StatusCode):
            name = code.name
        elif isinstance(exc, asyncio.CancelledError):
            name = "CANCELLED"
        elif exc is not None:
            name = "UNKNOWN"
        elif context.cancelled():
            name = "CANCELLED"
        else:
            name = "OK"
        client = self.door.client_address(context.peer())
        where = f"{client[0]}:{client[1]}" if client else context.peer()
        ACCESS_LOG.info('%s - "gRPC %s" %s', where, method, name)


# -- method handlers --------------------------------------------------------------------------


async def abort(context: grpc.aio.ServicerContext[Any, Any], exc: errors.LakePubSubError) -> None:
    code, details = rpc_status(exc)
    await context.abort(
        code, exc.message, trailing_metadata=(("grpc-status-details-bin", details),)
    )


def failure_of(exc: Exception, method: str) -> errors.LakePubSubError:
    if isinstance(exc, errors.LakePubSubError):
        return exc
    log.error("unhandled error in %s", method, exc_info=exc)
    return errors.Internal(f"internal error: {type(exc).__name__}")


def parse(request_type: type[M], raw: bytes) -> M:
    """A request from its bytes; malformed ones are INVALID_ARGUMENT (grpcio's own
    deserializer failure would answer INTERNAL), and so are ones with a field that
    the message does not have (protobuf would keep it and we would ignore it)."""
    request = decoded(request_type, raw)
    check_known(request, raw)
    return request


def decoded(request_type: type[M], raw: bytes) -> M:
    """A request from its bytes, with no check of its fields; malformed ones are
    INVALID_ARGUMENT."""
    try:
        return request_type.FromString(raw)
    except DecodeError as exc:
        raise errors.InvalidArgument(f"malformed {request_type.DESCRIPTOR.name}: {exc}") from exc


def check_known(request: Message, raw: bytes) -> None:
    """INVALID_ARGUMENT naming the first field of ``request`` (decoded from ``raw``)
    that its message type does not have, if there is one."""
    # Whether there is one at all, in C: dropping unknown fields changes the size
    # (half the cost of walking a publish request's messages in Python); the walk
    # then names it.
    size = request.ByteSize()
    request.DiscardUnknownFields()
    if request.ByteSize() != size:
        name = request.DESCRIPTOR.name
        unknown = _unknown_field(type(request).FromString(raw), name)
        raise errors.InvalidArgument(unknown or "Invalid request: unknown field")


def _unknown_field(message: Message, at: str) -> str | None:
    """Where ``message`` or a message inside it holds a field its type does not have."""
    found = _find_unknown(message)
    if found is None:
        return None
    path, holder, number = found
    return (
        f"Invalid request: unknown field number {number} in "
        f"{holder.DESCRIPTOR.full_name} at '{at}{path}'"
    )


def _find_unknown(message: Message) -> tuple[str, Message, int] | None:
    """The path to the first unknown field under ``message``, its holder and number.
    The path is built only when one is found: a publish request holds up to 1,000
    messages, each checked."""
    found = UnknownFieldSet(message)
    if len(found):
        return "", message, next(iter(found)).field_number
    for name, kind in _nested_fields(message.DESCRIPTOR):
        if kind == _SINGULAR:
            if message.HasField(name):
                hit = _find_unknown(getattr(message, name))
                if hit is not None:
                    return f".{name}{hit[0]}", hit[1], hit[2]
            continue
        values = getattr(message, name)
        for i, value in enumerate(values.values() if kind == _MAP else values):
            hit = _find_unknown(value)
            if hit is not None:
                return f".{name}[{i}]{hit[0]}", hit[1], hit[2]
    return None


_SINGULAR, _REPEATED, _MAP = "singular", "repeated", "map"


@functools.cache
def _nested_fields(descriptor: Descriptor) -> tuple[tuple[str, str], ...]:
    """The fields of a message type that hold messages of the API's own types (not
    protobuf's well-known ones such as Timestamp): where unknown fields may hide."""
    out = []
    for field in descriptor.fields:
        nested = field.message_type
        if nested is None:
            continue
        if nested.GetOptions().map_entry:
            value = nested.fields_by_name["value"].message_type
            if value is not None and not value.full_name.startswith("google.protobuf."):
                out.append((field.name, _MAP))
        elif not nested.full_name.startswith("google.protobuf."):
            out.append((field.name, _REPEATED if field.is_repeated else _SINGULAR))
    return tuple(out)


def unary(
    door: GrpcDoor, method: str, request_type: type[Message] | Reader, handler: Handler
) -> grpc.RpcMethodHandler[Any, Any]:
    """A unary method: its request read by ``parse`` (or by ``request_type`` itself, a
    reader of the method's own: ``api/grpc/publish_request.py``), then ``handler``."""
    read: Reader = (
        functools.partial(parse, request_type) if isinstance(request_type, type) else request_type
    )

    async def behavior(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Message | bytes:
        try:
            request = read(raw)
            response = await handler(door, request, Call(door, context))
        except Exception as exc:
            failure = failure_of(exc, method)
            GRPC_REQUESTS.labels(method, failure.status).inc()
            await abort(context, failure)
            raise AssertionError("abort returns only by raising") from None
        GRPC_REQUESTS.labels(method, "OK").inc()
        return response

    return grpc.unary_unary_rpc_method_handler(behavior, response_serializer=serialized)


def as_dict(message: Message) -> dict[str, Any]:
    """A request as the REST door's JSON (camelCase, defaults left out)."""
    return json_format.MessageToDict(message)


def validated(model: type[T], body: dict[str, Any], *, path_fields: tuple[str, ...] = ()) -> T:
    """A REST body model from a request's dict, less the fields that REST carries in
    the URL (``path_fields``); a field it refuses is INVALID_ARGUMENT worded as on
    the REST door."""
    try:
        return model.model_validate({k: v for k, v in body.items() if k not in path_fields})
    except ValidationError as exc:
        raise invalid_request(list(exc.errors())) from exc


def from_dict(body: dict[str, Any], response_type: type[M]) -> M:
    """An answer in Pub/Sub's JSON shape as the gRPC response; lakepubsub's extension
    fields (``truncationPolicy``) have no protobuf field and stay out."""
    return json_format.ParseDict(body, response_type(), ignore_unknown_fields=True)
