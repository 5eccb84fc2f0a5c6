"""The IAM routes (getIamPolicy, setIamPolicy, testIamPermissions on projects,
topics, subscriptions and snapshots) and the functions both doors call for them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import Field
from pydantic.alias_generators import to_snake
from starlette.responses import Response

from api.deps import EngineDep, json_response
from api.models import Model
from lakepubsub import Engine, errors
from lakepubsub.resources.iam import PERMISSIONS, Policy, PolicyStore, Principal, Resource
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName

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

    def resource_of(request: Request) -> Resource:
        params = request.path_params
        return iam_resource(kind, params["project"], params.get(param, "") if param else "")

    def get_policy_route(request: Request, engine: EngineDep) -> Response:
        return json_response(get_policy(engine, resource_of(request)))

    def set_policy_route(
        request: Request, body: Annotated[SetIamPolicyRequest, Body()]
    ) -> Response:
        return json_response(set_policy(request.app.state, resource_of(request), body))

    def test_permissions_route(
        request: Request, engine: EngineDep, body: Annotated[TestIamPermissionsRequest, Body()]
    ) -> Response:
        principal = request.state.principal
        return json_response(test_permissions(principal, engine, resource_of(request), body))

    routes: tuple[tuple[str, Callable[..., Response], tuple[str, ...], type[Model], str], ...] = (
        ("getIamPolicy", get_policy_route, ("GET", "POST"), PolicyBody, "Get the IAM policy of a"),
        ("setIamPolicy", set_policy_route, ("POST",), PolicyBody, "Replace the IAM policy of a"),
        (
            "testIamPermissions",
            test_permissions_route,
            ("POST",),
            TestIamPermissionsResponse,
            "Which of the given permissions the caller has on a",
        ),
    )
    for verb, handler, methods, model, summary in routes:
        for method in methods:  # one route each: an operation id names one method
            router.add_api_route(
                f"{path}:{verb}",
                handler,
                methods=[method],
                name=f"{kind}_{to_snake(verb)}",
                openapi_extra=documented,
                response_model=model,
                summary=f"{summary} {kind}",
            )


for _kind, _prefix in (
    ("topic", "/topics/{topic}"),
    ("subscription", "/subscriptions/{subscription}"),
    ("snapshot", "/snapshots/{snapshot}"),
    ("project", ""),
):
    _add_iam_routes(_kind, _prefix)
