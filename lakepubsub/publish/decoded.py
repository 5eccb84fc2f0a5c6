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

import threading
from collections import OrderedDict

import pyarrow as pa

from lakepubsub import constants, metrics


class DecodedFiles:
    """A least-recently-used map of (table uri, file path) to the file's rows."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._rows: OrderedDict[tuple[str, str], pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, uri: str, path: str) -> pa.Table | None:
        with self._lock:
            rows = self._rows.get((uri, path))
            if rows is not None:
                self._rows.move_to_end((uri, path))
        (metrics.DECODED_HITS if rows is not None else metrics.DECODED_MISSES).inc()
        return rows

    def put(self, uri: str, path: str, rows: pa.Table) -> None:
        size = rows.nbytes
        if size > self.max_bytes // 4:  # one file must not push out all the others
            return
        with self._lock:
            old = self._rows.pop((uri, path), None)
            if old is not None:
                self._bytes -= old.nbytes
            self._rows[(uri, path)] = rows
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, gone = self._rows.popitem(last=False)
                self._bytes -= gone.nbytes


# One per process: every messages table handle of every thread shares it.
DECODED = DecodedFiles(constants.DECODED_FILES_BYTES)
