"""The ``lakepubsub`` command: serve the API, administer topics and subscriptions,
publish and pull, over HTTP (default) or directly on the lake (``--direct``)."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, Protocol

import click
import httpx

from lakepubsub.settings import DEFAULT_LAKE

DEFAULT_URL = "http://127.0.0.1:8085"
DEFAULT_PORT = 8085


class Backend(Protocol):
    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...


class HttpBackend:
    """Talks to a running server."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=url, headers=headers, timeout=60)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach {self.client.base_url}: {exc}") from exc
        doc = response.json() if response.content else {}
        if response.status_code >= 400:
            error = doc.get("error", {})
            raise click.ClickException(
                f"{error.get('status', response.status_code)}: {error.get('message', doc)}"
            )
        return doc


class DirectBackend:
    """Runs the same requests against the lake in this process, through the app."""

    def __init__(self, lake: str) -> None:
        import warnings

        with warnings.catch_warnings():
            # Starlette's test client warns about its httpx dependency; it works.
            warnings.simplefilter("ignore", DeprecationWarning)
            from fastapi.testclient import TestClient

        from api.app import create_app
        from lakepubsub import Engine, Settings

        self.engine = Engine(Settings.from_env({**os.environ, "LAKEPUBSUB_LAKE": lake}))
        self.client = TestClient(create_app(self.engine))
        self.client.__enter__()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.client.request(method, path, json=body)
        doc = response.json() if response.content else {}
        if response.status_code >= 400:
            error = doc.get("error", {})
            raise click.ClickException(f"{error.get('status')}: {error.get('message')}")
        return doc


def _backend(ctx: click.Context) -> Backend:
    obj = ctx.ensure_object(dict)
    if "backend" not in obj:
        if obj["direct"]:
            obj["backend"] = DirectBackend(obj["lake"])
        else:
            obj["backend"] = HttpBackend(obj["url"], obj["token"])
    backend: Backend = obj["backend"]
    return backend


def _project(ctx: click.Context) -> str:
    return str(ctx.ensure_object(dict)["project"])


def _echo(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=True))


@click.group()
@click.option(
    "--url", envvar="LAKEPUBSUB_URL", default=DEFAULT_URL, show_default=True, help="Server URL."
)
@click.option("--project", envvar="LAKEPUBSUB_PROJECT", default="local", show_default=True)
@click.option("--token", envvar="LAKEPUBSUB_TOKEN", default=None, help="Bearer token.")
@click.option("--direct", is_flag=True, help="Work on the lake in-process instead of over HTTP.")
@click.option("--lake", envvar="LAKEPUBSUB_LAKE", default=DEFAULT_LAKE, show_default=True)
@click.pass_context
def main(
    ctx: click.Context, url: str, project: str, token: str | None, direct: bool, lake: str
) -> None:
    """lakepubsub: Pub/Sub on Delta Lake."""
    ctx.ensure_object(dict).update(url=url, project=project, token=token, direct=direct, lake=lake)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int)
@click.option("--workers", default=1, show_default=True, type=int, help="Server processes.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--log-level", default="info", show_default=True)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    workers: int,
    tls_cert: str | None,
    tls_key: str | None,
    log_level: str,
) -> None:
    """Serve Pub/Sub's REST and gRPC APIs on one port, on the lake (``--lake`` /
    LAKEPUBSUB_LAKE): ``http://HOST:PORT`` for REST, ``PUBSUB_EMULATOR_HOST=HOST:PORT``
    for Google's clients over gRPC."""
    import uvicorn

    from api.grpc import OnePortProtocol

    os.environ["LAKEPUBSUB_LAKE"] = ctx.ensure_object(dict)["lake"]
    click.echo(
        f"lakepubsub: lake {os.environ['LAKEPUBSUB_LAKE']}, http{'s' if tls_cert else ''}://{host}:{port}"
    )
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        timeout_graceful_shutdown=30,
        http=OnePortProtocol,
    )


@main.command("push")
@click.pass_context
def push_command(ctx: click.Context) -> None:
    """Run push delivery only, on the lake (``--lake``): add processes to scale out."""
    # [push integration, issue 7] every setting is read from LAKEPUBSUB_PUSH_*.
    from lakepubsub import Engine, Settings
    from lakepubsub.push import run_forever

    os.environ["LAKEPUBSUB_LAKE"] = ctx.ensure_object(dict)["lake"]
    click.echo(f"lakepubsub: push delivery for lake {os.environ['LAKEPUBSUB_LAKE']}")
    run_forever(Engine(Settings.from_env()))


@main.group()
def topics() -> None:
    """Create, list and delete topics."""


@topics.command("create")
@click.argument("topic")
@click.option("--label", "labels", multiple=True, help="key=value, repeatable")
@click.pass_context
def topics_create(ctx: click.Context, topic: str, labels: tuple[str, ...]) -> None:
    body = {"labels": _pairs(labels)} if labels else {}
    _echo(_backend(ctx).call("PUT", f"/v1/projects/{_project(ctx)}/topics/{topic}", body))


@topics.command("list")
@click.pass_context
def topics_list(ctx: click.Context) -> None:
    for doc in _paged(ctx, f"/v1/projects/{_project(ctx)}/topics", "topics"):
        click.echo(doc["name"])


@topics.command("delete")
@click.argument("topic")
@click.pass_context
def topics_delete(ctx: click.Context, topic: str) -> None:
    _backend(ctx).call("DELETE", f"/v1/projects/{_project(ctx)}/topics/{topic}")
    click.echo(f"deleted topic {topic}")


@main.group()
def subscriptions() -> None:
    """Create, list and delete subscriptions."""


@subscriptions.command("create")
@click.argument("subscription")
@click.option("--topic", required=True)
@click.option("--ack-deadline", type=int, default=None, help="seconds, 10-600")
@click.option("--max-bytes", type=int, default=None, help="truncation policy: backlog bytes")
@click.option("--max-age", type=int, default=None, help="truncation policy: backlog age, seconds")
@click.option("--filter", "filter_", default=None)
@click.option("--exactly-once", is_flag=True)
@click.pass_context
def subscriptions_create(
    ctx: click.Context,
    subscription: str,
    topic: str,
    ack_deadline: int | None,
    max_bytes: int | None,
    max_age: int | None,
    filter_: str | None,
    exactly_once: bool,
) -> None:
    project = _project(ctx)
    body: dict[str, Any] = {
        "topic": topic if "/" in topic else f"projects/{project}/topics/{topic}"
    }
    if ack_deadline:
        body["ackDeadlineSeconds"] = ack_deadline
    if max_bytes or max_age:
        body["truncationPolicy"] = {
            k: v for k, v in (("maxBytes", max_bytes), ("maxAgeSeconds", max_age)) if v
        }
    if filter_:
        body["filter"] = filter_
    if exactly_once:
        body["enableExactlyOnceDelivery"] = True
    _echo(_backend(ctx).call("PUT", f"/v1/projects/{project}/subscriptions/{subscription}", body))


@subscriptions.command("list")
@click.option("--topic", default=None, help="only this topic's subscriptions")
@click.pass_context
def subscriptions_list(ctx: click.Context, topic: str | None) -> None:
    project = _project(ctx)
    if topic:
        for name in _paged(
            ctx, f"/v1/projects/{project}/topics/{topic}/subscriptions", "subscriptions"
        ):
            click.echo(name)
    else:
        for doc in _paged(ctx, f"/v1/projects/{project}/subscriptions", "subscriptions"):
            click.echo(f"{doc['name']}  topic={doc['topic']}")


@subscriptions.command("delete")
@click.argument("subscription")
@click.pass_context
def subscriptions_delete(ctx: click.Context, subscription: str) -> None:
    _backend(ctx).call("DELETE", f"/v1/projects/{_project(ctx)}/subscriptions/{subscription}")
    click.echo(f"deleted subscription {subscription}")


@main.command()
@click.argument("topic")
@click.option("--data", default=None, help="message data (text)")
@click.option("--attr", "attrs", multiple=True, help="key=value, repeatable")
@click.option("--ordering-key", default="")
@click.option(
    "--file", "path", type=click.File("rb"), default=None, help="one message per line ('-': stdin)"
)
@click.pass_context
def publish(
    ctx: click.Context,
    topic: str,
    data: str | None,
    attrs: tuple[str, ...],
    ordering_key: str,
    path: Any,
) -> None:
    """Publish one message (--data/--attr) or one per line of a file."""
    attributes = _pairs(attrs)
    payloads = [line.rstrip(b"\n") for line in path] if path else [(data or "").encode()]
    ids: list[str] = []
    for chunk in _chunks(payloads, 1000):
        messages = []
        for payload in chunk:
            message: dict[str, Any] = {"data": base64.b64encode(payload).decode()}
            if attributes:
                message["attributes"] = attributes
            if ordering_key:
                message["orderingKey"] = ordering_key
            messages.append(message)
        doc = _backend(ctx).call(
            "POST", f"/v1/projects/{_project(ctx)}/topics/{topic}:publish", {"messages": messages}
        )
        ids += doc["messageIds"]
    for message_id in ids:
        click.echo(message_id)


@main.command()
@click.argument("subscription")
@click.option("--max", "max_messages", default=10, show_default=True)
@click.option("--ack", is_flag=True, help="acknowledge what was received")
@click.option("--wait/--no-wait", default=False, help="long-poll for messages")
@click.pass_context
def pull(ctx: click.Context, subscription: str, max_messages: int, ack: bool, wait: bool) -> None:
    """Pull messages and print them as JSON lines (data decoded as UTF-8 where possible)."""
    base = f"/v1/projects/{_project(ctx)}/subscriptions/{subscription}"
    doc = _backend(ctx).call(
        "POST", f"{base}:pull", {"maxMessages": max_messages, "returnImmediately": not wait}
    )
    received = doc.get("receivedMessages", [])
    for item in received:
        message = item["message"]
        raw = base64.b64decode(message.get("data", ""))
        try:
            text: str = raw.decode()
        except UnicodeDecodeError:
            text = message.get("data", "")
        out = {
            "ackId": item["ackId"],
            "messageId": message.get("messageId"),
            "data": text,
            "attributes": message.get("attributes", {}),
            "deliveryAttempt": item.get("deliveryAttempt"),
        }
        if "event" in item:
            out["event"] = item["event"]
        click.echo(json.dumps(out))
    if ack and received:
        _backend(ctx).call(
            "POST", f"{base}:acknowledge", {"ackIds": [r["ackId"] for r in received]}
        )
        click.echo(f"acknowledged {len(received)}", err=True)


def _pairs(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {item!r}")
        out[key] = value
    return out


def _chunks(items: list[bytes], size: int) -> Iterator[list[bytes]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _paged(ctx: click.Context, path: str, field: str) -> Iterator[Any]:
    token = ""
    while True:
        doc = _backend(ctx).call(
            "GET", f"{path}?pageSize=1000" + (f"&pageToken={token}" if token else "")
        )
        yield from doc.get(field, [])
        token = doc.get("nextPageToken", "")
        if not token:
            return


def _add_spark_commands() -> None:
    """``lakepubsub jobs …`` and ``lakepubsub sql``: defined with the jobs, which
    import PySpark only when a command runs, so the CLI stays quick to start."""
    from jobs.cli import jobs, sql

    main.add_command(jobs)
    main.add_command(sql)


_add_spark_commands()

if __name__ == "__main__":
    sys.exit(main())
