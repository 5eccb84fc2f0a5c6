"""Decoded messages files, kept in memory by the process that wrote or read them.

A dispatcher reads the messages its topic's publisher just committed, and a
drain of a backlog reads a file a few thousand rows at a time: each read used
to decode the parquet file again (a 1,000-row answer from an 8,000-row file
decoded all 8,000 rows eight times; a single message published and delivered at
once was written and decoded within the same millisecond). Data files are
immutable, so a decoded file is valid for as long as its path exists: this
cache keeps the most recently used ones, by their Arrow size, for every table
of the process.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

import pyarrow as pa

from lakepubsub import constants, metrics


class DecodedFiles:
    """A least-recently-used map of (table uri, file path) to the file's rows."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # Each file's rows and their size, taken once: ``Table.nbytes`` walks every
        # buffer on each call (13 µs for a one-message file), its total buffer size not.
        self._rows: OrderedDict[tuple[str, str], tuple[pa.Table, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, uri: str, path: str) -> pa.Table | None:
        with self._lock:
            kept = self._rows.get((uri, path))
            if kept is not None:
                self._rows.move_to_end((uri, path))
        rows = None if kept is None else kept[0]
        (metrics.DECODED_HITS if rows is not None else metrics.DECODED_MISSES).inc()
        return rows

    def clear(self) -> None:
        """Keep nothing (as after a restart)."""
        with self._lock:
            self._rows.clear()
            self._bytes = 0

    def holds(self, uri: str, path: str) -> bool:
        """Whether the file is kept (neither used nor counted)."""
        with self._lock:
            return (uri, path) in self._rows

    def put(self, uri: str, path: str, rows: pa.Table) -> None:
        size = rows.get_total_buffer_size()
        if size > self.max_bytes // 4:  # one file must not push out all the others
            return
        with self._lock:
            old = self._rows.pop((uri, path), None)
            if old is not None:
                self._bytes -= old[1]
            self._rows[(uri, path)] = (rows, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, gone) = self._rows.popitem(last=False)
                self._bytes -= gone


# Files read ahead at once: their time is the object store's (GETs), not CPU.
READ_AHEAD_THREADS = 4


class ReadAhead:
    """Files decoded ahead of sequential readers, on threads of their own.

    A subscription draining a backlog reads its topic's files in offset order,
    each decoded on its dispatcher's thread when first read; on S3 each also
    waits for its requests (a HEAD and GETs, tens of milliseconds each).
    ``MessagesTable.read_range`` on S3 asks for the next files once it reads one,
    and the dispatcher's read of such a file finds it kept or waits for the
    decode in flight rather than making its own. Not on a local disk: there the
    decode is CPU, which another thread only moves (measured: a StreamingPull
    drain took 0.3-1.1 us more server CPU per message with it).

    What is decoded ahead and not read yet is at most ``budget`` file bytes for
    the whole process, a quarter of the decoded files' memory, so that readers
    of many topics do not push out each other's files before reading them (each
    such file would cost its requests again).
    """

    def __init__(self, decoded: DecodedFiles, budget: int) -> None:
        self._decoded = decoded
        self._budget = budget
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], Future[pa.Table]] = {}
        self._unread: dict[tuple[str, str], int] = {}  # file bytes, by file
        self._unread_bytes = 0
        # Daemon threads of its own, not a ThreadPoolExecutor, whose exit waits for
        # every queued decode: a read ahead is never needed, and one waiting on an
        # unreachable store must not hold up a process's shutdown.
        self._work: queue.SimpleQueue[tuple[Future[pa.Table], Callable[[], pa.Table]]] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []

    def start(self, uri: str, path: str, size: int, decode: Callable[[], pa.Table]) -> bool:
        """Decode the file (``size`` bytes) on a read-ahead thread (``decode`` keeps
        it), unless it is kept or on its way; False if the budget is spent."""
        key = (uri, path)
        with self._lock:
            if key in self._unread or self._decoded.holds(uri, path):
                return True
            if self._unread_bytes + size > self._budget:
                # Files pushed out of the decoded files unread free their share.
                self._unread = {
                    k: n
                    for k, n in self._unread.items()
                    if k in self._pending or self._decoded.holds(*k)
                }
                self._unread_bytes = sum(self._unread.values())
                if self._unread_bytes + size > self._budget:
                    return False
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._decode, name=f"read-ahead-{i}", daemon=True)
                    for i in range(READ_AHEAD_THREADS)
                ]
                for thread in self._threads:
                    thread.start()
            future: Future[pa.Table] = Future()
            self._work.put((future, decode))
            self._pending[key] = future
            self._unread[key] = size
            self._unread_bytes += size
        metrics.READ_AHEADS.inc()
        future.add_done_callback(lambda _: self._done(key))
        return True

    def read(self, uri: str, path: str) -> pa.Table | None:
        """A reader reads the file now: the rows of its decode in flight, once done
        (None: none in flight, or it failed, and the caller decodes it)."""
        key = (uri, path)
        with self._lock:
            future = self._pending.get(key)
            self._unread_bytes -= self._unread.pop(key, 0)
        if future is None:
            return None
        try:
            return future.result()
        except Exception:  # the caller's own decode reports what is wrong
            return None

    def _decode(self) -> None:
        while True:
            future, decode = self._work.get()
            future.set_running_or_notify_cancel()
            try:
                future.set_result(decode())
            except Exception as exc:  # the reader decodes the file itself
                future.set_exception(exc)

    def _done(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._pending.pop(key, None)


# One per process: every messages table handle of every thread shares it.
DECODED = DecodedFiles(constants.DECODED_FILES_BYTES)
READ_AHEAD = ReadAhead(DECODED, DECODED.max_bytes // 4)
