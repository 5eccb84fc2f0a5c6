"""Who is looking at the console, and what they may see and do.

The console authenticates as the API does (``api/auth/``): an API key or a
JWT, sent as a bearer token, or kept by the browser in a cookie that the login
page sets; anonymous callers are admitted as ``LAKEPUBSUB_ALLOW_ANONYMOUS``
says. What a page shows and which actions it offers follow the caller's
Pub/Sub permissions on each resource, checked as the API checks them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from api.auth import POLICY_MAX_STALENESS_S, Authenticator
from lakepubsub import Engine, errors
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.iam import PolicyStore, Principal, Resource

# The cookie that carries the console's credential (the bearer token itself).
COOKIE = "lakepubsub_console"
# Reading a topic's messages is what consuming them through a subscription allows;
# the console asks for it on the project (or from a static grant).
BROWSE = "pubsub.subscriptions.consume"


@dataclass(frozen=True)
class Viewer:
    """The caller of one console request, with the catalog as of the request."""

    principal: Principal
    view: cat.View
    store: PolicyStore

    @property
    def name(self) -> str:
        if self.principal.unrestricted:
            return "anyone (no identities configured)"
        return self.principal.member or "anonymous"

    def may(self, permission: str, resource: Resource) -> bool:
        held = self.store.permissions(self.view, self.principal, resource, [permission])
        return permission in held

    def require(self, permission: str, resource: Resource) -> None:
        if not self.may(permission, resource):
            raise errors.PermissionDenied(
                f"User not authorized to perform this action: {permission} on {resource.path}"
            )


async def viewer(request: Request, authenticator: Authenticator) -> Viewer:
    """The request's viewer; ``Unauthenticated`` when the API would refuse the caller."""
    scope = request.scope
    token = request.cookies.get(COOKIE, "")
    headers = dict(scope.get("headers") or [])
    if token and b"authorization" not in headers:
        scope = {
            **scope,
            "headers": [*scope.get("headers", []), (b"authorization", f"Bearer {token}".encode())],
        }
    principal = await authenticator.principal(scope)
    engine: Engine = request.app.state.engine
    view = await run_in_threadpool(engine.catalog.view, max_staleness_s=POLICY_MAX_STALENESS_S)
    return Viewer(principal, view, PolicyStore(engine.catalog))
