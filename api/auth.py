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
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import jwt
import orjson
from fastapi import APIRouter, Body, FastAPI, Request
from pydantic import Field
from pydantic.alias_generators import to_snake
from starlette import routing
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import EngineDep, json_bytes, json_response
from api.errors import from_exception
from api.models import Model
from lakepubsub import Engine, errors
from lakepubsub.push.oidc import published_keys
from lakepubsub.push.settings import PushSettings
from lakepubsub.resources import catalog as cat
from lakepubsub.resources.iam import (
    PERMISSIONS,
    Policy,
    PolicyStore,
    Principal,
    Resource,
    role_name,
    validate_member,
)
from lakepubsub.resources.names import SchemaName, SnapshotName, SubscriptionName, TopicName

log = logging.getLogger(__name__)

# How stale the catalog (and so the IAM policies) may be when a request is
# checked; the engine's own hot path tolerates the same.
POLICY_MAX_STALENESS_S = 1.0
# Request bodies inspected for a second resource (createSubscription's topic)
# larger than this are refused: a real one is a few hundred bytes.
MAX_INSPECTED_BODY_BYTES = 1024 * 1024
# Verified JWT signing keys are refetched from the JWKS URL this often.
JWKS_CACHE_S = 300
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_IN_PROCESS_CLIENTS = ("testclient",)  # Starlette's TestClient (the CLI's --direct mode)


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiKey:
    name: str
    principal: str
    grants: Mapping[str, frozenset[str]]  # project or "*" -> roles


@dataclass(frozen=True)
class AuthSettings:
    """``api_keys``: SHA-256 hex of the key -> key. ``anonymous``: "true", "false" or
    "loopback". ``jwks_url``/``jwt_audience``/``jwt_issuer``: accept JWTs."""

    api_keys: Mapping[str, ApiKey] = field(default_factory=dict)
    anonymous: str = "loopback"
    jwks_url: str = ""
    jwt_audience: str = ""
    jwt_issuer: str = ""

    @property
    def identities(self) -> bool:
        """Whether any way to authenticate is configured (else checks are off)."""
        return bool(self.api_keys or self.jwks_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AuthSettings:
        env = os.environ if environ is None else environ
        keys = parse_api_keys(env.get("LAKEPUBSUB_API_KEYS", ""))
        jwks_url = env.get("LAKEPUBSUB_JWKS_URL", "").strip()
        audience = env.get("LAKEPUBSUB_JWT_AUDIENCE", "").strip()
        if jwks_url and not audience:
            raise errors.InvalidArgument("LAKEPUBSUB_JWKS_URL needs LAKEPUBSUB_JWT_AUDIENCE")
        anonymous = env.get("LAKEPUBSUB_ALLOW_ANONYMOUS", "").strip().lower()
        if anonymous in ("1", "yes", "on"):
            anonymous = "true"
        elif anonymous in ("0", "no", "off"):
            anonymous = "false"
        elif not anonymous:
            anonymous = "false" if keys or jwks_url else "loopback"
        if anonymous not in ("true", "false", "loopback"):
            raise errors.InvalidArgument(
                "LAKEPUBSUB_ALLOW_ANONYMOUS must be true, false or loopback"
            )
        return cls(keys, anonymous, jwks_url, audience, env.get("LAKEPUBSUB_JWT_ISSUER", ""))


def parse_api_keys(raw: str) -> dict[str, ApiKey]:
    """``{"name": "<sha256 hex>"}`` or ``{"name": {"sha256": ..., "principal": ...,
    "roles": {"<project>|*": ["roles/pubsub.editor", ...]}}}``."""
    if not raw.strip():
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.InvalidArgument("LAKEPUBSUB_API_KEYS is not JSON") from exc
    if not isinstance(doc, dict):
        raise errors.InvalidArgument("LAKEPUBSUB_API_KEYS must be a JSON object")
    keys: dict[str, ApiKey] = {}
    for name, spec in doc.items():
        entry = {"sha256": spec} if isinstance(spec, str) else spec
        if not isinstance(entry, dict):
            raise errors.InvalidArgument(
                f"LAKEPUBSUB_API_KEYS[{name!r}] must be a string or object"
            )
        digest = str(entry.get("sha256", "")).lower()
        if not _SHA256_HEX.fullmatch(digest):
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}]: sha256 must be 64 hex")
        if digest in keys:
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}] repeats another key")
        principal = str(entry.get("principal") or f"apiKey:{name}")
        validate_member(principal)
        if principal in ("allUsers", "allAuthenticatedUsers"):
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}]: not a principal")
        roles = entry.get("roles") or {}
        if not isinstance(roles, dict):
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}].roles must be an object")
        grants = {
            project.removeprefix("projects/"): frozenset(role_name(r) for r in granted)
            for project, granted in roles.items()
        }
        keys[digest] = ApiKey(name, principal, grants)
    return keys


# -- authentication -------------------------------------------------------------------------


class Authenticator:
    def __init__(self, settings: AuthSettings) -> None:
        self.settings = settings
        self._jwks = (
            jwt.PyJWKClient(settings.jwks_url, cache_keys=True, lifespan=JWKS_CACHE_S)
            if settings.jwks_url
            else None
        )

    async def principal(self, scope: Scope) -> Principal:
        """Who sent the request; ``Unauthenticated`` if nobody acceptable."""
        headers = dict(scope.get("headers") or [])
        token = _bearer(headers.get(b"authorization", b"").decode("latin-1"))
        token = token or headers.get(b"x-goog-api-key", b"").decode("latin-1").strip()
        if not self.settings.identities:
            # Nothing to check a credential against: open to whoever is admitted.
            if self._anonymous_allowed(scope):
                return Principal(unrestricted=True)
            raise errors.Unauthenticated("anonymous access is disabled")
        if not token:
            if self._anonymous_allowed(scope):
                return Principal()
            raise errors.Unauthenticated(
                "Request is missing required authentication credential: an API key or a JWT "
                "as a bearer token."
            )
        key = self.settings.api_keys.get(hashlib.sha256(token.encode()).hexdigest())
        if key is not None:
            return Principal(key.principal, key.grants)
        if self._jwks is not None and token.count(".") == 2:
            return await run_in_threadpool(self._verify_jwt, token)
        raise errors.Unauthenticated("Request had invalid authentication credentials.")

    def _anonymous_allowed(self, scope: Scope) -> bool:
        mode = self.settings.anonymous
        return mode == "true" or (mode == "loopback" and _is_local(scope))

    def _verify_jwt(self, token: str) -> Principal:
        assert self._jwks is not None
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "EdDSA"],
                audience=self.settings.jwt_audience,
                issuer=self.settings.jwt_issuer or None,
                options={"require": ["exp", "aud"]},
            )
        except (jwt.PyJWTError, jwt.PyJWKClientError) as exc:
            raise errors.Unauthenticated(f"invalid JWT: {exc}") from exc
        email = claims.get("email")
        if isinstance(email, str) and email:
            kind = "serviceAccount" if email.endswith(".gserviceaccount.com") else "user"
            return Principal(f"{kind}:{email}")
        return Principal(f"principal:{claims.get('iss', '')}/{claims.get('sub', '')}")


def _bearer(value: str) -> str:
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _is_local(scope: Scope) -> bool:
    client = scope.get("client")
    if client is None:  # a unix socket, or an in-process call
        return True
    return _loopback(str(client[0]))


@functools.lru_cache(maxsize=1024)
def _loopback(host: str) -> bool:
    """Whether a client address is this machine (cached: parsing it took a few
    percent of the event loop's time per single-message publish)."""
    if host in _IN_PROCESS_CLIENTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- authorization rules ----------------------------------------------------------------------

Check = tuple[str, Resource]
Params = Mapping[str, str]
# A permission needed on a name in the request body: permission, dotted camelCase
# path to the name, its parser, the resource kind.
BodyCheck = tuple[str, str, Callable[[str], Any], str]


def _project(p: Params) -> Resource:
    return Resource("project", p["project"])


def _topic(p: Params) -> Resource:
    return Resource(cat.TOPIC, p["project"], p["topic"])


def _sub(p: Params) -> Resource:
    return Resource(cat.SUBSCRIPTION, p["project"], p["subscription"])


def _snap(p: Params) -> Resource:
    return Resource(cat.SNAPSHOT, p["project"], p["snapshot"])


def _schema(p: Params) -> Resource:
    # A path may name one revision (``s@c7cfa2a8``); permissions are the schema's.
    return Resource("schema", p["project"], p["schema"].partition("@")[0])


def _values(doc: Any, path: str) -> Iterator[Any]:
    """The values at a dotted camelCase path of a JSON body, under either spelling
    of each key that the API accepts (``deadLetterPolicy``, ``dead_letter_policy``)."""
    if not path:
        yield doc
        return
    head, _, rest = path.partition(".")
    if isinstance(doc, dict):
        for key in dict.fromkeys((head, to_snake(head))):
            if key in doc:
                yield from _values(doc[key], rest)


def _body_names(body: Any, path: str, parse: Callable[[str], Any], kind: str) -> list[Resource]:
    out = []
    for value in _values(body, path):
        # A name the route will refuse anyway (missing, malformed) needs no check here.
        if not isinstance(value, str):
            continue
        try:
            name = parse(value)
        except errors.InvalidArgument:
            continue
        out.append(Resource(kind, name.project, name.id))
    return out


@dataclass(frozen=True)
class Rule:
    """The permissions a route needs: on path resources, and on names in its body."""

    path: tuple[tuple[str, Callable[[Params], Resource]], ...] = ()
    body: tuple[BodyCheck, ...] = ()
    special: str = ""  # "detach": on the subscription's topic

    def checks(self, params: Params, body: Any, view: cat.View) -> list[Check]:
        out = [(perm, where(params)) for perm, where in self.path]
        for perm, path, parse, kind in self.body:
            out.extend((perm, resource) for resource in _body_names(body, path, parse, kind))
        if self.special == "detach":
            entry = view.get(cat.SUBSCRIPTION, params["project"], params["subscription"])
            spec = entry.spec if entry else None
            topics = _body_names(spec, "topic", TopicName.parse, cat.TOPIC)
            out.append(
                ("pubsub.topics.detachSubscription", topics[0] if topics else _project(params))
            )
        return out


def _rule(*path: tuple[str, Callable[[Params], Resource]]) -> Rule:
    return Rule(path=path)


_CONSUME = _rule(("pubsub.subscriptions.consume", _sub))


def _dead_letter(path: str) -> BodyCheck:
    # Dead-lettering publishes into the dead-letter topic, so naming one needs what
    # publishing to it does (Pub/Sub asks the same of its service agent).
    return ("pubsub.topics.publish", path, TopicName.parse, cat.TOPIC)


def _attach_schema(path: str) -> BodyCheck:
    # Naming a schema in a topic's schemaSettings attaches it (Pub/Sub asks the same).
    return ("pubsub.schemas.attach", path, SchemaName.parse, "schema")


RULES: dict[str, Rule] = {
    "create_topic": Rule(
        path=(("pubsub.topics.create", _project),),
        body=(_attach_schema("schemaSettings.schema"),),
    ),
    "get_topic": _rule(("pubsub.topics.get", _topic)),
    "update_topic": Rule(
        path=(("pubsub.topics.update", _topic),),
        body=(_attach_schema("topic.schemaSettings.schema"),),
    ),
    "delete_topic": _rule(("pubsub.topics.delete", _topic)),
    "list_topics": _rule(("pubsub.topics.list", _project)),
    "list_topic_subscriptions": _rule(("pubsub.topics.get", _topic)),
    "list_topic_snapshots": _rule(("pubsub.topics.get", _topic)),
    "publish": _rule(("pubsub.topics.publish", _topic)),
    "create_subscription": Rule(
        path=(("pubsub.subscriptions.create", _project),),
        body=(
            ("pubsub.topics.attachSubscription", "topic", TopicName.parse, cat.TOPIC),
            _dead_letter("deadLetterPolicy.deadLetterTopic"),
        ),
    ),
    "get_subscription": _rule(("pubsub.subscriptions.get", _sub)),
    "update_subscription": Rule(
        path=(("pubsub.subscriptions.update", _sub),),
        body=(_dead_letter("subscription.deadLetterPolicy.deadLetterTopic"),),
    ),
    "delete_subscription": _rule(("pubsub.subscriptions.delete", _sub)),
    "list_subscriptions": _rule(("pubsub.subscriptions.list", _project)),
    "modify_push_config": _rule(("pubsub.subscriptions.update", _sub)),
    "pull": _CONSUME,
    "acknowledge": _CONSUME,
    "modify_ack_deadline": _CONSUME,
    "nack": _CONSUME,
    "truncate": _CONSUME,
    "seek": Rule(
        path=(("pubsub.subscriptions.consume", _sub),),
        body=(("pubsub.snapshots.seek", "snapshot", SnapshotName.parse, cat.SNAPSHOT),),
    ),
    "detach": Rule(special="detach"),
    "create_snapshot": Rule(
        path=(("pubsub.snapshots.create", _project),),
        body=(
            (
                "pubsub.subscriptions.consume",
                "subscription",
                SubscriptionName.parse,
                "subscription",
            ),
        ),
    ),
    "get_snapshot": _rule(("pubsub.snapshots.get", _snap)),
    "update_snapshot": _rule(("pubsub.snapshots.update", _snap)),
    "delete_snapshot": _rule(("pubsub.snapshots.delete", _snap)),
    "list_snapshots": _rule(("pubsub.snapshots.list", _project)),
    "create_schema": _rule(("pubsub.schemas.create", _project)),
    "get_schema": _rule(("pubsub.schemas.get", _schema)),
    "list_schemas": _rule(("pubsub.schemas.list", _project)),
    "list_schema_revisions": _rule(("pubsub.schemas.listRevisions", _schema)),
    "commit_schema": _rule(("pubsub.schemas.commit", _schema)),
    "rollback_schema": _rule(("pubsub.schemas.rollback", _schema)),
    "delete_schema_revision": _rule(("pubsub.schemas.delete", _schema)),
    "delete_schema": _rule(("pubsub.schemas.delete", _schema)),
    "validate_schema": _rule(("pubsub.schemas.validate", _project)),
    "validate_message": _rule(("pubsub.schemas.validate", _project)),
    "project_get_iam_policy": _rule(("pubsub.projects.getIamPolicy", _project)),
    "project_set_iam_policy": _rule(("pubsub.projects.setIamPolicy", _project)),
    "project_test_iam_permissions": Rule(),
}
_KIND_PARAMS = {"topic": _topic, "subscription": _sub, "snapshot": _snap}
for _kind, _where in _KIND_PARAMS.items():
    RULES[f"{_kind}_get_iam_policy"] = _rule((f"pubsub.{_kind}s.getIamPolicy", _where))
    RULES[f"{_kind}_set_iam_policy"] = _rule((f"pubsub.{_kind}s.setIamPolicy", _where))
    RULES[f"{_kind}_test_iam_permissions"] = Rule()  # any authenticated caller, as Pub/Sub
_BODY_RULES = frozenset(name for name, rule in RULES.items() if rule.body)


# -- the middleware -------------------------------------------------------------------------


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
            log.error("route %r has no access rule; refused (add it to api/auth.py RULES)", name)
            raise errors.PermissionDenied(f"no access rule for {name}")
        body: Any = None
        if name in _BODY_RULES:
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


# -- routes: IAM policies, and the keys that verify push tokens -----------------------------

router = APIRouter(tags=["iam"])


class BindingBody(Model):
    role: str
    members: list[str] = Field(default_factory=list)
    condition: dict[str, Any] | None = None


class PolicyBody(Model):
    version: int = 1
    etag: str = ""
    bindings: list[BindingBody] = Field(default_factory=list)


class SetIamPolicyRequest(Model):
    policy: PolicyBody
    update_mask: str = ""


class TestIamPermissionsRequest(Model):
    permissions: list[str] = Field(default_factory=list)


class TestIamPermissionsResponse(Model):
    permissions: list[str] = Field(default_factory=list)


def iam_resource(kind: str, project: str, resource_id: str) -> Resource:
    """The resource an IAM call names (both doors); names are validated."""
    if kind == "project":
        return Resource.of_project(project)
    if kind == "topic":
        return Resource.of_topic(TopicName(project, resource_id))
    if kind == "subscription":
        return Resource.of_subscription(SubscriptionName(project, resource_id))
    return Resource.of_snapshot(SnapshotName(project, resource_id))


def get_policy(engine: Engine, resource: Resource) -> dict[str, Any]:
    """A resource's IAM policy as JSON (both doors)."""
    return PolicyStore(engine.catalog).get(resource).to_json()


def set_policy(state: Any, resource: Resource, body: SetIamPolicyRequest) -> dict[str, Any]:
    """Replace a resource's IAM policy (etag-checked); the new policy as JSON."""
    engine: Engine = state.engine
    doc = body.policy.model_dump(by_alias=True, exclude_none=True)
    policy = Policy.from_json(doc)
    updated = PolicyStore(engine.catalog).put(
        resource, policy, etag=body.policy.etag or None, now_us=engine.settings.clock_us()
    )
    state.policy_view.invalidate()
    return updated.to_json()


def test_permissions(
    principal: Principal, engine: Engine, resource: Resource, body: TestIamPermissionsRequest
) -> dict[str, Any]:
    """Which of the asked permissions ``principal`` holds on ``resource``, as JSON."""
    view = engine.catalog.view(max_staleness_s=0)
    store = PolicyStore(engine.catalog)
    if store.resource_uid(view, resource) is None:
        project_level = store.permissions(
            view, principal, Resource("project", resource.project), PERMISSIONS
        )
        if f"{resource.collection}.get" in project_level:
            raise errors.NotFound(f"Resource not found: {resource.path}")
        return {}
    if resource.kind == "project":
        wanted = list(body.permissions)
    else:
        wanted = [p for p in body.permissions if p.startswith(resource.collection + ".")]
    held = store.permissions(view, principal, resource, wanted)
    granted = [p for p in body.permissions if p in held]
    return {"permissions": granted} if granted else {}


def _add_iam_routes(kind: str, prefix: str) -> None:
    param = "" if kind == "project" else kind
    path = f"/v1/projects/{{project}}{prefix}"

    # The handlers read their path parameters from the request (their names vary
    # by kind), so the document is told about them here.
    documented = {
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in ("project", param)
            if name
        ]
    }

    def rid(params: Mapping[str, str]) -> str:
        return params.get(param, "") if param else ""

    def get_policy_route(request: Request, engine: EngineDep) -> Response:
        params = request.path_params
        return json_response(get_policy(engine, iam_resource(kind, params["project"], rid(params))))

    def set_policy_route(
        request: Request, body: Annotated[SetIamPolicyRequest, Body()]
    ) -> Response:
        params = request.path_params
        resource = iam_resource(kind, params["project"], rid(params))
        return json_response(set_policy(request.app.state, resource, body))

    def test_permissions_route(
        request: Request, engine: EngineDep, body: Annotated[TestIamPermissionsRequest, Body()]
    ) -> Response:
        params = request.path_params
        resource = iam_resource(kind, params["project"], rid(params))
        return json_response(test_permissions(request.state.principal, engine, resource, body))

    for method in ("GET", "POST"):  # one route each: an operation id names one method
        router.add_api_route(
            f"{path}:getIamPolicy",
            get_policy_route,
            methods=[method],
            name=f"{kind}_get_iam_policy",
            openapi_extra=documented,
            response_model=PolicyBody,
            summary=f"Get the IAM policy of a {kind}",
        )
    router.add_api_route(
        f"{path}:setIamPolicy",
        set_policy_route,
        methods=["POST"],
        name=f"{kind}_set_iam_policy",
        openapi_extra=documented,
        response_model=PolicyBody,
        summary=f"Replace the IAM policy of a {kind}",
    )
    router.add_api_route(
        f"{path}:testIamPermissions",
        test_permissions_route,
        methods=["POST"],
        name=f"{kind}_test_iam_permissions",
        openapi_extra=documented,
        response_model=TestIamPermissionsResponse,
        summary=f"Which of the given permissions the caller has on a {kind}",
    )


for _kind, _prefix in (
    ("topic", "/topics/{topic}"),
    ("subscription", "/subscriptions/{subscription}"),
    ("snapshot", "/snapshots/{snapshot}"),
    ("project", ""),
):
    _add_iam_routes(_kind, _prefix)


@router.get("/.well-known/jwks.json", tags=["operations"], name="jwks")
def jwks(request: Request, engine: EngineDep) -> Response:
    """Public keys that verify the OIDC tokens push dispatchers send to endpoints."""
    view = engine.catalog.view(max_staleness_s=POLICY_MAX_STALENESS_S)
    keys = published_keys(view, engine.settings.clock_us())
    service = getattr(request.app.state, "push", None)
    if service is not None and all(k.get("kid") != service.signer.kid for k in keys):
        keys.append(service.signer.public_jwk)
    return Response(
        json_bytes({"keys": keys}),
        media_type="application/json",
        headers={"cache-control": "public, max-age=300"},
    )


@router.get("/.well-known/openid-configuration", tags=["operations"], name="openid_configuration")
def openid_configuration(request: Request) -> Response:
    """OIDC discovery for push tokens: their issuer and where their keys are."""
    issuer = PushSettings.from_env().issuer
    return json_response(
        {
            "issuer": issuer,
            "jwks_uri": str(request.url_for("jwks")),
            "id_token_signing_alg_values_supported": ["RS256", "ES256", "ES384", "ES512"],
            "subject_types_supported": ["public"],
            "response_types_supported": ["id_token"],
            "claims_supported": ["aud", "email", "email_verified", "exp", "iat", "iss", "sub"],
        }
    )


def install(app: FastAPI) -> None:
    """Add the IAM routes (before the resource routes they extend) and the middleware."""
    settings = AuthSettings.from_env()  # a configuration error stops start-up here
    app.state.auth_settings = settings
    app.state.policy_view = PolicyView()
    app.include_router(router)
    app.add_middleware(AccessControl, settings=settings)
