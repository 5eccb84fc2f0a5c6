"""Shared pieces of the route modules."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from starlette.responses import Response

from lakepubsub import Engine


async def get_engine(request: Request) -> Engine:
    # async: FastAPI runs a plain def dependency on a worker thread, a thread hop per
    # request for a field read.
    engine: Engine = request.app.state.engine
    return engine


EngineDep = Annotated[Engine, Depends(get_engine)]


def json_bytes(body: Any) -> bytes:
    """A REST answer's bytes: JSON ending with a newline, as Google's answers end
    (so ``curl`` output ends its line; JSON parsers ignore the whitespace)."""
    return orjson.dumps(body, option=orjson.OPT_APPEND_NEWLINE)


def json_response(body: Any, status_code: int = 200) -> Response:
    return Response(json_bytes(body), status_code=status_code, media_type="application/json")
