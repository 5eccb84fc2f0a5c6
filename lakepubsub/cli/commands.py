"""The ``lakepubsub`` command: serve the API, administer topics and subscriptions,
publish and pull, over HTTP (default) or directly on the lake (``--direct``)."""

from __future__ import annotations

import copy
import logging
import os
import re
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError

import lakepubsub
from jobs.cli import jobs, sql
from lakepubsub import Engine, Settings, constants, gc_tuning
from lakepubsub.cli import intake, messages, snapshots
from lakepubsub.cli.backend import (
    STORAGE_HINT,
    CliError,
    add_get_and_delete,
    backend,
    check_lake,
    echo,
    echo_each,
    paged,
    pairs,
    project_id,
    resource_path,
)
from lakepubsub.errors import LakePubSubError, one_line
from lakepubsub.settings import DEFAULT_LAKE

DEFAULT_URL = "http://127.0.0.1:8085"
DEFAULT_PORT = 8085
MAX_PORT = 65535
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class Cli(click.Group):
    """The ``lakepubsub`` group: a lake or storage failure anywhere below it is one line
    with a hint, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LakePubSubError as exc:
            hint = STORAGE_HINT if exc.status in ("UNAVAILABLE", "DEADLINE_EXCEEDED") else ""
            raise CliError(f"{exc.status}: {one_line(exc.message)}", hint) from exc
        except (BotoCoreError, ClientError) as exc:  # the jobs' S3 listings
            raise CliError(f"storage: {one_line(str(exc))}", STORAGE_HINT) from exc


EPILOG = """\b
The options above may also follow the command (lakepubsub serve --lake DIR).

\b
Environment (README.md, "Configuration"; docs/security.md; docs/spark.md):
  the command     LAKEPUBSUB_URL, LAKEPUBSUB_PROJECT, LAKEPUBSUB_TOKEN,
                  LAKEPUBSUB_LAKE, LAKEPUBSUB_SPARK_MASTER
  S3 lakes        AWS_ENDPOINT_URL (or LAKEPUBSUB_S3_ENDPOINT), AWS_REGION
                  (or AWS_DEFAULT_REGION), AWS_ACCESS_KEY_ID,
                  AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE,
                  AWS_ALLOW_HTTP (set for you with an http:// endpoint),
                  AWS_S3_EXPRESS (true for a directory bucket)
  the server      LAKEPUBSUB_PULL_WAIT_S, LAKEPUBSUB_CATALOG_MAX_STALENESS_S,
                  LAKEPUBSUB_CHANGE_CHECK_S, LAKEPUBSUB_FLUSH_MS, LAKEPUBSUB_LEASE_FLUSH_MS,
                  LAKEPUBSUB_S3_TIER, LAKEPUBSUB_INTAKE, LAKEPUBSUB_INTAKE_LAKE,
                  LAKEPUBSUB_INTAKE_MOVE_S, LAKEPUBSUB_DIRECT_WRITES,
                  LAKEPUBSUB_MAX_INFLIGHT_REQUESTS,
                  LAKEPUBSUB_MAX_INFLIGHT_BODY_BYTES, LAKEPUBSUB_GC_YOUNG_THRESHOLD,
                  LAKEPUBSUB_GRPC_ADDRESS, LAKEPUBSUB_GRPC_TLS_CERT,
                  LAKEPUBSUB_GRPC_TLS_KEY, LAKEPUBSUB_GRPC_LOOP
  peering         LAKEPUBSUB_PEERING, LAKEPUBSUB_PEER_HOST,
                  LAKEPUBSUB_PEER_ADVERTISE, LAKEPUBSUB_PEER_PORT
  access          LAKEPUBSUB_API_KEYS, LAKEPUBSUB_ALLOW_ANONYMOUS,
                  LAKEPUBSUB_JWKS_URL, LAKEPUBSUB_JWT_ISSUER, LAKEPUBSUB_JWT_AUDIENCE
  push delivery   LAKEPUBSUB_PUSH, LAKEPUBSUB_PUSH_AUTHORIZATION,
                  LAKEPUBSUB_PUSH_ALLOW_HTTP, LAKEPUBSUB_PUSH_ALLOW_LOOPBACK,
                  LAKEPUBSUB_PUSH_ALLOW_NETWORKS, LAKEPUBSUB_PUSH_CA_BUNDLE,
                  LAKEPUBSUB_PUSH_ENDPOINT_CONCURRENCY, LAKEPUBSUB_PUSH_ISSUER,
                  LAKEPUBSUB_PUSH_MAX_BACKOFF_S, LAKEPUBSUB_PUSH_MIN_BACKOFF_S,
                  LAKEPUBSUB_PUSH_MAX_OUTSTANDING,
                  LAKEPUBSUB_PUSH_MAX_RESPONSE_BYTES, LAKEPUBSUB_PUSH_REFRESH_S,
                  LAKEPUBSUB_PUSH_SIGNING_KEY
  console         LAKEPUBSUB_CONSOLE_SAMPLE_S
  jobs schedule   LAKEPUBSUB_COMPACT_INTERVAL_S, LAKEPUBSUB_TRUNCATE_INTERVAL_S,
                  LAKEPUBSUB_GC_INTERVAL_S
"""
# The group's options that may also follow a command: name -> is a flag.
GLOBAL_OPTIONS = {"url": False, "project": False, "token": False, "direct": True, "lake": False}


@click.group(cls=Cli, epilog=EPILOG)
@click.version_option(lakepubsub.__version__, prog_name="lakepubsub")
@click.option(
    "--url",
    envvar="LAKEPUBSUB_URL",
    default=DEFAULT_URL,
    show_default=True,
    show_envvar=True,
    help="The server to talk to.",
)
@click.option(
    "--project",
    envvar="LAKEPUBSUB_PROJECT",
    default="local",
    show_default=True,
    show_envvar=True,
    help="Pub/Sub project of the names given.",
)
@click.option(
    "--token",
    envvar="LAKEPUBSUB_TOKEN",
    default=None,
    show_envvar=True,
    help="Bearer token (API key or JWT) for a server with authentication on.",
)
@click.option("--direct", is_flag=True, help="Work on the lake in-process instead of over HTTP.")
@click.option(
    "--lake",
    envvar="LAKEPUBSUB_LAKE",
    default=DEFAULT_LAKE,
    show_default=True,
    show_envvar=True,
    help="Lake root, a directory or s3://bucket/prefix (serve, push, jobs, --direct).",
)
@click.pass_context
def main(
    ctx: click.Context, url: str, project: str, token: str | None, direct: bool, lake: str
) -> None:
    """lakepubsub: Pub/Sub on Delta Lake.

    Serve Pub/Sub's REST and gRPC APIs on a lake, administer topics, subscriptions
    and snapshots, publish, pull and seek, and run the Spark jobs.
    """
    ctx.ensure_object(dict).update(url=url, project=project, token=token, direct=direct, lake=lake)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, MAX_PORT),
    help="Port for REST and gRPC alike (0: a free one, printed at start).",
)
@click.option(
    "--grpc-port",
    default=None,
    type=click.IntRange(1, MAX_PORT),
    help="Also serve gRPC on this port by itself, on HOST (no relay through the shared "
    "port: less CPU per message; LAKEPUBSUB_GRPC_ADDRESS).",
)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1), help="Processes.")
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="PEM certificate: serve HTTPS.",
)
@click.option(
    "--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="PEM key."
)
@click.option("--log-level", default="info", show_default=True, help="uvicorn's log level.")
@click.option(
    "--access-log/--no-access-log",
    default=True,
    show_default=True,
    help="One line per REST request and per gRPC call (off: the CPU they cost).",
)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    grpc_port: int | None,
    workers: int,
    tls_cert: str | None,
    tls_key: str | None,
    log_level: str,
    access_log: bool,
) -> None:
    """Serve Pub/Sub's REST and gRPC APIs on one port, on the lake (--lake,
    LAKEPUBSUB_LAKE): http://HOST:PORT for REST, PUBSUB_EMULATOR_HOST=HOST:PORT for
    Google's clients over gRPC. Logs one line per REST request and per gRPC call."""
    import uvicorn  # noqa: PLC0415 — only `serve` needs it: the other commands start quicker

    from api.grpc import OnePortProtocol  # noqa: PLC0415 — only `serve` loads the doors
    from api.grpc.door import ACCESS_LOG  # noqa: PLC0415 — only `serve` loads the doors

    lake = check_lake(ctx.ensure_object(dict)["lake"])
    os.environ["LAKEPUBSUB_LAKE"] = lake
    click.echo(f"lakepubsub: lake {lake}, http{'s' if tls_cert else ''}://{host}:{port}")
    if grpc_port is not None:  # read by each worker's gRPC door (api/grpc/door.py)
        os.environ["LAKEPUBSUB_GRPC_ADDRESS"] = f"{host}:{grpc_port}"
        if tls_cert and tls_key:
            os.environ["LAKEPUBSUB_GRPC_TLS_CERT"] = tls_cert
            os.environ["LAKEPUBSUB_GRPC_TLS_KEY"] = tls_key
        click.echo(f"lakepubsub: gRPC also at {host}:{grpc_port}")
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
        timeout_keep_alive=constants.KEEP_ALIVE_S,
        http=OnePortProtocol,
        access_log=access_log,
        log_config=_log_config(log_level if access_log else "warning", ACCESS_LOG.name),
    )


def _log_config(log_level: str, grpc_access: str) -> dict[str, Any]:
    """uvicorn's logging, plus the gRPC door's access log (``grpc_access``) beside
    uvicorn's REST access log, at the same level."""
    from uvicorn.config import LOG_LEVELS, LOGGING_CONFIG  # noqa: PLC0415 — only for `serve`

    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["grpc_access"] = {**config["handlers"]["access"], "formatter": "default"}
    config["loggers"][grpc_access] = {
        "handlers": ["grpc_access"],
        "level": LOG_LEVELS.get(log_level.lower(), logging.INFO),
        "propagate": False,
    }
    return config


@main.command("push")
@click.pass_context
def push_command(ctx: click.Context) -> None:
    """Run push delivery only, on the lake (--lake): add processes to scale out."""
    # [push integration, issue 7] every setting is read from LAKEPUBSUB_PUSH_*.
    from lakepubsub.push import run_forever  # noqa: PLC0415 — ~0.3 s of imports, only for `push`

    lake = check_lake(ctx.ensure_object(dict)["lake"])
    os.environ["LAKEPUBSUB_LAKE"] = lake
    click.echo(f"lakepubsub: push delivery for lake {lake}")
    engine = Engine(Settings.from_env())
    gc_tuning.settle(engine.settings.gc_young_threshold)
    run_forever(engine)


# -- topics ------------------------------------------------------------------------------


def _retention(text: str) -> str:
    """A retention as protobuf JSON: ``7d``, ``12h``, ``30m``, ``600s`` or ``600``."""
    match = re.fullmatch(r"(\d+)([smhd]?)", text.strip())
    if match is None:
        raise click.BadParameter(f"expected e.g. 7d, 12h, 30m or 600s; got {text!r}")
    return f"{int(match.group(1)) * _DURATION_UNITS[match.group(2)]}s"


@main.group()
def topics() -> None:
    """Create, list and delete topics; show or set their retention."""


@topics.command("create")
@click.argument("topic")
@click.option("--label", "labels", multiple=True, help="key=value, repeatable")
@click.option("--retention", default=None, help="Keep messages this long: 7d, 12h, 600s.")
@click.pass_context
def topics_create(
    ctx: click.Context, topic: str, labels: tuple[str, ...], retention: str | None
) -> None:
    """Create TOPIC and print it as JSON."""
    body: dict[str, Any] = {"labels": pairs(labels)} if labels else {}
    if retention:
        body["messageRetentionDuration"] = _retention(retention)
    echo(backend(ctx).call("PUT", f"/v1/projects/{project_id(ctx)}/topics/{topic}", body))


@topics.command("list")
@click.pass_context
def topics_list(ctx: click.Context) -> None:
    """Print the project's topics, one name a line."""
    docs = paged(ctx, f"/v1/projects/{project_id(ctx)}/topics", "topics")
    echo_each((doc["name"] for doc in docs), none=f"no topics in project {project_id(ctx)}")


@topics.command("retention")
@click.argument("topic")
@click.argument("duration", required=False)
@click.pass_context
def topics_retention(ctx: click.Context, topic: str, duration: str | None) -> None:
    """Show TOPIC's message retention, or set it to DURATION (7d, 12h, 600s; the
    default is 7 days, 3153600000s keeps messages forever)."""
    path = resource_path(ctx, "topics", topic)
    if duration is None:
        doc = backend(ctx).call("GET", path)
    else:
        body = {
            "topic": {"messageRetentionDuration": _retention(duration)},
            "updateMask": "messageRetentionDuration",
        }
        doc = backend(ctx).call("PATCH", path, body)
    kept = doc.get("messageRetentionDuration")
    click.echo(f"{doc['name']}: retention {kept or 'not set (the default, 7 days)'}")


add_get_and_delete(
    topics,
    "topics",
    "topic",
    get="Print TOPIC as JSON.",
    delete="Delete TOPIC (its subscriptions are detached from it, as in Pub/Sub).",
)


# -- subscriptions -----------------------------------------------------------------------


@main.group()
def subscriptions() -> None:
    """Create, list, show, truncate and delete subscriptions."""


def _topic_path(project: str, topic: str) -> str:
    return topic if "/" in topic else f"projects/{project}/topics/{topic}"


@subscriptions.command("create")
@click.argument("subscription")
@click.option("--topic", required=True, help="Topic id, or projects/P/topics/T.")
@click.option("--ack-deadline", type=int, default=None, help="seconds, 10-600")
@click.option("--max-bytes", type=int, default=None, help="truncation policy: backlog bytes")
@click.option("--max-age", type=int, default=None, help="truncation policy: backlog age, seconds")
@click.option("--filter", "filter_", default=None, help="Pub/Sub filter on attributes.")
@click.option("--exactly-once", is_flag=True, help="Exactly-once delivery.")
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
    """Create SUBSCRIPTION on a topic and print it as JSON."""
    project = project_id(ctx)
    body: dict[str, Any] = {"topic": _topic_path(project, topic)}
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
    echo(backend(ctx).call("PUT", f"/v1/projects/{project}/subscriptions/{subscription}", body))


@subscriptions.command("list")
@click.option("--topic", default=None, help="only this topic's subscriptions")
@click.pass_context
def subscriptions_list(ctx: click.Context, topic: str | None) -> None:
    """Print the project's subscriptions (or one topic's), one a line."""
    project = project_id(ctx)
    if topic:
        path = f"/v1/projects/{project}/topics/{topic}/subscriptions"
        lines = paged(ctx, path, "subscriptions")
    else:
        docs = paged(ctx, f"/v1/projects/{project}/subscriptions", "subscriptions")
        lines = (f"{doc['name']}  topic={doc['topic']}" for doc in docs)
    where = f"topic {topic} of project {project}" if topic else f"project {project}"
    echo_each(lines, none=f"no subscriptions in {where}")


@subscriptions.command("truncate")
@click.argument("subscription")
@click.pass_context
def subscriptions_truncate(ctx: click.Context, subscription: str) -> None:
    """Drop every message SUBSCRIPTION has not acknowledged; its next pull then
    delivers a truncation event first."""
    path = resource_path(ctx, "subscriptions", subscription)
    event = backend(ctx).call("POST", f"{path}:truncate").get("event", {})
    first, end = event.get("firstOffset", 0), event.get("endOffset", 0)
    if not event.get("truncated", True) or end <= first:
        click.echo(f"{subscription}: nothing to drop (no unacknowledged messages)")
        return
    click.echo(
        f"{subscription}: dropped offsets {first}-{end - 1}; "
        "the next pull delivers a truncation event first"
    )


add_get_and_delete(
    subscriptions,
    "subscriptions",
    "subscription",
    get="Print SUBSCRIPTION as JSON (with its truncation policy, if it has one).",
    delete="Delete SUBSCRIPTION and what it has not acknowledged.",
)


def _add_message_commands() -> None:
    for command in [*messages.COMMANDS, *snapshots.COMMANDS, *intake.COMMANDS]:
        main.add_command(command)


def _add_spark_commands() -> None:
    """``lakepubsub jobs …`` and ``lakepubsub sql``: defined with the jobs, which
    import PySpark only when a command runs, so the CLI stays quick to start."""
    main.add_command(jobs)
    main.add_command(sql)


def _store_late_option(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None and value is not False and param.name:
        ctx.find_root().ensure_object(dict)[param.name] = value


def _accept_global_options(group: click.Group) -> None:
    """Let every command take the group's options after its name too: ``lakepubsub
    serve --lake DIR`` as ``lakepubsub --lake DIR serve``. A command's own option of
    the same name (``jobs run compact --lake``) is left as it is."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _accept_global_options(command)
            continue
        taken = {opt for param in command.params for opt in param.opts}
        for name, flag in GLOBAL_OPTIONS.items():
            if f"--{name}" in taken:
                continue
            command.params.append(
                click.Option(
                    [f"--{name}"],
                    is_flag=flag,
                    default=False if flag else None,
                    hidden=True,
                    expose_value=False,
                    callback=_store_late_option,
                )
            )


_add_message_commands()
_add_spark_commands()
_accept_global_options(main)
