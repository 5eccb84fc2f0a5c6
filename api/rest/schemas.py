"""Schema routes: Pub/Sub's SchemaService over REST (``/v1/projects/{p}/schemas…``).

Routes whose path ends in ``:verb`` come before ``/schemas/{schema}``: a schema id
matches any path segment, so ``s:listRevisions`` would otherwise be read as one.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query
from pydantic import Field
from starlette.responses import Response

from api import convert
from api.deps import EngineDep, json_response, page_response
from api.models import Model
from lakepubsub import errors
from lakepubsub.resources.names import SchemaName, validate_project
from lakepubsub.schemas.registry import Schema

router = APIRouter(prefix="/v1/projects/{project}", tags=["schemas"])

TYPES = ("TYPE_UNSPECIFIED", "PROTOCOL_BUFFER", "AVRO")
VIEWS = ("SCHEMA_VIEW_UNSPECIFIED", "BASIC", "FULL")

ViewParam = Annotated[str, Query(description="BASIC or FULL (or 1, 2)")]


class Listing:
    """A list call's query: the view, and the page wanted."""

    def __init__(
        self,
        view: ViewParam = "",
        page_size: Annotated[int, Query(alias="pageSize", ge=0)] = 0,
        page_token: Annotated[str, Query(alias="pageToken")] = "",
    ) -> None:
        self.view, self.page_size, self.page_token = view, page_size, page_token


ListingDep = Annotated[Listing, Depends()]


class SchemaBody(Model):
    name: str = ""
    type: str | int | None = Field(default=None, description="AVRO or PROTOCOL_BUFFER")
    definition: str = ""
    revision_id: str | None = Field(default=None, description="Output only")
    revision_create_time: str | None = Field(default=None, description="Output only")
    compiled_proto_schema: str | None = Field(default=None, description="Output only; ignored")


class CommitSchemaRequest(Model):
    schema_: SchemaBody = Field(alias="schema")


class RollbackSchemaRequest(Model):
    revision_id: str = ""


class ValidateSchemaRequest(Model):
    schema_: SchemaBody = Field(alias="schema")


class ValidateMessageRequest(Model):
    name: str = Field(default="", description="A schema (or schema@revision) to validate against")
    schema_: SchemaBody | None = Field(default=None, alias="schema")
    message: str = Field(default="", description="base64-encoded message")
    encoding: str | int | None = None


class ListSchemasResponse(Model):
    schemas: list[SchemaBody] = Field(default_factory=list)
    next_page_token: str | None = None


def _type(body: SchemaBody) -> str:
    return convert.enum_name(body.type, TYPES, "schema.type")


def _view(value: str, default: str) -> str:
    """``view`` as a name; numbers as Google's REST clients send them."""
    number = int(value) if value.isdigit() else value
    name = convert.enum_name(number or None, VIEWS, "view")
    return default if name == VIEWS[0] else name


def schema_body(schema: Schema, view: str, *, revision: bool = False) -> dict[str, Any]:
    """A schema as Pub/Sub shows it. BASIC: name and type (and, for one revision in a
    list of revisions, which revision it is); FULL: every field."""
    body: dict[str, Any] = {"name": schema.name.path, "type": schema.type}
    if view == "FULL" or revision:
        body["revisionId"] = schema.revision_id
        body["revisionCreateTime"] = convert.format_time_us(schema.revision_create_time_us)
    if view == "FULL":
        body["definition"] = schema.definition
    return body


def _listed(items: list[Schema], token: str, view: str, *, revisions: bool) -> Response:
    return page_response(
        "schemas", [schema_body(s, view, revision=revisions) for s in items], token
    )


@router.post("/schemas:validate", name="validate_schema")
def validate_schema(project: str, body: ValidateSchemaRequest, engine: EngineDep) -> Response:
    """Check a definition; nothing is stored."""
    validate_project(project)
    engine.schemas.validate_definition(_type(body.schema_), body.schema_.definition)
    return json_response({})


@router.post("/schemas:validateMessage", name="validate_message")
def validate_message(project: str, body: ValidateMessageRequest, engine: EngineDep) -> Response:
    """Check a message against a schema (stored, or given); nothing is stored."""
    validate_project(project)
    if bool(body.name) == (body.schema_ is not None):
        raise errors.InvalidArgument("Exactly one of name and schema is required")
    encoding = convert.enum_name(body.encoding, convert.ENCODINGS, "encoding")
    data = convert.decode_data(body.message, "message")
    if body.name:
        engine.schemas.validate_message(name=body.name, data=data, encoding=encoding)
    else:
        assert body.schema_ is not None
        engine.schemas.validate_message(
            schema_type=_type(body.schema_),
            definition=body.schema_.definition,
            data=data,
            encoding=encoding,
        )
    return json_response({})


@router.post("/schemas", name="create_schema")
def create_schema(
    project: str,
    engine: EngineDep,
    body: Annotated[SchemaBody, Body()],
    schema_id: Annotated[str, Query(alias="schemaId")] = "",
) -> Response:
    if not schema_id:
        raise errors.InvalidArgument("schemaId is required")
    name = SchemaName(project, schema_id)
    created = engine.schemas.create(name, _type(body), body.definition)
    return json_response(schema_body(created, "FULL"))


@router.get("/schemas", name="list_schemas")
def list_schemas(project: str, engine: EngineDep, listing: ListingDep) -> Response:
    found, token = engine.schemas.list_schemas(
        project, page_size=listing.page_size, page_token=listing.page_token
    )
    return _listed(found, token, _view(listing.view, "BASIC"), revisions=False)


@router.get("/schemas/{schema}:listRevisions", name="list_schema_revisions")
def list_schema_revisions(
    project: str, schema: str, engine: EngineDep, listing: ListingDep
) -> Response:
    found, token = engine.schemas.list_revisions(
        SchemaName(project, schema), page_size=listing.page_size, page_token=listing.page_token
    )
    return _listed(found, token, _view(listing.view, "BASIC"), revisions=True)


@router.post("/schemas/{schema}:commit", name="commit_schema")
def commit_schema(
    project: str, schema: str, body: CommitSchemaRequest, engine: EngineDep
) -> Response:
    name = SchemaName(project, schema)
    if body.schema_.name and body.schema_.name != name.path:
        raise errors.InvalidArgument(f"schema.name {body.schema_.name!r} does not match the URL")
    committed = engine.schemas.commit(name, _type(body.schema_), body.schema_.definition)
    return json_response(schema_body(committed, "FULL"))


@router.post("/schemas/{schema}:rollback", name="rollback_schema")
def rollback_schema(
    project: str, schema: str, body: RollbackSchemaRequest, engine: EngineDep
) -> Response:
    added = engine.schemas.rollback(SchemaName(project, schema), body.revision_id)
    return json_response(schema_body(added, "FULL"))


@router.delete("/schemas/{schema}:deleteRevision", name="delete_schema_revision")
def delete_schema_revision(
    project: str,
    schema: str,
    engine: EngineDep,
    revision_id: Annotated[str, Query(alias="revisionId")] = "",
) -> Response:
    remaining = engine.schemas.delete_revision(f"projects/{project}/schemas/{schema}", revision_id)
    return json_response(schema_body(remaining, "FULL"))


@router.get("/schemas/{schema}", name="get_schema")
def get_schema(project: str, schema: str, engine: EngineDep, view: ViewParam = "") -> Response:
    """A schema's newest revision, or ``{schema}@{revision}``; FULL unless ``view=BASIC``."""
    found = engine.schemas.get(f"projects/{project}/schemas/{schema}")
    return json_response(schema_body(found, _view(view, "FULL")))


@router.delete("/schemas/{schema}", name="delete_schema")
def delete_schema(project: str, schema: str, engine: EngineDep) -> Response:
    engine.schemas.delete(SchemaName(project, schema))
    return json_response({})
