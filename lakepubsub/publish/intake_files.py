"""The intake's data files on S3: written beside the commit that names them.

A Delta commit must name only files that are there, so a commit is two PUTs in a
row: the data file, then the log entry. On S3 Standard that is about 100 ms at
the median a publish waits for, after its flush window. Here the log entry
carries the file's bytes in its commitInfo (``NewFile.record``; Delta lets a
writer keep any JSON there), which makes the entry the rows' durable record: a
publish is answered once the entry landed, and the file's PUT runs at the same
time on a thread of this module. Readers in other processes take the rows from
the entry they read anyway to learn of the commit; one that reads the file and
finds it missing (its writer died between the two PUTs, or its PUT failed for
good) writes it again from the entry (``TableLog.restore_file``), with the same
bytes. docs/architecture.md ("The intake") has the numbers.

A commit that lost its version deletes its file once the file's PUT ended, so
that the PUT cannot land after the delete.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all

from lakepubsub import errors
from lakepubsub._lake import TableLog
from lakepubsub._lake.deltalog import NewFile

log = logging.getLogger(__name__)

PUT_THREADS = 2
# Tries of a file's PUT before it is left to readers to write from its commit.
PUT_ATTEMPTS = 4
PUT_PAUSE_S = 0.2
# How long closing waits for the files still on their way.
CLOSE_WAIT_S = 30.0


class FilePuts:
    """Data files on their way to the lake, each beside the commit naming it."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(PUT_THREADS, thread_name_prefix="intake-put")
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()

    def start(self, table: TableLog, new: NewFile) -> Future[None]:
        """Start writing ``new`` (``table.put_file``, retried)."""
        future = self._pool.submit(_put, table, new)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._ended)
        return future

    def discard(self, table: TableLog, new: NewFile, landing: Future[None]) -> None:
        """Delete the file of a commit that did not land, once its PUT ended."""
        wait_all([landing])
        table.discard([new.add])

    def close(self) -> None:
        """Wait (a bounded time) for the files still on their way, then stop."""
        with self._lock:
            pending = list(self._pending)
        _, late = wait_all(pending, timeout=CLOSE_WAIT_S)
        if late:
            log.warning("%d intake files still on their way at close", len(late))
        self._pool.shutdown(wait=False)

    def _ended(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)
        failure = future.exception()
        if failure is not None:
            log.warning("an intake file was not written; its commit holds it", exc_info=failure)


def _put(table: TableLog, new: NewFile) -> None:
    for attempt in range(1, PUT_ATTEMPTS + 1):
        try:
            table.put_file(new)
            return
        except errors.Unavailable:
            if attempt == PUT_ATTEMPTS:
                raise
            time.sleep(PUT_PAUSE_S * attempt)
