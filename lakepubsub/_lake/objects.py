"""Whole objects under the lake root: the few primitives the direct Delta log needs.

Paths are table URIs plus a relative path, as ``Lake`` builds them: an absolute
local path or ``s3://bucket/key``. ``put_if_absent`` is the atomic primitive of
a Delta commit, the same one delta-rs uses: a hard link of a fully written
temporary file on a local filesystem (``link`` fails if the name exists), a
``PUT`` with ``If-None-Match: *`` on S3.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections import OrderedDict
from typing import Any

import pyarrow as pa
from botocore.exceptions import ClientError

_S3_MISSING = ("404", "NoSuchKey", "NotFound")
# 412: the key exists; 409: a concurrent conditional PUT of the same key is in flight.
_S3_TAKEN = ("412", "PreconditionFailed", "409", "ConditionalRequestConflict")


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

    def _forget(self, uri: str) -> None:
        data = self._items.pop(uri, None)
        if data is not None:
            self._size -= len(data) if isinstance(data, bytes) else data.size


class Objects:
    """Reads and writes whole objects; local paths or ``s3://`` URIs."""

    def __init__(self, is_s3: bool, s3_client: Any, written_bytes: int = 0) -> None:
        self.is_s3 = is_s3
        self._client = s3_client  # a callable returning the lake's boto3 client
        # Only on S3: a local read of a file just written comes from the page cache.
        self.written = Written(written_bytes if is_s3 else 0)

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
        bucket, key = _split(uri)
        try:
            response = self._client().get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in _S3_MISSING:
                return None
            raise
        return bytes(response["Body"].read())

    def exists(self, uri: str) -> bool:
        if not self.is_s3:
            return os.path.exists(uri)
        bucket, key = _split(uri)
        try:
            self._client().head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in _S3_MISSING:
                return False
            raise
        return True

    def put(self, uri: str, data: bytes | pa.Buffer) -> None:
        """Write ``data`` at ``uri`` (a fresh name: data files are never overwritten)."""
        if self.is_s3:
            bucket, key = _split(uri)
            self._client().put_object(Bucket=bucket, Key=key, Body=bytes(data))
            self.written.keep(uri, data)
            return
        os.makedirs(os.path.dirname(uri), exist_ok=True)
        with open(uri, "wb") as f:
            f.write(data)

    def replace(self, uri: str, data: bytes | pa.Buffer) -> None:
        """Write ``data`` at ``uri``, over what is there: readers see the old object
        or the new one, whole."""
        if self.is_s3:
            bucket, key = _split(uri)
            self.written.forget(uri)
            self._client().put_object(Bucket=bucket, Key=key, Body=bytes(data))  # atomic
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
            bucket, key = _split(uri)
            try:
                self._client().put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            except ClientError as exc:
                if _code(exc) in _S3_TAKEN:
                    return False
                raise
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
            bucket, key = _split(uri)
            self._client().delete_object(Bucket=bucket, Key=key)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(uri)


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").removeprefix("s3a://").partition("/")
    return bucket, key


def _code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
