"""Pub/Sub's SchemaService on the engine, for both doors: the request's checked
fields in, the answer as Pub/Sub's JSON shape out. The REST routes
(``api/rest/schemas.py``) and the gRPC methods (``api/grpc/schema_service.py``)
each call these, so every check is written once."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from api import convert
from api.deps import page
from api.models import Model
from lakepubsub import Engine, errors
from lakepubsub.resources.names import SchemaName, validate_project
from lakepubsub.schemas.registry import Schema

TYPES = ("TYPE_UNSPECIFIED", "PROTOCOL_BUFFER", "AVRO")
VIEWS = ("SCHEMA_VIEW_UNSPECIFIED", "BASIC", "FULL")


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


def _type(body: SchemaBody) -> str:
    return convert.enum_name(body.type, TYPES, "schema.type")


def view_name(value: str | int, default: str) -> str:
    """``view`` as a name; numbers as Google's REST clients and gRPC send them."""
    text = str(value)
    number = int(text) if text.isdigit() else text
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


def _page(items: list[Schema], token: str, view: str | int, *, revisions: bool) -> dict[str, Any]:
    shown = view_name(view, "BASIC")
    return page("schemas", [schema_body(s, shown, revision=revisions) for s in items], token)


def validate_schema(engine: Engine, project: str, body: ValidateSchemaRequest) -> dict[str, Any]:
    """Check a definition; nothing is stored."""
    validate_project(project)
    engine.schemas.validate_definition(_type(body.schema_), body.schema_.definition)
    return {}


def validate_message(engine: Engine, project: str, body: ValidateMessageRequest) -> dict[str, Any]:
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
    return {}


def create_schema(engine: Engine, project: str, schema_id: str, body: SchemaBody) -> dict[str, Any]:
    if not schema_id:
        raise errors.InvalidArgument("schemaId is required")
    created = engine.schemas.create(SchemaName(project, schema_id), _type(body), body.definition)
    return schema_body(created, "FULL")


def list_schemas(
    engine: Engine, project: str, view: str | int, page_size: int, page_token: str
) -> dict[str, Any]:
    found, token = engine.schemas.list_schemas(project, page_size=page_size, page_token=page_token)
    return _page(found, token, view, revisions=False)


def list_schema_revisions(
    engine: Engine, project: str, schema: str, view: str | int, page_size: int, page_token: str
) -> dict[str, Any]:
    found, token = engine.schemas.list_revisions(
        SchemaName(project, schema), page_size=page_size, page_token=page_token
    )
    return _page(found, token, view, revisions=True)


def commit_schema(
    engine: Engine, project: str, schema: str, body: CommitSchemaRequest
) -> dict[str, Any]:
    name = SchemaName(project, schema)
    if body.schema_.name and body.schema_.name != name.path:
        raise errors.InvalidArgument(f"schema.name {body.schema_.name!r} does not match the URL")
    committed = engine.schemas.commit(name, _type(body.schema_), body.schema_.definition)
    return schema_body(committed, "FULL")


def rollback_schema(
    engine: Engine, project: str, schema: str, body: RollbackSchemaRequest
) -> dict[str, Any]:
    added = engine.schemas.rollback(SchemaName(project, schema), body.revision_id)
    return schema_body(added, "FULL")


def delete_schema_revision(
    engine: Engine, project: str, schema: str, revision_id: str
) -> dict[str, Any]:
    remaining = engine.schemas.delete_revision(f"projects/{project}/schemas/{schema}", revision_id)
    return schema_body(remaining, "FULL")


def get_schema(engine: Engine, project: str, schema: str, view: str | int) -> dict[str, Any]:
    """A schema's newest revision, or ``{schema}@{revision}``; FULL unless ``view=BASIC``."""
    found = engine.schemas.get(f"projects/{project}/schemas/{schema}")
    return schema_body(found, view_name(view, "FULL"))


def delete_schema(engine: Engine, project: str, schema: str) -> dict[str, Any]:
    engine.schemas.delete(SchemaName(project, schema))
    return {}
