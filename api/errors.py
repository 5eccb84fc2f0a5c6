"""Every error leaves the API in Pub/Sub's shape: ``{"error": {code, message, status}}``."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from google.protobuf import any_pb2, json_format
from google.rpc import error_details_pb2, status_pb2
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from api.deps import json_bytes
from api.methods import pubsub_method
from lakepubsub import errors

log = logging.getLogger(__name__)
# Registers google.rpc.ErrorInfo and its siblings, so details of those types pack.
_DETAIL_TYPES = error_details_pb2.DESCRIPTOR

_HTTP_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ALREADY_EXISTS",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}


def error_response(
    http_status: int, status: str, message: str, details: list[dict[str, Any]] | None = None
) -> Response:
    body: dict[str, Any] = {"code": http_status, "message": message, "status": status}
    if details:
        body["details"] = details
    return Response(
        json_bytes({"error": body}), status_code=http_status, media_type="application/json"
    )


# Problems named in one INVALID_ARGUMENT message at most.
MAX_REPORTED_PROBLEMS = 5


def _unknown_name(loc: tuple[Any, ...]) -> str:
    """Google's words for a field a request body must not have."""
    *parents, name = loc
    at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parents).lstrip(".")
    where = f" at '{at}'" if at else ""
    return f'Invalid JSON payload received. Unknown name "{name}"{where}: Cannot find field.'


def invalid_request(problems: list[Any]) -> errors.InvalidArgument:
    """A pydantic validation failure (``ValidationError.errors()``) as INVALID_ARGUMENT.

    An unknown field is named as Google names it, with a ``google.rpc.BadRequest``
    detail; other problems are listed as ``field: reason``."""
    unknown = [
        _unknown_name(tuple(p for p in err.get("loc", ()) if p != "body"))
        for err in problems
        if err.get("type") == "extra_forbidden"
    ]
    if unknown:
        return errors.InvalidArgument(
            unknown[0],
            details=[
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": "", "description": u} for u in unknown],
                }
            ],
        )
    described = []
    for err in problems[:MAX_REPORTED_PROBLEMS]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        described.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return errors.InvalidArgument("Invalid request: " + "; ".join(described))


def from_exception(exc: errors.LakePubSubError) -> Response:
    return error_response(exc.http_status, exc.status, exc.message, exc.details)


def rpc_status(exc: errors.LakePubSubError) -> tuple[grpc.StatusCode, bytes]:
    """The gRPC door's form of an error: its status code and a serialized
    ``google.rpc.Status`` with the same details the REST body carries (clients
    read ErrorInfo from the ``grpc-status-details-bin`` trailer)."""
    code = getattr(grpc.StatusCode, exc.status, grpc.StatusCode.UNKNOWN)
    status = status_pb2.Status(code=code.value[0], message=exc.message)
    for detail in exc.details:
        packed = any_pb2.Any()
        try:
            json_format.ParseDict(detail, packed)
        except json_format.ParseError:
            log.warning("error detail of unknown type left out: %s", detail.get("@type"))
            continue
        status.details.append(packed)
    return code, status.SerializeToString()


def install(app: FastAPI) -> None:
    """Register the handlers that map every failure to the Pub/Sub error shape."""

    @app.exception_handler(errors.LakePubSubError)
    async def lakepubsub_error(_: Request, exc: errors.LakePubSubError) -> Response:
        return from_exception(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        return from_exception(invalid_request(list(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code in (404, 405):  # no route: a Pub/Sub method that is not built?
            method = pubsub_method(request.method, request.url.path)
            if method is not None:
                return error_response(
                    501, "UNIMPLEMENTED", f"Method {method} is not implemented by lakepubsub"
                )
        status = _HTTP_STATUS_NAMES.get(exc.status_code, "UNKNOWN")
        return error_response(exc.status_code, status, str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected_error(_: Request, exc: Exception) -> Response:
        return unexpected(exc)


def unexpected(exc: Exception) -> Response:
    """The answer to a failure no handler expected (logged with its traceback)."""
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "INTERNAL", f"internal error: {type(exc).__name__}")
