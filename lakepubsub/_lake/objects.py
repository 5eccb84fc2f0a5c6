"""Whole objects under the lake root: the few primitives the direct Delta log needs.

Paths are table URIs plus a relative path, as ``Lake`` builds them: an absolute
local path or ``s3://bucket/key``. ``put_if_absent`` is the atomic primitive of
a Delta commit, the same one delta-rs uses: a hard link of a fully written
temporary file on a local filesystem (``link`` fails if the name exists), a
``PUT`` with ``If-None-Match: *`` on S3.

On S3 these requests go through obstore (Python bindings to the Rust
object_store crate that delta-rs itself uses, so the same credentials and
options reach the same buckets): a PUT costs about 0.6 ms of this process's CPU
there against about 3 ms through boto3, and it holds the interpreter lock for
none of its wait, which is what a commit a publish waits for needs (measured on
moto: p50/p99 4.1/13.6 ms against 11.2/114 ms with the machine busy). Listings
and bulk deletes stay on boto3 (``Lake``). Each request is counted by the
process's S3 meter (``meter.METER``), as boto3's are.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping

import obstore
import pyarrow as pa
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store

from lakepubsub._lake.direct import write as write_direct
from lakepubsub._lake.meter import METER

# A data file up to this size is read with one GET of the whole object; a larger
# one by ranges as ``pyarrow.parquet`` asks for them (its footer, then the column
# chunks it reads). The files the server reads are a commit's (at most a flush
# window of messages) or a lease table's, far smaller; a compacted history file
# may not be.
WHOLE_READ_BYTES = 16 * 1024 * 1024

# 412 (the key exists) and 409 (a concurrent conditional PUT of the same key is
# in flight): the name is taken, or may be; the caller looks at what is there.
_S3_TAKEN = (AlreadyExistsError, PreconditionError)


class Written:
    """What this process wrote to S3 lately, by URI, up to ``limit_bytes``: data
    files and commit files are never rewritten under a name, so a reader in the
    process that wrote one (the dispatcher after its publisher's commit, the
    checkpointer replaying commits) has it without a GET. Objects written with
    ``replace`` (checkpoints, ``_last_checkpoint``) are not kept."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._size = 0
        self._items: OrderedDict[str, bytes | pa.Buffer] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, uri: str, data: bytes | pa.Buffer) -> None:
        size = len(data) if isinstance(data, bytes) else data.size
        if size > self._limit // 4:
            return
        with self._lock:
            self._forget(uri)
            self._items[uri] = data
            self._size += size
            while self._size > self._limit:
                self._forget(next(iter(self._items)))

    def get(self, uri: str) -> bytes | pa.Buffer | None:
        with self._lock:
            data = self._items.get(uri)
            if data is not None:
                self._items.move_to_end(uri)
            return data

    def forget(self, uri: str) -> None:
        with self._lock:
            self._forget(uri)

    def clear(self) -> None:
        """Keep nothing (as after a restart)."""
        with self._lock:
            self._items.clear()
            self._size = 0

    def _forget(self, uri: str) -> None:
        data = self._items.pop(uri, None)
        if data is not None:
            self._size -= len(data) if isinstance(data, bytes) else data.size


class Objects:
    """Reads and writes whole objects; local paths or ``s3://`` URIs."""

    def __init__(
        self,
        is_s3: bool,
        storage_options: Mapping[str, str] | None,
        written_bytes: int = 0,
        *,
        direct: bool = True,
    ) -> None:
        self.is_s3 = is_s3
        # Local data files of DIRECT_MIN_BYTES or more are written and read past the page
        # cache (``direct``).
        self.direct = direct
        # object_store's keys, as delta-rs is given them (AWS_ENDPOINT_URL, ...).
        self._config = {k.lower(): v for k, v in (storage_options or {}).items()}
        self._config.setdefault("aws_region", "us-east-1")
        self._stores: dict[str, S3Store] = {}
        self._stores_lock = threading.Lock()
        # Only on S3: a local read of a file just written comes from the page cache.
        self.written = Written(written_bytes if is_s3 else 0)

    def _store(self, uri: str) -> tuple[S3Store, str]:
        """The bucket's store (one per bucket: the intake may live in another) and the key."""
        bucket, key = split_s3(uri)
        store = self._stores.get(bucket)
        if store is None:
            with self._stores_lock:
                store = self._stores.get(bucket) or S3Store(bucket, config=self._config)  # type: ignore[arg-type]
                self._stores[bucket] = store
        return store, key

    def read(self, uri: str) -> bytes | None:
        """The object's bytes, or None if there is none."""
        kept = self.written.get(uri)
        if kept is not None:
            return kept if isinstance(kept, bytes) else kept.to_pybytes()
        if not self.is_s3:
            try:
                with open(uri, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
        store, key = self._store(uri)
        METER.count("get")
        try:
            return bytes(obstore.get(store, key).bytes())
        except FileNotFoundError:
            return None

    def open_read(self, uri: str, size: int | None = None) -> pa.NativeFile:
        """A data file for ``pyarrow.parquet`` to read (S3 only; ``size`` from its add
        action when known, else a HEAD finds it).

        Not delta-rs's ``DeltaStorageHandler`` filesystem: it keeps the interpreter
        lock while it is made and through most of its HEAD (20-50 ms on S3
        Standard), then reads in two more requests, so readers stalled every
        thread of the process. obstore waits without the lock, and a small file
        takes one request.
        """
        kept = self.written.get(uri)
        if kept is not None:  # written by this process: no request
            return pa.BufferReader(kept)
        store, key = self._store(uri)
        if size is None:
            METER.count("head")
            size = int(obstore.head(store, key)["size"])
        if size <= WHOLE_READ_BYTES:
            METER.count("get")
            return pa.BufferReader(pa.py_buffer(obstore.get(store, key).bytes()))
        return pa.PythonFile(_Ranges(store, key, size), mode="r")

    def exists(self, uri: str) -> bool:
        if not self.is_s3:
            return os.path.exists(uri)
        store, key = self._store(uri)
        METER.count("head")
        try:
            obstore.head(store, key)
        except FileNotFoundError:
            return False
        return True

    def put(self, uri: str, data: bytes | pa.Buffer) -> None:
        """Write ``data`` at ``uri`` (a fresh name: data files are never overwritten)."""
        if self.is_s3:
            store, key = self._store(uri)
            METER.count("put")
            obstore.put(store, key, memoryview(data).cast("B"))
            self.written.keep(uri, data)
            return
        try:
            _write(uri, data, self.direct)
        except FileNotFoundError:  # the first file in its directory
            os.makedirs(os.path.dirname(uri), exist_ok=True)
            _write(uri, data, self.direct)

    def replace(self, uri: str, data: bytes | pa.Buffer) -> None:
        """Write ``data`` at ``uri``, over what is there: readers see the old object
        or the new one, whole."""
        if self.is_s3:
            store, key = self._store(uri)
            self.written.forget(uri)
            METER.count("put")
            obstore.put(store, key, memoryview(data).cast("B"))  # atomic
            return
        directory, name = os.path.split(uri)
        temporary = os.path.join(directory, f".{name}.{uuid.uuid4()}.tmp")
        with open(temporary, "wb") as f:
            f.write(data)
        os.replace(temporary, uri)

    def put_if_absent(self, uri: str, data: bytes) -> bool:
        """Write ``data`` at ``uri`` unless something is there; False if it was.

        Readers see either nothing or the whole object.
        """
        if self.is_s3:
            store, key = self._store(uri)
            METER.count("put")
            try:
                obstore.put(store, key, data, mode="create")  # If-None-Match: *
            except _S3_TAKEN:
                return False
            self.written.keep(uri, data)
            return True
        # delta-rs names its own temporary commit files this way; readers skip them.
        temporary = os.path.join(os.path.dirname(uri), f"_commit_{uuid.uuid4()}.json.tmp")
        with open(temporary, "wb") as f:
            f.write(data)
        try:
            os.link(temporary, uri)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        return True

    def delete(self, uri: str) -> None:
        """Remove ``uri`` if it exists."""
        self.written.forget(uri)
        if self.is_s3:
            store, key = self._store(uri)
            METER.count("post")  # object_store deletes with DeleteObjects, a POST
            obstore.delete(store, key)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(uri)


def _write(path: str, data: bytes | pa.Buffer, direct: bool) -> None:
    if direct and write_direct(path, data):
        return
    with open(path, "wb") as f:
        f.write(data)


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key)."""
    bucket, _, key = uri.removeprefix("s3://").removeprefix("s3a://").partition("/")
    return bucket, key


class _Ranges:
    """One S3 object as the read-only, seekable file ``pa.PythonFile`` wraps: each
    read is a ranged GET through obstore."""

    def __init__(self, store: S3Store, key: str, size: int) -> None:
        self._store, self._key, self._size = store, key, size
        self._position = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def read(self, n: int = -1) -> bytes:
        end = self._size if n < 0 else min(self._size, self._position + n)
        if end <= self._position:
            return b""
        METER.count("get")
        data = obstore.get_range(self._store, self._key, start=self._position, end=end)
        self._position = end
        return bytes(data)

    def close(self) -> None:
        self.closed = True
