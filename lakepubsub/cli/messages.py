"""``lakepubsub publish``, ``pull``, ``ack`` and ``nack``: messages in and out."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from typing import Any

import click

from lakepubsub import constants
from lakepubsub.cli.backend import (
    CliError,
    backend,
    none_found,
    pairs,
    project_id,
    resource_path,
)

# A publish request's JSON carries data in base64 (4/3) plus framing; keep each one
# well under the server's body limit as well as Pub/Sub's 10 MB of message bytes.
PUBLISH_CHUNK_BYTES = 7_000_000


def _message(payload: bytes, attributes: dict[str, str], ordering_key: str) -> dict[str, Any]:
    message: dict[str, Any] = {"data": base64.b64encode(payload).decode()}
    if attributes:
        message["attributes"] = attributes
    if ordering_key:
        message["orderingKey"] = ordering_key
    return message


def _requests(messages: list[dict[str, Any]]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """``(first index, messages)`` of each publish request: at most Pub/Sub's 1,000
    messages and ``PUBLISH_CHUNK_BYTES`` of JSON each; a message too big alone goes
    alone (the server says why it refuses it)."""
    start, size = 0, 0
    for i, message in enumerate(messages):
        grown = size + len(json.dumps(message)) + 1
        count = i - start
        if count and (count >= constants.MAX_MESSAGES_PER_PUBLISH or grown > PUBLISH_CHUNK_BYTES):
            yield start, messages[start:i]
            start, grown = i, len(json.dumps(message)) + 1
        size = grown
    if start < len(messages):
        yield start, messages[start:]


@click.command()
@click.argument("topic")
@click.option("--data", default=None, help="message data (text)")
@click.option("--attr", "attrs", multiple=True, help="key=value, repeatable")
@click.option("--ordering-key", default="", help="Ordering key of every message.")
@click.option(
    "--file", "path", type=click.File("rb"), default=None, help="one message per line ('-': stdin)"
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "ids"]),
    default=None,
    help="text: say what was published; ids: only the message ids, one a line"
    " [default: text on a terminal, else ids].",
)
@click.pass_context
def publish(
    ctx: click.Context,
    topic: str,
    data: str | None,
    attrs: tuple[str, ...],
    ordering_key: str,
    path: Any,
    fmt: str | None,
) -> None:
    """Publish one message (--data/--attr) or one per line of a file. Prints the
    message ids, one a line (with --format text, one message is said in words: its
    id and topic). A file is sent in requests within Pub/Sub's limits (1,000
    messages, 10 MB); if one fails, what was published is printed, what was not is
    named (by line), and the command exits with status 1."""
    fmt = fmt or ("text" if sys.stdout.isatty() else "ids")
    attributes = pairs(attrs)
    payloads = [line.rstrip(b"\n") for line in path] if path else [(data or "").encode()]
    messages = [_message(p, attributes, ordering_key) for p in payloads]
    topic_path = f"projects/{project_id(ctx)}/topics/{topic}"
    url = f"/v1/{topic_path}:publish"
    published = 0
    for first, chunk in _requests(messages):
        try:
            doc = backend(ctx).call("POST", url, {"messages": chunk})
        except CliError as exc:
            if not path:
                raise
            unsent = (
                f"lines {first + 1}-{len(messages)}"
                if first + 1 < len(messages)
                else (f"line {first + 1}")
            )
            raise CliError(
                f"published {published} of {len(messages)} messages (lines 1-{first}, ids "
                f"above); not published: {unsent}; the request for lines {first + 1}-"
                f"{first + len(chunk)} failed: {exc.message}",
                exc.hint,
            ) from exc
        if fmt == "text" and not path:
            [message_id] = doc["messageIds"]
            click.echo(f"published message {message_id} to {topic_path}")
        else:
            for message_id in doc["messageIds"]:
                click.echo(message_id)
        published += len(chunk)
    if path:
        click.echo(f"published {published} messages", err=True)


@click.command()
@click.argument("subscription")
@click.option("--max", "max_messages", default=10, show_default=True, help="At most this many.")
@click.option("--ack", is_flag=True, help="acknowledge what was received")
@click.option("--nack", is_flag=True, help="nack what was received: redeliverable now")
@click.option("--wait/--no-wait", default=False, help="long-poll for messages")
@click.pass_context
def pull(
    ctx: click.Context, subscription: str, max_messages: int, ack: bool, nack: bool, wait: bool
) -> None:
    """Pull messages and print them as JSON lines (data decoded as UTF-8 where possible)."""
    if ack and nack:
        raise click.UsageError("give at most one of --ack and --nack")
    base = resource_path(ctx, "subscriptions", subscription)
    doc = backend(ctx).call(
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
        }
        if "deliveryAttempt" in item:
            out["deliveryAttempt"] = item["deliveryAttempt"]
        if "event" in item:
            out["event"] = item["event"]
        click.echo(json.dumps(out))
    if not received:
        none_found(f"no messages in projects/{project_id(ctx)}/subscriptions/{subscription}")
    elif ack or nack:
        ack_ids = [r["ackId"] for r in received]
        _settle(ctx, subscription, ack_ids, nack=nack)


def _settle(ctx: click.Context, subscription: str, ack_ids: list[str], *, nack: bool) -> None:
    base = resource_path(ctx, "subscriptions", subscription)
    verb = "nack" if nack else "acknowledge"
    backend(ctx).call("POST", f"{base}:{verb}", {"ackIds": ack_ids})
    click.echo(f"{'nacked' if nack else 'acknowledged'} {len(ack_ids)}", err=True)


def _settle_command(name: str, *, nack: bool, summary: str) -> click.Command:
    """``ack`` or ``nack``: settle messages of a subscription by their ack ids."""

    @click.command(name, help=summary)
    @click.argument("subscription")
    @click.argument("ack_ids", nargs=-1, required=True)
    @click.pass_context
    def settle(ctx: click.Context, subscription: str, ack_ids: tuple[str, ...]) -> None:
        _settle(ctx, subscription, list(ack_ids), nack=nack)

    return settle


ack = _settle_command(
    "ack",
    nack=False,
    summary="Acknowledge messages of SUBSCRIPTION by their ack ids (from pull).",
)
nack = _settle_command(
    "nack",
    nack=True,
    summary="Nack messages of SUBSCRIPTION by their ack ids: they are redelivered now.",
)


COMMANDS = (publish, pull, ack, nack)
