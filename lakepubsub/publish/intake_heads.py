"""The topics' heads the intake numbers from, read off the committer's thread.

Numbering a topic's rows needs its table's head: the first time this process
publishes to the topic (opening the table: a LIST and a few GETs on S3) and
again once the last read is ``INTAKE_HEAD_MAX_AGE_S`` old (a GET). Read by the
committer, those reads stood in one line in front of every publish of every
topic: at 100 topics on S3 Standard latency, commits waited 5-15 s on them
(``bench s3 --topics 100``, docs/operations.md). Here they run on loader
threads, several at once; the committer numbers the topics whose head it knows
and leaves the others queued until their read lands (``wake``).

A head older than ``INTAKE_HEAD_MAX_AGE_S`` still numbers while its reread runs,
up to ``INTAKE_HEAD_STALE_S``: rows leave the intake only
``INTAKE_REMOVE_GRACE_S`` after they moved, so a read that recent shows every row
the intake no longer holds (the same bound a move's lock already relied on).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from lakepubsub import constants

log = logging.getLogger(__name__)

# Reads in flight at once: each is mostly waiting on storage.
LOADER_THREADS = 32


class Heads:
    """Each topic's table head as last read, and the reads under way.

    ``read(topic_uid)`` reads a head from storage (on a loader thread; it calls
    ``note`` itself or returns the head); ``wake()`` is called when a read landed
    or failed.
    """

    def __init__(self, read: Callable[[str], int], wake: Callable[[], None]) -> None:
        self._read = read
        self._wake = wake
        self._lock = threading.Lock()
        self._known: dict[str, tuple[int, float]] = {}  # head, when read (monotonic)
        self._loading: set[str] = set()
        self._failed: dict[str, Exception] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def note(self, topic_uid: str, head: int, read_at: float | None = None) -> None:
        """The topic's head as read at ``read_at`` (default: now)."""
        at = time.monotonic() if read_at is None else read_at
        with self._lock:
            known = self._known.get(topic_uid)
            if known is None or known[1] <= at:
                self._known[topic_uid] = (head, at)

    def known(self, topic_uid: str) -> int | None:
        """The head to number the topic's rows from now, or None while it is being
        read (ask again after ``wake``). Starts a reread when the last read is old.
        With no head fit to number from, raises what the last read raised, once
        (the next call reads again)."""
        with self._lock:
            known = self._known.get(topic_uid)
            age = time.monotonic() - known[1] if known is not None else float("inf")
            failed = self._failed.pop(topic_uid, None)
            if known is None or age > constants.INTAKE_HEAD_STALE_S:
                if failed is not None:
                    raise failed
                known = None
            if age > constants.INTAKE_HEAD_MAX_AGE_S:
                self._load(topic_uid)
            return None if known is None else known[0]

    def forget(self, topic_uid: str) -> None:
        with self._lock:
            self._known.pop(topic_uid, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _load(self, topic_uid: str) -> None:
        """Start a read of the topic's head unless one is under way (holding _lock)."""
        if topic_uid in self._loading or self._closed:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(LOADER_THREADS, thread_name_prefix="intake-heads")
        self._loading.add(topic_uid)
        self._pool.submit(self._reading, topic_uid)

    def _reading(self, topic_uid: str) -> None:
        started = time.monotonic()
        try:
            head = self._read(topic_uid)
        except Exception as exc:  # the committer fails the topic's publishes with it
            log.info("reading the head of topic %s failed: %s", topic_uid, exc)
            with self._lock:
                self._failed[topic_uid] = exc
        else:
            self.note(topic_uid, head, started)
        finally:
            with self._lock:
                self._loading.discard(topic_uid)
            self._wake()
