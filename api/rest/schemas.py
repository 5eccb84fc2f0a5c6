"""Schema routes: Pub/Sub's SchemaService over REST (``/v1/projects/{p}/schemas…``),
each a call of ``api/schema_calls.py``.

Routes whose path ends in ``:verb`` come before ``/schemas/{schema}``: a schema id
matches any path segment, so ``s:listRevisions`` would otherwise be read as one.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query
from starlette.responses import Response

from api import schema_calls as calls
from api.deps import EngineDep, json_response
from api.schema_calls import (
    CommitSchemaRequest,
    RollbackSchemaRequest,
    SchemaBody,
    ValidateMessageRequest,
    ValidateSchemaRequest,
)

router = APIRouter(prefix="/v1/projects/{project}", tags=["schemas"])

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


@router.post("/schemas:validate", name="validate_schema")
def validate_schema(project: str, body: ValidateSchemaRequest, engine: EngineDep) -> Response:
    """Check a definition; nothing is stored."""
    return json_response(calls.validate_schema(engine, project, body))


@router.post("/schemas:validateMessage", name="validate_message")
def validate_message(project: str, body: ValidateMessageRequest, engine: EngineDep) -> Response:
    """Check a message against a schema (stored, or given); nothing is stored."""
    return json_response(calls.validate_message(engine, project, body))


@router.post("/schemas", name="create_schema")
def create_schema(
    project: str,
    engine: EngineDep,
    body: Annotated[SchemaBody, Body()],
    schema_id: Annotated[str, Query(alias="schemaId")] = "",
) -> Response:
    return json_response(calls.create_schema(engine, project, schema_id, body))


@router.get("/schemas", name="list_schemas")
def list_schemas(project: str, engine: EngineDep, listing: ListingDep) -> Response:
    page = calls.list_schemas(engine, project, listing.view, listing.page_size, listing.page_token)
    return json_response(page)


@router.get("/schemas/{schema}:listRevisions", name="list_schema_revisions")
def list_schema_revisions(
    project: str, schema: str, engine: EngineDep, listing: ListingDep
) -> Response:
    page = calls.list_schema_revisions(
        engine, project, schema, listing.view, listing.page_size, listing.page_token
    )
    return json_response(page)


@router.post("/schemas/{schema}:commit", name="commit_schema")
def commit_schema(
    project: str, schema: str, body: CommitSchemaRequest, engine: EngineDep
) -> Response:
    return json_response(calls.commit_schema(engine, project, schema, body))


@router.post("/schemas/{schema}:rollback", name="rollback_schema")
def rollback_schema(
    project: str, schema: str, body: RollbackSchemaRequest, engine: EngineDep
) -> Response:
    return json_response(calls.rollback_schema(engine, project, schema, body))


@router.delete("/schemas/{schema}:deleteRevision", name="delete_schema_revision")
def delete_schema_revision(
    project: str,
    schema: str,
    engine: EngineDep,
    revision_id: Annotated[str, Query(alias="revisionId")] = "",
) -> Response:
    return json_response(calls.delete_schema_revision(engine, project, schema, revision_id))


@router.get("/schemas/{schema}", name="get_schema")
def get_schema(project: str, schema: str, engine: EngineDep, view: ViewParam = "") -> Response:
    """A schema's newest revision, or ``{schema}@{revision}``; FULL unless ``view=BASIC``."""
    return json_response(calls.get_schema(engine, project, schema, view))


@router.delete("/schemas/{schema}", name="delete_schema")
def delete_schema(project: str, schema: str, engine: EngineDep) -> Response:
    return json_response(calls.delete_schema(engine, project, schema))
