"""google.pubsub.v1.SchemaService as gRPC methods, from a table: each calls the same
function of ``api/schema_calls.py`` as the REST door's route, so both doors share
one definition of every check."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import empty_pb2
from google.protobuf.message import Message
from google.pubsub_v1.types import schema as sc

from api import schema_calls as calls
from api.grpc.door import (
    Call,
    GrpcDoor,
    Handler,
    Methods,
    as_dict,
    from_dict,
    project_of,
    validated,
)
from api.grpc.wire import pb
from api.models import Model
from lakepubsub.schemas.registry import parse_revision_name

SCHEMA_SERVICE = "google.pubsub.v1.SchemaService"


@dataclass(frozen=True)
class _Method:
    """One method: its request type, access rule and call (named as the rule), the
    request field that names the resource (``parent``: a project; ``name``: a schema),
    the call's other arguments taken from the request, and the response type (None:
    the call's answer is not returned)."""

    request: type[Message]
    rule: str
    call: Callable[..., dict[str, Any]]
    where: str
    arguments: Callable[[Any], dict[str, Any]]
    response: type[Message] | None


def _params(request: Any, where: str) -> dict[str, str]:
    path = getattr(request, where)
    if where == "parent":
        return {"project": project_of(path)}
    name, revision = parse_revision_name(path)
    return {"project": name.project, "schema": f"{name.id}@{revision}" if revision else name.id}


def _body(model: type[Model], path_field: str) -> Callable[[Any], dict[str, Any]]:
    """The REST body of a request: its fields but the one the REST path carries."""

    def arguments(request: Any) -> dict[str, Any]:
        return {"body": validated(model, as_dict(request), path_fields=(path_field,))}

    return arguments


def _listing(request: Any) -> dict[str, Any]:
    return {"view": request.view, "page_size": request.page_size, "page_token": request.page_token}


def _view(request: Any) -> dict[str, Any]:
    return {"view": request.view}


def _revision(request: Any) -> dict[str, Any]:
    return {"revision_id": request.revision_id}


def _nothing(request: Any) -> dict[str, Any]:
    return {}


def _created(request: Any) -> dict[str, Any]:
    body = validated(calls.SchemaBody, as_dict(request.schema))
    return {"body": body, "schema_id": request.schema_id}


_SCHEMA = pb(sc.Schema)
_COMMIT = _body(calls.CommitSchemaRequest, "name")
_ROLLBACK = _body(calls.RollbackSchemaRequest, "name")
_VALIDATE = _body(calls.ValidateSchemaRequest, "parent")
_VALIDATE_MESSAGE = _body(calls.ValidateMessageRequest, "parent")
# method: request type (in google.pubsub_v1.types.schema), access rule and call name,
# the field naming the resource, the call's other arguments, the response type.
_SPECS = {
    "CreateSchema": ("CreateSchemaRequest", "create_schema", "parent", _created, _SCHEMA),
    "GetSchema": ("GetSchemaRequest", "get_schema", "name", _view, _SCHEMA),
    "ListSchemas": (
        "ListSchemasRequest", "list_schemas", "parent", _listing, "ListSchemasResponse",
    ),
    "ListSchemaRevisions": (
        "ListSchemaRevisionsRequest", "list_schema_revisions", "name", _listing,
        "ListSchemaRevisionsResponse",
    ),
    "CommitSchema": ("CommitSchemaRequest", "commit_schema", "name", _COMMIT, _SCHEMA),
    "RollbackSchema": ("RollbackSchemaRequest", "rollback_schema", "name", _ROLLBACK, _SCHEMA),
    "DeleteSchemaRevision": (
        "DeleteSchemaRevisionRequest", "delete_schema_revision", "name", _revision, _SCHEMA,
    ),
    "DeleteSchema": ("DeleteSchemaRequest", "delete_schema", "name", _nothing, None),
    "ValidateSchema": ("ValidateSchemaRequest", "validate_schema", "parent", _VALIDATE, None),
    "ValidateMessage": (
        "ValidateMessageRequest", "validate_message", "parent", _VALIDATE_MESSAGE, None,
    ),
}  # fmt: skip
# Methods whose answer is an empty message of their own type.
_EMPTY: dict[str, type[Message]] = {
    "DeleteSchema": empty_pb2.Empty,
    "ValidateSchema": pb(sc.ValidateSchemaResponse),
    "ValidateMessage": pb(sc.ValidateMessageResponse),
}


def _handler(method: str, spec: _Method) -> Handler:
    async def handle(door: GrpcDoor, request: Any, call: Call) -> Message:
        params = _params(request, spec.where)
        await call.check(spec.rule, params)
        arguments = {**params, **spec.arguments(request), "engine": door.engine}
        answer = await asyncio.to_thread(spec.call, **arguments)
        if spec.response is None:
            return _EMPTY[method]()
        return from_dict(answer, spec.response)

    return handle


def _spec(request: str, rule: str, where: str, arguments: Any, response: Any) -> _Method:
    if isinstance(response, str):
        response = pb(getattr(sc, response))
    call = getattr(calls, rule)  # each call is named as its access rule
    return _Method(pb(getattr(sc, request)), rule, call, where, arguments, response)


METHODS: Methods = {
    SCHEMA_SERVICE: {
        method: (spec.request, _handler(method, spec))
        for method, spec in ((m, _spec(*row)) for m, row in _SPECS.items())
    }
}
