"""The publish method served straight from ASGI, in front of FastAPI's router.

Why by hand: a request that carries one message spent more of the event loop's
CPU in FastAPI's per-request machinery (the exception and exit-stack middleware,
matching through the included routers, building a ``Request``, solving the
route's dependencies, a ``Response`` object) than in everything it asked of the
engine. No maintained library serves one route of a FastAPI app outside its
router; this middleware is the little that does.

It runs inside the app's own middleware (admission, the body limit, metrics,
access control, added outside it in ``api/app.py``), so those apply unchanged,
and it answers exactly what the ``publish`` route in ``api/rest/topics.py`` answers:
both call ``topics.publish_ids``, and the route is still matched by its own
pattern (taken from the app), so a path the route would not take goes on to
the router. The route stays in the app for the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from api import errors as api_errors
from api.auth import routes_of
from api.deps import json_bytes
from api.rest import topics
from lakepubsub import errors
from lakepubsub.resources.names import TopicName

_JSON_HEADERS = [(b"content-type", b"application/json")]


class FastRoutes:
    """ASGI middleware: serve ``POST .../topics/{topic}:publish`` without the router."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._publish: Any = None  # the app's publish route, found on the first request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not scope["path"].endswith(":publish")
        ):
            await self.app(scope, receive, send)
            return
        route = self._publish or self._find(scope["app"])
        found = route.path_regex.match(scope["path"])
        if found is None:
            await self.app(scope, receive, send)
            return
        params = found.groupdict()
        scope["route"] = route  # for the metrics middleware's route label
        scope["path_params"] = params
        chunks = []
        while True:  # the body limit's receive raises past the limit, as for the router
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            engine = scope["app"].state.engine
            name = TopicName(params["project"], params["topic"])
            ids = await topics.publish_ids(engine, name, b"".join(chunks))
        except errors.LakePubSubError as exc:
            await api_errors.from_exception(exc)(scope, receive, send)
            return
        except Exception as exc:
            await api_errors.unexpected(exc)(scope, receive, send)
            return
        body = json_bytes({"messageIds": ids})
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _find(self, app: FastAPI) -> Any:
        self._publish = next(r for r in routes_of(app) if getattr(r, "name", "") == "publish")
        return self._publish
