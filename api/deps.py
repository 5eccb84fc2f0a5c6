"""Shared pieces of the route modules."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import Depends, Query, Request
from starlette.responses import Response

from lakepubsub import Engine


async def get_engine(request: Request) -> Engine:
    # async: FastAPI runs a plain def dependency on a worker thread, a thread hop per
    # request for a field read.
    engine: Engine = request.app.state.engine
    return engine


EngineDep = Annotated[Engine, Depends(get_engine)]
PageSize = Annotated[int, Query(alias="pageSize", ge=0)]
PageToken = Annotated[str, Query(alias="pageToken")]


def json_bytes(body: Any) -> bytes:
    """A REST answer's bytes: JSON ending with a newline, as Google's answers end
    (so ``curl`` output ends its line; JSON parsers ignore the whitespace)."""
    return orjson.dumps(body, option=orjson.OPT_APPEND_NEWLINE)


def json_response(body: Any, status_code: int = 200) -> Response:
    return Response(json_bytes(body), status_code=status_code, media_type="application/json")


def page(key: str, items: list[Any], token: str) -> dict[str, Any]:
    """One page of a list, as both doors answer it: the items under ``key``, and
    ``nextPageToken`` when more follow."""
    return {key: items, "nextPageToken": token} if token else {key: items}


def page_response(key: str, items: list[Any], token: str) -> Response:
    return json_response(page(key, items, token))
