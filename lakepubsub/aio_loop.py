"""The process's one event loop for grpcio's asyncio API.

The peer server and its client (``peering/``) and the gRPC door (``api/grpc``)
all run on grpc.aio. grpcio (1.85) hands every completion of that API to one
poller thread, which wakes the event loops that used it through one socket they
all watch: each such loop wakes for every completion in the process, and the
loop that reads the socket first runs the other loops' completions by
``call_soon_threadsafe``, one more wake-up each. With a loop of its own for the
peer server beside the door's, every call of every client woke both threads and
most completions crossed between them (strace, publish -> callback at 200
msgs/s: the peer server's thread made 2,100 futex calls a second with no peer
to talk to). So the process runs a single loop, on a thread of its own, for
whoever needs one; it starts with the first user and stops when the last lets
go (``bench/results/ab-one-loop.md`` has the before and after).

The loop is uvloop's where it is installed (``uvicorn[standard]`` brings it on
Linux and macOS), else asyncio's; ``LAKEPUBSUB_GRPC_LOOP`` chooses
(``settings.grpc_loop``). grpc.aio runs on any asyncio loop. grpcio takes in a
call only after a turn of this one loop, so every call through the door is a
few turns, and uvloop's turns cost less. At 100 topics x 10 single-message
publishes a second (S3 bench, no storage delay, Google's Go client), one
process kept up in 3 runs of 3 on uvloop (publish p50 0.7-0.9 s, no failures,
60 s of server CPU) and in 1 of 5 on asyncio's loop (the others 244-2,198
failed publishes, 87-124 s of CPU); docs/operations.md has the figures.
"""

from __future__ import annotations

import asyncio
import threading

from lakepubsub import settings


class SharedLoop:
    """An event loop running on its own daemon thread while anyone holds it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._users = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def acquire(self) -> asyncio.AbstractEventLoop:
        """The running loop (started if nobody held it); ``release`` it when done."""
        with self._lock:
            if self._loop is None:
                loop = new_event_loop()
                running = threading.Event()
                loop.call_soon(running.set)
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                running.wait()
                self._loop, self._thread = loop, thread
            self._users += 1
            return self._loop

    def release(self) -> None:
        """Let go of the loop; the last user stops it and closes it."""
        with self._lock:
            self._users -= 1
            if self._users > 0 or self._loop is None:
                return
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if not loop.is_running():
            loop.close()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the kind ``LAKEPUBSUB_GRPC_LOOP`` names: uvloop's or asyncio's."""
    if settings.grpc_loop() == "uvloop":
        import uvloop  # noqa: PLC0415 — optional: asyncio's loop where it is not installed

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


# grpc.aio's loop for this process (the peer server and client, the gRPC door).
GRPC = SharedLoop("grpc-aio")
