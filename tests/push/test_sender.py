"""The push sender against raw sockets: what a connection that dies without an answer does."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

from lakepubsub.push.endpoints import Sender
from lakepubsub.push.envelope import PushRequest
from lakepubsub.push.flow import Outcome
from lakepubsub.push.safety import parse_endpoint
from lakepubsub.settings.push import PushSettings

NO_CONTENT = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"


class DroppingServer:
    """Answers requests on 127.0.0.1, but resets the connection of the ones in ``drop``
    (counted from 1) after reading them, without a byte of answer."""

    def __init__(self, drop: set[int]) -> None:
        self.drop = drop
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/push"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                self.requests += 1
                if self.requests in self.drop:
                    # SO_LINGER 0: close with a reset, as a crashing endpoint would.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                conn.sendall(NO_CONTENT)

    def close(self) -> None:
        self._listener.close()


def _send_all(url: str, count: int) -> list[Outcome]:
    async def run() -> list[Outcome]:
        sender = Sender(PushSettings())
        try:
            request = PushRequest(b'{"message": {}}', {"content-type": "application/json"}, "1")
            endpoint = parse_endpoint(url)
            results = [
                await sender.send(endpoint, request, authorization=None, timeout_s=5.0)
                for _ in range(count)
            ]
            return [r.outcome for r in results]
        finally:
            await sender.aclose()

    return asyncio.run(run())


def test_a_connection_reset_without_an_answer_is_retried_once() -> None:
    server = DroppingServer(drop={2})
    try:
        assert _send_all(server.url, 3) == [Outcome.ACK] * 3
        assert server.requests == 4  # the dropped one went out twice
    finally:
        server.close()


def test_a_second_reset_is_a_nack() -> None:
    server = DroppingServer(drop={1, 2})
    try:
        assert _send_all(server.url, 2) == [Outcome.NACK, Outcome.ACK]
        assert server.requests == 3
    finally:
        server.close()
