"""Errors, one class per google.rpc status code the service can return.

The API maps them to HTTP in one place (``api/errors.py``); the library raises
them and never deals with HTTP.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable
from concurrent.futures import Future, InvalidStateError
from typing import Any, ClassVar, TypeVar

# An S3 error document inside a storage error's text: <Code>NoSuchBucket</Code><Message>…
_S3_ERROR = re.compile(r"<Code>([^<]+)</Code>\s*<Message>([^<]+)</Message>")
# object_store looks for credentials last at the instance metadata service (EC2's
# address); an error that went there had no credentials from anywhere else.
_METADATA_SERVICE = "169.254.169.254"
NO_CREDENTIALS = (
    "no AWS credentials: none in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE,"
    " and no instance metadata service answered"
)


class LakePubSubError(Exception):
    """Root of every error the library raises on purpose."""

    status: ClassVar[str] = "UNKNOWN"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class InvalidArgument(LakePubSubError):
    status = "INVALID_ARGUMENT"
    http_status = 400


class FailedPrecondition(LakePubSubError):
    status = "FAILED_PRECONDITION"
    http_status = 400


class OutOfRange(LakePubSubError):
    status = "OUT_OF_RANGE"
    http_status = 400


class Unauthenticated(LakePubSubError):
    status = "UNAUTHENTICATED"
    http_status = 401


class PermissionDenied(LakePubSubError):
    status = "PERMISSION_DENIED"
    http_status = 403


class NotFound(LakePubSubError):
    status = "NOT_FOUND"
    http_status = 404


class AlreadyExists(LakePubSubError):
    status = "ALREADY_EXISTS"
    http_status = 409


class Aborted(LakePubSubError):
    """A commit kept losing optimistic-concurrency races; the caller may retry."""

    status = "ABORTED"
    http_status = 409


class ResourceExhausted(LakePubSubError):
    status = "RESOURCE_EXHAUSTED"
    http_status = 429


class Cancelled(LakePubSubError):
    status = "CANCELLED"
    http_status = 499


class Internal(LakePubSubError):
    status = "INTERNAL"
    http_status = 500


class Unavailable(LakePubSubError):
    """Storage could not be reached or refused the request; nothing was committed."""

    status = "UNAVAILABLE"
    http_status = 503


class DeadlineExceeded(LakePubSubError):
    status = "DEADLINE_EXCEEDED"
    http_status = 504


def one_line(text: str) -> str:
    """A storage error's text (delta-rs nests its causes over many lines) as one line:
    its first line, plus the S3 error it carries, if any, or that no credentials
    were found."""
    first = text.strip().splitlines()[0] if text.strip() else text
    found = _S3_ERROR.search(text)
    if found:
        return f"{first} ({found.group(1)}: {found.group(2)})"
    if _METADATA_SERVICE in text:
        return f"{first} ({NO_CREDENTIALS})"
    return first


T = TypeVar("T")


def settle(future: Future[T], value: T) -> None:
    """Answer ``future`` with ``value``, unless its caller withdrew (cancelled it: a
    client's deadline passed or its call ended) and misses the answer. Every other
    future answered with it still gets its own."""
    with contextlib.suppress(InvalidStateError):
        future.set_result(value)


def fail(future: Future[Any], exc: BaseException) -> None:
    """``settle`` with an exception."""
    with contextlib.suppress(InvalidStateError):
        future.set_exception(exc)


def fail_all(futures: Iterable[Future[Any]], exc: BaseException, what: str) -> None:
    """Answer every future (``fail``) with ``exc``; an exception that is not one of ours
    is logged as ``what`` failing and answered INTERNAL."""
    failure = exc if isinstance(exc, LakePubSubError) else Internal(str(exc))
    if not isinstance(exc, LakePubSubError):
        logging.getLogger(__name__).error("%s failed", what, exc_info=exc)
    for future in futures:
        fail(future, failure)
