"""Signing in to the console, and what a user with the role may do from it."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, quote, urlencode

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from api.console.access import COOKIE, viewer
from api.console.web import (
    ROOT,
    common,
    console_of,
    engine_of,
    error_page,
    parse_time_us,
    router,
    sub_resource,
    when,
)
from lakepubsub import errors
from lakepubsub.names import SubscriptionName

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


async def act_on(
    request: Request, project: str, subscription: str, act: Callable[[dict[str, str]], str]
) -> Response:
    if not _same_origin(request):
        return error_page(request, 403, "Not allowed", "a form from another site")
    try:
        v = await viewer(request, console_of(request).authenticator)
    except errors.Unauthenticated as exc:
        return error_page(request, 401, "Not signed in", str(exc))
    try:
        v.require("pubsub.subscriptions.consume", sub_resource(project, subscription))
        form = await _form(request)
        done = await run_in_threadpool(act, form)
    except errors.PermissionDenied as exc:
        return error_page(request, 403, "Not allowed", str(exc))
    except errors.LakePubSubError as exc:
        return error_page(request, 400, "Not done", str(exc))
    page = f"{ROOT}/subscriptions/{quote(project)}/{quote(subscription)}"
    return RedirectResponse(f"{page}?{urlencode({'done': done})}", status_code=303)


@router.post("/subscriptions/{project}/{subscription}/seek")
async def seek(request: Request, project: str, subscription: str) -> Response:
    engine = engine_of(request)
    name = SubscriptionName(project, subscription)

    def act(form: dict[str, str]) -> str:
        at_us = parse_time_us(form.get("time", ""), "time")
        if at_us is None:
            raise errors.InvalidArgument("seek needs a time")
        engine.seek_to_time(name, at_us)
        return f"Sought to {when(at_us)}."

    return await act_on(request, project, subscription, act)


@router.post("/subscriptions/{project}/{subscription}/truncate")
async def truncate(request: Request, project: str, subscription: str) -> Response:
    engine = engine_of(request)
    name = SubscriptionName(project, subscription)

    def act(form: dict[str, str]) -> str:
        event = engine.truncate(name)
        return f"Truncated offsets {event.first_offset} to {event.end_offset}."

    return await act_on(request, project, subscription, act)
