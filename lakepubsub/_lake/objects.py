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
import uuid
from typing import Any

import pyarrow as pa
from botocore.exceptions import ClientError

_S3_MISSING = ("404", "NoSuchKey", "NotFound")
# 412: the key exists; 409: a concurrent conditional PUT of the same key is in flight.
_S3_TAKEN = ("412", "PreconditionFailed", "409", "ConditionalRequestConflict")


class Objects:
    """Reads and writes whole objects; local paths or ``s3://`` URIs."""

    def __init__(self, is_s3: bool, s3_client: Any) -> None:
        self._is_s3 = is_s3
        self._client = s3_client  # a callable returning the lake's boto3 client

    def read(self, uri: str) -> bytes | None:
        """The object's bytes, or None if there is none."""
        if not self._is_s3:
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
        if not self._is_s3:
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
        if self._is_s3:
            bucket, key = _split(uri)
            self._client().put_object(Bucket=bucket, Key=key, Body=bytes(data))
            return
        os.makedirs(os.path.dirname(uri), exist_ok=True)
        with open(uri, "wb") as f:
            f.write(data)

    def replace(self, uri: str, data: bytes | pa.Buffer) -> None:
        """Write ``data`` at ``uri``, over what is there: readers see the old object
        or the new one, whole."""
        if self._is_s3:
            self.put(uri, data)  # a PUT is atomic
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
        if self._is_s3:
            bucket, key = _split(uri)
            try:
                self._client().put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            except ClientError as exc:
                if _code(exc) in _S3_TAKEN:
                    return False
                raise
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
        if self._is_s3:
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
