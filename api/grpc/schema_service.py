"""google.pubsub.v1.SchemaService as gRPC methods: each calls the REST door's route
function (``api/rest/schemas.py``), so both doors share one definition of every check."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import empty_pb2
from google.protobuf.message import Message
from google.pubsub_v1.types import schema as sc
from starlette.responses import Response

from api.grpc.door import Call, GrpcDoor, Handler, as_dict, from_json, project_of, validated
from api.grpc.wire import pb
from api.models import Model
from api.rest import schemas
from lakepubsub.schemas.registry import parse_revision_name

SCHEMA_SERVICE = "google.pubsub.v1.SchemaService"


@dataclass(frozen=True)
class _Method:
    """One method: its request type, access rule and REST route, the request field that
    names the resource (``parent``: a project; ``name``: a schema), the route's other
    arguments taken from the request, and the response type (None: the route's answer
    is not returned)."""

    request: type[Message]
    rule: str
    route: Callable[..., Response]
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
    return {"listing": schemas.Listing(str(request.view), request.page_size, request.page_token)}


def _view(request: Any) -> dict[str, Any]:
    return {"view": str(request.view)}


def _revision(request: Any) -> dict[str, Any]:
    return {"revision_id": request.revision_id}


def _nothing(request: Any) -> dict[str, Any]:
    return {}


def _created(request: Any) -> dict[str, Any]:
    body = validated(schemas.SchemaBody, as_dict(request.schema))
    return {"body": body, "schema_id": request.schema_id}


_SCHEMA = pb(sc.Schema)
_COMMIT = _body(schemas.CommitSchemaRequest, "name")
_ROLLBACK = _body(schemas.RollbackSchemaRequest, "name")
_VALIDATE = _body(schemas.ValidateSchemaRequest, "parent")
_VALIDATE_MESSAGE = _body(schemas.ValidateMessageRequest, "parent")
# method: request type (in google.pubsub_v1.types.schema), access rule and route name,
# the field naming the resource, the route's other arguments, the response type.
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
        response = await asyncio.to_thread(spec.route, **arguments)
        if spec.response is None:
            return _EMPTY[method]()
        return from_json(bytes(response.body), spec.response)

    return handle


def _spec(request: str, rule: str, where: str, arguments: Any, response: Any) -> _Method:
    if isinstance(response, str):
        response = pb(getattr(sc, response))
    route = getattr(schemas, rule)  # each route is named as its access rule
    return _Method(pb(getattr(sc, request)), rule, route, where, arguments, response)


METHODS: dict[str, dict[str, tuple[type[Message], Handler]]] = {
    SCHEMA_SERVICE: {
        method: (spec.request, _handler(method, spec))
        for method, spec in ((m, _spec(*row)) for m, row in _SPECS.items())
    }
}
