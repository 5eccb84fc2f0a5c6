"""Authorization: ``AccessControl``, the ASGI middleware in front of every ``/v1/``
request, and ``authorize``, the check both doors call."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from starlette import routing
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth.identity import Authenticator
from api.auth.rules import BODY_RULES, RULES, Params
from api.auth.settings import MAX_INSPECTED_BODY_BYTES, POLICY_MAX_STALENESS_S, AuthSettings
from api.errors import from_exception
from lakepubsub import Engine, errors
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.iam import PolicyStore, Principal

log = logging.getLogger(__name__)


class PolicyView:
    """The catalog as of at most ``POLICY_MAX_STALENESS_S`` ago, refreshed off the event loop."""

    def __init__(self) -> None:
        self._view: cat.View | None = None
        self._at = 0.0

    async def get(self, engine: Engine) -> cat.View:
        now = time.monotonic()
        if self._view is None or now - self._at > POLICY_MAX_STALENESS_S:
            self._view = await run_in_threadpool(
                engine.catalog.view, max_staleness_s=POLICY_MAX_STALENESS_S
            )
            self._at = now
        return self._view

    def invalidate(self) -> None:
        self._view = None


class AccessControl:
    """ASGI middleware: authenticate and authorize every ``/v1/`` request."""

    def __init__(self, app: ASGIApp, settings: AuthSettings) -> None:
        self.app = app
        self.authenticator = Authenticator(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        try:
            principal = await self.authenticator.principal(scope)
        except errors.LakePubSubError as exc:
            response = from_exception(exc)
            response.headers["www-authenticate"] = 'Bearer realm="lakepubsub"'
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        if not principal.unrestricted:
            try:
                receive = await self._authorize(scope, receive, principal)
            except errors.LakePubSubError as exc:
                await from_exception(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _authorize(self, scope: Scope, receive: Receive, principal: Principal) -> Receive:
        app: FastAPI = scope["app"]
        name, params = _match(app, scope)
        if name is None:
            return receive  # no route: the router answers 404 or 405, nothing happens
        rule = RULES.get(name)
        if rule is None:
            log.error("route %r has no access rule; refused (add it to api/auth/rules.py)", name)
            raise errors.PermissionDenied(f"no access rule for {name}")
        body: Any = None
        if name in BODY_RULES:
            raw, receive = await _buffer(receive)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None  # the route refuses it
        await authorize(app.state, principal, name, params, body)
        return receive


async def authorize(
    state: Any, principal: Principal, rule_name: str, params: Params, body: Any
) -> None:
    """Check the permissions that access rule ``rule_name`` asks for (both doors);
    ``state`` holds the ``engine`` and the ``policy_view``."""
    if principal.unrestricted:
        return
    rule = RULES[rule_name]
    view = await state.policy_view.get(state.engine)
    store = PolicyStore(state.engine.catalog)
    for permission, resource in rule.checks(params, body, view):
        if permission not in store.permissions(view, principal, resource, [permission]):
            raise errors.PermissionDenied(
                f"User not authorized to perform this action: {permission} on "
                f"{resource.path} (or it may not exist)."
            )


def _match(app: FastAPI, scope: Scope) -> tuple[str | None, dict[str, str]]:
    """The name and path parameters of the route that will serve the request."""
    path, method = scope["path"], scope["method"]
    for route in routes_of(app):
        regex = getattr(route, "path_regex", None)
        found = regex.match(path) if regex is not None else None
        methods = getattr(route, "methods", None)
        if found is not None and (methods is None or method in methods):
            return getattr(route, "name", None), found.groupdict()
    return None, {}


def routes_of(app: FastAPI) -> list[routing.BaseRoute]:
    """The app's routes in matching order, included routers flattened (kept on the app)."""
    routes: list[routing.BaseRoute] | None = getattr(app.state, "access_routes", None)
    if routes is None:
        routes = list(_flatten(app.router.routes))
        app.state.access_routes = routes
    return routes


def _flatten(routes: list[routing.BaseRoute]) -> Iterator[routing.BaseRoute]:
    # Included routers are wrapped differently across FastAPI versions; both
    # keep the wrapped router reachable, and its routes carry their full path.
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _flatten(inner.routes)
        else:
            yield route


async def _buffer(receive: Receive) -> tuple[bytes, Receive]:
    """Read the whole body (up to the inspection limit), and a receive that replays it."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > MAX_INSPECTED_BODY_BYTES:
            raise errors.InvalidArgument("request body too large")
        if not message.get("more_body", False):
            break
    raw = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return raw, replay
