"""Authentication, authorization (Pub/Sub IAM), the IAM routes and the push JWKS.

Every ``/v1/`` request passes ``AccessControl`` before it reaches a route:

1. Authentication. ``Authorization: Bearer <token>`` (or ``x-goog-api-key``)
   is an API key from ``LAKEPUBSUB_API_KEYS`` (stored as SHA-256 hashes) or,
   with ``LAKEPUBSUB_JWKS_URL``, a JWT verified against that key set. Without
   credentials a caller is anonymous, admitted only as
   ``LAKEPUBSUB_ALLOW_ANONYMOUS`` says (default: loopback clients, and only
   while no keys or JWKS are configured: the embedded default).
2. Authorization. The route's permissions (``RULES``) are checked against the
   roles granted to the caller by the project's and the resource's IAM
   policies and by static grants in the key configuration. With no
   identities configured at all, admitted callers may do everything.

A refused request gets 401 or 403 in the Pub/Sub error shape before any
route code runs, so it changes nothing. Configuration is documented in
docs/security.md.

One module per concern: ``settings`` (the configuration), ``identity``
(authentication), ``rules`` (the permissions of each method), ``access`` (the
middleware and the check both doors call), ``iam`` (the IAM routes) and ``jwks``
(the keys that verify push tokens).
"""

from __future__ import annotations

from fastapi import FastAPI

from api.auth import iam, jwks
from api.auth.access import AccessControl, PolicyView, authorize, routes_of
from api.auth.iam import (
    SetIamPolicyRequest,
    TestIamPermissionsRequest,
    get_policy,
    iam_resource,
    set_policy,
    test_permissions,
)
from api.auth.identity import Authenticator
from api.auth.rules import RULES
from api.auth.settings import POLICY_MAX_STALENESS_S, AuthSettings, parse_api_keys
from lakepubsub.settings.doors import DoorSettings

__all__ = [
    "POLICY_MAX_STALENESS_S",
    "RULES",
    "AccessControl",
    "AuthSettings",
    "Authenticator",
    "SetIamPolicyRequest",
    "TestIamPermissionsRequest",
    "authorize",
    "get_policy",
    "iam_resource",
    "install",
    "parse_api_keys",
    "routes_of",
    "set_policy",
    "test_permissions",
]


def install(app: FastAPI) -> None:
    """Add the IAM routes (before the resource routes they extend), the push keys'
    routes and the middleware."""
    doors = DoorSettings.from_env()  # a configuration error stops start-up here
    settings = AuthSettings.of(doors)
    app.state.door_settings = doors
    app.state.auth_settings = settings
    app.state.policy_view = PolicyView()
    app.include_router(iam.router)
    app.include_router(jwks.router)
    app.add_middleware(AccessControl, settings=settings)
