"""Signing in to the console, and what a user with the role may do from it."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, quote, urlencode

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from api.console import replay as dead_letters
from api.console.access import COOKIE, Viewer, viewer
from api.console.charts import when
from api.console.web import (
    ROOT,
    common,
    console_of,
    engine_of,
    error_page,
    parse_time_us,
    router,
    sub_resource,
    topic_resource,
)
from lakepubsub import Engine, errors
from lakepubsub.resources.iam import Resource
from lakepubsub.resources.names import SnapshotName, SubscriptionName

# Form bodies larger than this are refused (a real one is under a hundred bytes).
MAX_FORM_BYTES = 16 * 1024


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise errors.InvalidArgument("form too large")
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", errors="replace")).items()}


def _same_origin(request: Request) -> bool:
    """A form posted from this server's own pages (the cookie is SameSite=Strict too)."""
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


def _next(target: str) -> str:
    return target if target.startswith(f"{ROOT}/") else f"{ROOT}/topics"


@router.get("/login")
def login_page(request: Request, next: str = "") -> Response:
    return console_of(request).templates.TemplateResponse(
        request, "login.html", common(request, None, "", title="Sign in", next=_next(next))
    )


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    token = form.get("token", "").strip()
    scope = {**request.scope, "headers": [(b"authorization", f"Bearer {token}".encode())]}
    try:
        await console_of(request).authenticator.principal(scope)
    except errors.LakePubSubError as exc:
        return error_page(request, 401, "Not signed in", str(exc))
    response = RedirectResponse(_next(form.get("next", "")), status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        path=ROOT,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout() -> Response:
    response = RedirectResponse(f"{ROOT}/login", status_code=303)
    response.delete_cookie(COOKIE, path=ROOT)
    return response


# An action on a subscription: what it did, in a sentence for the page it returns to.
Act = Callable[[Engine, SubscriptionName, Viewer, dict[str, str]], str]


async def act_on(request: Request, project: str, subscription: str, act: Act) -> Response:
    """Run ``act`` for a caller who may consume the subscription (``act`` checks any
    other permission it needs), then show the subscription's page with what it did."""
    if not _same_origin(request):
        return error_page(request, 403, "Not allowed", "a form from another site")
    try:
        v = await viewer(request, console_of(request).authenticator)
    except errors.Unauthenticated as exc:
        return error_page(request, 401, "Not signed in", str(exc))
    name = SubscriptionName(project, subscription)
    try:
        v.require("pubsub.subscriptions.consume", sub_resource(project, subscription))
        form = await _form(request)
        done = await run_in_threadpool(act, engine_of(request), name, v, form)
    except errors.PermissionDenied as exc:
        return error_page(request, 403, "Not allowed", str(exc))
    except errors.LakePubSubError as exc:
        return error_page(request, 400, "Not done", str(exc))
    page = f"{ROOT}/subscriptions/{quote(project)}/{quote(subscription)}"
    return RedirectResponse(f"{page}?{urlencode({'done': done})}", status_code=303)


def action(verb: str) -> Callable[[Act], Act]:
    """Serve ``act`` at ``POST /console/subscriptions/{project}/{subscription}/{verb}``."""

    def register(act: Act) -> Act:
        async def endpoint(request: Request, project: str, subscription: str) -> Response:
            return await act_on(request, project, subscription, act)

        router.add_api_route(
            f"/subscriptions/{{project}}/{{subscription}}/{verb}",
            endpoint,
            methods=["POST"],
            name=act.__name__,
        )
        return act

    return register


@action("seek")
def seek(engine: Engine, name: SubscriptionName, v: Viewer, form: dict[str, str]) -> str:
    at_us = parse_time_us(form.get("time", ""), "time")
    if at_us is None:
        raise errors.InvalidArgument("seek needs a time")
    engine.seek_to_time(name, at_us)
    return f"Sought to {when(at_us)}."


@action("truncate")
def truncate(engine: Engine, name: SubscriptionName, v: Viewer, form: dict[str, str]) -> str:
    event = engine.truncate(name)
    return f"Truncated offsets {event.first_offset} to {event.end_offset}."


@action("snapshot")
def create_snapshot(engine: Engine, name: SubscriptionName, v: Viewer, form: dict[str, str]) -> str:
    """A snapshot of the subscription, named in the subscription's project."""
    snapshot = SnapshotName(name.project, form.get("snapshot", "").strip())
    v.require("pubsub.snapshots.create", Resource.of_project(name.project))
    created = engine.create_snapshot(snapshot, name)
    return f"Created snapshot {created.name.path} (expires {when(created.expire_time_us)})."


@action("seek-snapshot")
def seek_snapshot(engine: Engine, name: SubscriptionName, v: Viewer, form: dict[str, str]) -> str:
    snapshot = SnapshotName.parse(form.get("snapshot", ""))
    v.require("pubsub.snapshots.seek", Resource.of_snapshot(snapshot))
    engine.seek_to_snapshot(name, snapshot)
    return f"Sought to snapshot {snapshot.path}."


@action("replay")
def replay_dead_letters(
    engine: Engine, name: SubscriptionName, v: Viewer, form: dict[str, str]
) -> str:
    """Move what the subscription dead-lettered back to its topic (``api/console/replay.py``)."""
    sub = engine.get_subscription(name)
    policy = sub.dead_letter_policy
    if policy is None:
        raise errors.FailedPrecondition(f"{name.path} has no dead-letter policy")
    source = SubscriptionName.parse(form.get("source", ""))
    if engine.get_subscription(source).topic != policy.dead_letter_topic:
        raise errors.InvalidArgument(
            f"{source.path} is not a subscription of {policy.dead_letter_topic.path}"
        )
    v.require("pubsub.subscriptions.consume", sub_resource(source.project, source.id))
    v.require("pubsub.topics.publish", topic_resource(sub.topic.project, sub.topic.id))
    done = dead_letters.replay(engine, name, sub.topic, source, policy.dead_letter_topic)
    return dead_letters.summary(done, sub.topic, source)
