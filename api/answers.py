"""The engine's answers brought to a door's event loop, many at a time (both doors).

The engine answers a request on one of its threads, through a
``concurrent.futures.Future``; a door's coroutine awaits it on the event loop.
``asyncio.wrap_future`` wakes the loop once per future: a write to the loop's
self-pipe, a system call that gives up the interpreter lock and must win it back.
The intake's committer answers every publish of a flush window in a row, and with
a hundred dispatcher threads running each of those waits could last a switch
interval: at 500 single-message publishes a second over 100 topics the committer
spent about a quarter of its time there. ``of`` queues an outcome for the loop
and wakes it only when nothing was queued, so a commit's hundreds of answers cost
one wake. asyncio has no batched form of ``wrap_future``, hence this.

Semantics are ``wrap_future``'s: the awaitable has the future's result, exception
or cancellation, and cancelling the awaitable (the client went away) cancels the
future, which withdraws what has not started.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class _Loop:
    """The answers waiting for one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: list[tuple[Future[Any], asyncio.Future[Any]]] = []

    def wrap(self, future: Future[T]) -> asyncio.Future[T]:
        waiter: asyncio.Future[T] = self._loop.create_future()
        if future.done():
            _copy(future, waiter)
            return waiter
        waiter.add_done_callback(lambda w: w.cancelled() and future.cancel())
        future.add_done_callback(lambda f: self._done(f, waiter))
        return waiter

    def _done(self, future: Future[Any], waiter: asyncio.Future[Any]) -> None:
        with self._lock:
            first = not self._ready
            self._ready.append((future, waiter))
        if first:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for future, waiter in ready:
            _copy(future, waiter)


def _copy(future: Future[Any], waiter: asyncio.Future[Any]) -> None:
    if waiter.done():
        return
    if future.cancelled():
        waiter.cancel()
        return
    exc = future.exception()
    if exc is not None:
        waiter.set_exception(exc)
    else:
        waiter.set_result(future.result())


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop] = weakref.WeakKeyDictionary()
_LOOPS_LOCK = threading.Lock()


def of(future: Future[T]) -> asyncio.Future[T]:
    """``future``'s outcome, awaitable on the running event loop (``asyncio.wrap_future``,
    with the loop woken once for many)."""
    loop = asyncio.get_running_loop()
    found = _LOOPS.get(loop)
    if found is None:
        with _LOOPS_LOCK:
            found = _LOOPS.setdefault(loop, _Loop(loop))
    return found.wrap(future)
