"""How the ``lakepubsub`` command reaches a lake: a running server over HTTP, or the
same REST app in this process (``--direct``). Either way a request's failure is a
``CliError``: one line, with a hint where one helps."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import urlparse

import click
import httpx

from lakepubsub import Engine, Settings
from lakepubsub.errors import LakePubSubError, one_line

# How long one CLI request may take (a long-polling pull waits up to ~10 s).
REQUEST_TIMEOUT_S = 60.0
UNREACHABLE_HINT = (
    "start one with `lakepubsub serve`, point --url (LAKEPUBSUB_URL) at it, "
    "or work on the lake in-process with --direct"
)
STORAGE_HINT = (
    "check --lake (LAKEPUBSUB_LAKE); for S3, that the bucket exists and the AWS_* "
    "settings (AWS_ENDPOINT_URL, credentials, region) reach it"
)
DIRECTORY_HINT = "--lake (LAKEPUBSUB_LAKE) must name a directory this user can create and write"


def check_lake(lake: str) -> str:
    """Fail now, in one line, if this process cannot work on ``lake`` (a directory it
    cannot create or write, a missing bucket…); return ``lake_root(lake)``."""
    root = lake_root(lake)
    try:
        with Engine(Settings.from_env({**os.environ, "LAKEPUBSUB_LAKE": root})) as engine:
            engine.catalog.view(max_staleness_s=0)
    except LakePubSubError as exc:
        raise CliError(f"lake {root}: {one_line(exc.message)}", STORAGE_HINT) from exc
    return root


def lake_root(lake: str) -> str:
    """The lake's root as people should see it: an absolute path (a directory made
    if need be, and checked writable, in one line if not), or the S3 URI."""
    parsed = urlparse(lake)
    if parsed.scheme not in ("", "file"):
        return lake
    root = os.path.abspath(parsed.path if parsed.scheme else lake)
    _check_directory(root)
    return root


def _check_directory(root: str) -> None:
    if os.path.exists(root) and not os.path.isdir(root):
        raise CliError(f"lake {root}: not a directory", DIRECTORY_HINT)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise CliError(
            f"lake {root}: cannot create the directory ({exc.strerror})", DIRECTORY_HINT
        ) from exc
    try:
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as exc:
        raise CliError(
            f"lake {root}: cannot write in the directory ({exc.strerror})", DIRECTORY_HINT
        ) from exc


class CliError(click.ClickException):
    """A failure shown as one line: ``Error: <message> (hint: <hint>)``."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def format_message(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class RequestFailed(CliError):
    """The server answered a request with an error (``status``: Pub/Sub's code name)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Backend(Protocol):
    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...

    def close(self) -> None: ...


def _answer(response: httpx.Response) -> Any:
    try:
        doc = response.json() if response.content else {}
    except ValueError:
        doc = {"error": {"message": response.text[:200]}}
    if response.is_error:
        error = doc.get("error", {}) if isinstance(doc, dict) else {}
        raise RequestFailed(
            str(error.get("status", response.status_code)), str(error.get("message", doc))
        )
    return doc


class HttpBackend:
    """Talks to a running server."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise CliError(
                f"cannot reach the server at {self.client.base_url}: {exc}", UNREACHABLE_HINT
            ) from exc
        return _answer(response)

    def close(self) -> None:
        self.client.close()


class DirectBackend:
    """Runs the same REST requests against the lake in this process: the app on an
    event loop of its own (anyio's blocking portal), reached through httpx's ASGI
    transport, with its lifespan run as a server runs it."""

    def __init__(self, lake: str) -> None:
        import anyio.from_thread  # noqa: PLC0415 — ~0.1 s to import, only for --direct

        from api.app import create_app  # noqa: PLC0415 — the REST app loads only for --direct

        root = lake_root(lake)
        try:
            self.engine = Engine(Settings.from_env({**os.environ, "LAKEPUBSUB_LAKE": root}))
            self.engine.catalog.view(max_staleness_s=0)
        except LakePubSubError as exc:
            raise CliError(f"lake {root}: {one_line(exc.message)}", STORAGE_HINT) from exc
        app = create_app(self.engine)
        self._stack = contextlib.ExitStack()
        self.portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        self._stack.enter_context(
            self.portal.wrap_async_context_manager(app.router.lifespan_context(app))
        )
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://lakepubsub.direct",
            timeout=REQUEST_TIMEOUT_S,
        )

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.portal.call(lambda: self.client.request(method, path, json=body))
        return _answer(response)

    def close(self) -> None:
        self.portal.call(self.client.aclose)
        self._stack.close()


def backend(ctx: click.Context) -> Backend:
    """The backend of this invocation (made on first use, closed when it ends)."""
    obj = ctx.ensure_object(dict)
    if "backend" not in obj:
        made: Backend = (
            DirectBackend(obj["lake"]) if obj["direct"] else HttpBackend(obj["url"], obj["token"])
        )
        obj["backend"] = made
        ctx.find_root().call_on_close(made.close)
    found: Backend = obj["backend"]
    return found


def project_id(ctx: click.Context) -> str:
    return str(ctx.ensure_object(dict)["project"])


def none_found(text: str) -> None:
    """An empty result, said on stderr (stdout stays empty for scripts)."""
    click.echo(text, err=True)


def echo_each(lines: Iterator[str], *, none: str) -> None:
    """Print the lines, one a line; ``none`` (by ``none_found``) if there was none."""
    found = False
    for line in lines:
        click.echo(line)
        found = True
    if not found:
        none_found(none)


def resource_path(ctx: click.Context, collection: str, name: str) -> str:
    """The REST path of the resource ``name`` in a collection of the project."""
    return f"/v1/projects/{project_id(ctx)}/{collection}/{name}"


def add_get_and_delete(
    group: click.Group, collection: str, kind: str, *, get: str | None, delete: str
) -> None:
    """Give ``group`` the commands on one resource of the project's ``collection``:
    ``get NAME`` prints it as JSON (none when ``get``, its help, is None) and
    ``delete NAME`` deletes it and says so."""
    name_argument = click.argument("name", metavar=kind.upper())
    if get is not None:

        @group.command("get", help=get)
        @name_argument
        @click.pass_context
        def get_command(ctx: click.Context, name: str) -> None:
            echo(backend(ctx).call("GET", resource_path(ctx, collection, name)))

    @group.command("delete", help=delete)
    @name_argument
    @click.pass_context
    def delete_command(ctx: click.Context, name: str) -> None:
        backend(ctx).call("DELETE", resource_path(ctx, collection, name))
        click.echo(f"deleted {kind} {name}")


def pairs(items: tuple[str, ...]) -> dict[str, str]:
    """``key=value`` options as a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {item!r}")
        out[key] = value
    return out


def echo(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=True))


def paged(ctx: click.Context, path: str, field: str) -> Iterator[Any]:
    token = ""
    while True:
        doc = backend(ctx).call(
            "GET", f"{path}?pageSize=1000" + (f"&pageToken={token}" if token else "")
        )
        yield from doc.get(field, [])
        token = doc.get("nextPageToken", "")
        if not token:
            return
