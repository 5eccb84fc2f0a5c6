"""REST and gRPC on one port: a uvicorn protocol that looks at a connection's first bytes.

An HTTP/2 connection (the client preface, or ALPN ``h2`` under TLS) is gRPC: its
bytes are relayed, unchanged, to this process's grpcio server on a loopback
port. Anything else is HTTP/1.1 and is handed to uvicorn's own protocol on the
same transport, so REST pays nothing for the sniffing.

Written by hand because neither grpcio nor uvicorn accepts a connection another
server has already accepted: grpcio listens only on addresses of its own, and
uvicorn's HTTP/2 is not gRPC. The relay parses nothing; HTTP/2 stays grpcio's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar, cast

from uvicorn.config import Config
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.server import ServerState

from api.grpc.door import GrpcDoor

log = logging.getLogger(__name__)

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# The door of this process, set by the app's lifespan (each uvicorn worker has one).
_door: list[GrpcDoor] = []


def install(door: GrpcDoor | None) -> None:
    _door.clear()
    if door is not None:
        _door.append(door)


class OnePortProtocol(asyncio.Protocol):
    """uvicorn's ``http`` protocol class for ``lakepubsub serve``."""

    # uvicorn offers these through ALPN when it serves TLS.
    alpn_protocols: ClassVar[list[str]] = ["h2", "http/1.1"]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.config = config
        self.server_state = server_state
        self.app_state = app_state
        self.loop = _loop or asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they act as one.
        self.transport = cast(asyncio.Transport, transport)
        ssl_object = self.transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self._switch(ssl_object.selected_alpn_protocol() == "h2")
            return
        self.server_state.connections.add(self)  # type: ignore[arg-type]
        self.idle = self.loop.call_later(self.config.timeout_keep_alive, self.transport.close)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) < len(HTTP2_PREFACE) and HTTP2_PREFACE.startswith(self.buffer):
            return
        self._switch(self.buffer.startswith(HTTP2_PREFACE))

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()

    def eof_received(self) -> bool | None:
        return None

    def shutdown(self) -> None:
        """uvicorn stopping: a connection that sent nothing yet just closes."""
        if self.transport is not None:
            self.transport.close()

    def _forget(self) -> None:
        self.server_state.connections.discard(self)
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None

    def _switch(self, http2: bool) -> None:
        self._forget()
        transport = self.transport
        assert transport is not None
        data, self.buffer = self.buffer, b""
        protocol: asyncio.Protocol
        if http2:
            if not _door:
                log.warning("an HTTP/2 connection arrived but no gRPC server runs; closed")
                transport.close()
                return
            protocol = Relay(_door[0], transport, self.server_state)
        else:
            protocol = AutoHTTPProtocol(  # type: ignore[call-arg]
                config=self.config,
                server_state=self.server_state,
                app_state=self.app_state,
                _loop=self.loop,
            )
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if data:
            protocol.data_received(data)


class _Upstream(asyncio.Protocol):
    """The relay's connection to the gRPC server."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    def data_received(self, data: bytes) -> None:
        self.relay.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.upstream_lost()

    def pause_writing(self) -> None:
        self.relay.client.pause_reading()

    def resume_writing(self) -> None:
        self.relay.client.resume_reading()


class Relay(asyncio.Protocol):
    """Copies bytes both ways between a client and the gRPC server, with flow control."""

    def __init__(
        self, door: GrpcDoor, client: asyncio.Transport, server_state: ServerState
    ) -> None:
        self.door = door
        self.client = client
        self.server_state = server_state
        self.upstream: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.local_port = 0
        self.closed = False
        self.connecting: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.server_state.connections.add(self)  # type: ignore[arg-type]
        self.client.pause_reading()
        self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        try:
            upstream, _ = await asyncio.get_running_loop().create_connection(
                lambda: _Upstream(self), *self.door.target
            )
        except OSError as exc:
            log.warning("cannot reach the gRPC server: %s", exc)
            self.client.close()
            return
        if self.closed:
            upstream.close()
            return
        self.upstream = upstream
        self.local_port = upstream.get_extra_info("sockname")[1]
        peer = self.client.get_extra_info("peername")
        match peer:
            case (host, port, *_):  # (host, port), and for IPv6 flow info and scope
                self.door.peers[self.local_port] = (str(host), int(port))
            case _:  # a unix socket: a local client
                self.door.peers[self.local_port] = ("127.0.0.1", 0)
        for data in self.pending:
            upstream.write(data)
        self.pending.clear()
        self.client.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.upstream is not None:
            self.upstream.write(data)
        else:
            self.pending.append(data)

    def eof_received(self) -> bool | None:
        if self.upstream is not None and self.upstream.can_write_eof():
            self.upstream.write_eof()
        return None

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server_state.connections.discard(self)
        if self.upstream is not None:
            self.upstream.close()

    def upstream_lost(self) -> None:
        self.door.peers.pop(self.local_port, None)
        self.client.close()

    def shutdown(self) -> None:
        """uvicorn stopping: the gRPC server ends its streams (UNAVAILABLE) and closes."""
        self.door.drain()
