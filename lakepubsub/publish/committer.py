"""What a committer thread and the callers handing it work share: the queue, its
condition, and the stop (a topic's ``TopicPublisher``, the process's ``Intake``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from lakepubsub import errors

_Request = TypeVar("_Request")


class Committer(Generic[_Request]):
    """Requests queued for one committer thread, under one condition.

    A subclass runs the thread (``_thread``) and takes from ``_queue`` while it
    holds ``_cond``; ``close`` lets it commit what is queued, then waits for it.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[_Request] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self._committed_at = 0.0  # time.monotonic() when the last commit here started

    def _enqueue(self, request: _Request) -> None:
        """Queue ``request`` (the caller holds ``_cond``), unless closing."""
        if self._closed:
            raise errors.Unavailable("the publisher is shutting down")
        self._queue.append(request)

    def _flush_window(self, flush_s: float, *, while_: Callable[[], bool]) -> None:
        """Wait (holding ``_cond``) until ``flush_s`` after the last commit started, while
        ``while_()`` holds and no close came: what arrives meanwhile joins this commit."""
        opens = self._committed_at + flush_s
        while while_() and not self._closed:
            remaining = opens - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(timeout=remaining)

    def close(self) -> None:
        """Commit everything queued, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
