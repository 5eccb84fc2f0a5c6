"""The peer calls: gRPC with raw bytes (grpcio's generic handlers), a server and a
client on one asyncio loop per process. A publish is an Arrow IPC stream of the
columns; a pull's answer an Arrow IPC stream of the deliveries (``codec.py``); the
rest is JSON. A failure the owner reports (an error class of
``lakepubsub.errors``) is raised as that class; an owner that cannot be reached
raises ``Unreachable``, and the caller does the work itself. Every call carries
the callee's token: only someone who can list the lake can call a peer, and a
call that reaches the wrong process (a reused address) is refused."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

import grpc
import orjson

from lakepubsub import errors, metrics
from lakepubsub.messages import Pull, ReceivedMessage
from lakepubsub.peering import codec
from lakepubsub.peering.membership import Member
from lakepubsub.peering.ownership import Owner
from lakepubsub.resources.names import SubscriptionName

T = TypeVar("T")

PORT_RANGE = 64
_MAX_MESSAGE = 96 * 1024 * 1024  # a group commit is at most 64 MiB of messages
_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
]
# A peer that drops connection attempts (a closed port range between hosts) must
# fail the first call within about a second, not grpcio's default 20 s.
_CLIENT_OPTIONS = [
    *_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 1000),
    ("grpc.max_reconnect_backoff_ms", 5000),
]
_SERVICE = "/lakepubsub.peer.v1.Peer/"
_TOKEN = "lakepubsub-peer-token"
_ERROR = "lakepubsub-error"

_Context = Any  # grpc.aio.ServicerContext[bytes, bytes]


class Unreachable(Exception):
    """The owner could not be asked (down, refused, another process at its address)."""


# -- the server ------------------------------------------------------------------------------


async def start_server(
    handlers: grpc.GenericRpcHandler, bind_host: str, first_port: int
) -> tuple[grpc.aio.Server, int]:
    """Serve ``handlers`` on ``first_port`` or the next free one of ``PORT_RANGE`` (any
    free port when 0); the server and its port."""
    # grpcio binds with SO_REUSEPORT by default: two processes could then share a
    # port, and calls meant for one would reach the other.
    server = grpc.aio.server(options=[*_OPTIONS, ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((handlers,))
    port = 0
    # A fixed port is the first of a range: each worker of a multi-worker server
    # takes the next free one (a deployment opens the range between its tasks).
    for candidate in range(first_port, first_port + PORT_RANGE) if first_port else [0]:
        try:
            port = server.add_insecure_port(f"{_bracketed(bind_host)}:{candidate}")
        except RuntimeError:  # taken
            continue
        break
    if not port:
        raise RuntimeError(f"no free peer port in {first_port}-{first_port + PORT_RANGE - 1}")
    await server.start()
    return server, port


class Handlers(grpc.GenericRpcHandler):
    """The peer server's methods; bytes in, bytes out. ``notices``: methods whose
    text body is handled at once and answered with nothing."""

    def __init__(
        self,
        engine: Owner,
        me: Callable[[], Member | None],
        notices: dict[str, Callable[[str], None]],
    ) -> None:
        self._engine = engine
        self._me = me
        self._methods: dict[str, Any] = {
            _SERVICE + "Publish": grpc.unary_unary_rpc_method_handler(self._publish),
            _SERVICE + "Pull": grpc.unary_unary_rpc_method_handler(self._pull),
            _SERVICE + "Ack": grpc.unary_unary_rpc_method_handler(self._ack),
        }
        for name, handle in notices.items():
            self._methods[_SERVICE + name] = grpc.unary_unary_rpc_method_handler(
                self._notice(handle)
            )

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        return self._methods.get(handler_call_details.method)

    async def _answer(self, context: _Context, work: Callable[[], Future[T]]) -> T | None:
        me = self._me()
        token = dict(context.invocation_metadata() or ()).get(_TOKEN)
        if me is None or not isinstance(token, str) or not secrets.compare_digest(token, me.token):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not this peer")
        try:
            if self._engine.lookups_need_no_io():
                future = work()
            else:  # the catalog must be read first: not on this loop
                future = await asyncio.to_thread(work)
            return await asyncio.wrap_future(future)
        except errors.LakePubSubError as exc:
            context.set_trailing_metadata(((_ERROR, type(exc).__name__),))
            await context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        return None

    def _notice(self, handle: Callable[[str], None]) -> Callable[[bytes, _Context], Any]:
        async def notice(body: bytes, context: _Context) -> bytes:
            def work() -> Future[None]:
                handle(body.decode())
                return done(None)

            await self._answer(context, work)
            return b""

        return notice

    async def _publish(self, body: bytes, context: _Context) -> bytes:
        size = int.from_bytes(body[:4], "big")
        head = orjson.loads(body[4 : 4 + size])
        columns = codec.from_ipc(body[4 + size :])
        engine = self._engine
        ids = await self._answer(
            context, lambda: engine.publish_forwarded(str(head["topic"]), columns)
        )
        first = int(ids[0]) if ids else 0
        return orjson.dumps({"first": first})

    async def _pull(self, body: bytes, context: _Context) -> bytes:
        doc = orjson.loads(body)
        name = SubscriptionName.parse(doc["subscription"])
        engine = self._engine
        started: list[Future[Sequence[ReceivedMessage]]] = []

        def pull() -> Future[Sequence[ReceivedMessage]]:
            started.append(engine.pull_here(name, Pull.from_json(doc)))
            return started[0]

        try:
            got = await self._answer(context, pull)
        except asyncio.CancelledError:  # the caller withdrew its pull
            if started:
                engine.withdraw(name, started[0])
            raise
        return codec.deliveries_to_ipc(got or [])

    async def _ack(self, body: bytes, context: _Context) -> bytes:
        doc = orjson.loads(body)
        name = SubscriptionName.parse(doc["subscription"])
        engine = self._engine
        failures = await self._answer(
            context, lambda: engine.acknowledge_here(name, list(doc["ack_ids"]), doc["deadline_s"])
        )
        return orjson.dumps(failures or {})


# -- the client ------------------------------------------------------------------------------


class Client:
    """Calls to other members from any thread, run on the peer server's ``loop``
    with grpcio's asyncio channels (the blocking channel's ``future()`` started a
    thread per call). A member that cannot be reached goes to ``forget``; one
    that answered to ``answered``."""

    def __init__(
        self, *, forget: Callable[[Member, bool], None], answered: Callable[[Member], None]
    ) -> None:
        self._forget = forget
        self._answered = answered
        self._channels: dict[str, tuple[Member, grpc.aio.Channel]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # None: stopped

    def call(
        self, member: Member, method: str, body: bytes, timeout_s: float, *, quiet: bool = False
    ) -> Future[bytes]:
        loop = self.loop
        if loop is None:
            stopped: Future[bytes] = Future()
            stopped.set_exception(Unreachable("peering has stopped"))
            return stopped
        return asyncio.run_coroutine_threadsafe(
            self._acall(member, method, body, timeout_s, quiet), loop
        )

    async def _acall(
        self, member: Member, method: str, body: bytes, timeout_s: float, quiet: bool = False
    ) -> bytes:
        known = self._channels.get(member.address)  # only this loop's thread touches it
        if known is None or known[0] != member:
            if known is not None:
                await known[1].close()
            known = (member, grpc.aio.insecure_channel(member.address, options=_CLIENT_OPTIONS))
            self._channels[member.address] = known
        call: Any = known[1].unary_unary(_SERVICE + method)
        try:
            answer: bytes = await call(body, timeout=timeout_s, metadata=((_TOKEN, member.token),))
        except grpc.aio.AioRpcError as exc:
            raise self._failure(member, exc, quiet) from None
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller withdrew the call (``then``)
            # The call alone was cancelled (its channel closed): not done there.
            raise Unreachable(f"{member.address}: cancelled") from exc
        self._answered(member)
        return answer

    def _failure(self, member: Member, exc: grpc.RpcError, quiet: bool = False) -> Exception:
        failed: Any = exc  # a grpc.Call as well as an RpcError
        trailing: dict[str, Any] = dict(failed.trailing_metadata() or ())
        kind = trailing.get(_ERROR)
        details = failed.details() or ""
        if isinstance(kind, str):
            cls = getattr(errors, kind, None)
            if isinstance(cls, type) and issubclass(cls, errors.LakePubSubError):
                return cls(details)
        if failed.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # it may have done the work
            return errors.Unavailable(f"the topic's owner {member.address} did not answer in time")
        # Refused, reset, the wrong token, or something other than a peer at that
        # address (a proxy answering HTTP/2): the work was not done there.
        self._forget(member, quiet)
        metrics.PEER_UNREACHABLE.inc()
        return Unreachable(f"{member.address}: {details}")

    async def close(self) -> None:
        channels = [c for _, c in self._channels.values()]
        self._channels.clear()
        for channel in channels:
            await channel.close()


def done(value: T) -> Future[T]:
    future: Future[T] = Future()
    future.set_result(value)
    return future


def then(
    source: Future[bytes],
    convert: Callable[[bytes], T],
    *,
    orphan: Callable[[T], None] | None = None,
) -> Future[T]:
    """``convert`` of ``source``'s answer. Cancelling the result cancels the call;
    an answer that arrives for a cancelled result goes to ``orphan``."""
    result: Future[T] = Future()

    def finished(answer: Future[bytes]) -> None:
        if answer.cancelled():
            result.cancel()
            return
        try:
            value = convert(answer.result())
        except BaseException as exc:
            with contextlib.suppress(InvalidStateError):
                result.set_exception(exc)
            return
        try:
            result.set_result(value)
        except InvalidStateError:
            if orphan is not None:
                orphan(value)

    source.add_done_callback(finished)
    result.add_done_callback(lambda r: r.cancelled() and source.cancel())
    return result


def advertised(bind_host: str) -> str:
    if bind_host in ("0.0.0.0", "::", ""):
        return socket.gethostbyname(socket.gethostname())
    return bind_host


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
