"""``lakepubsub snapshots`` and ``lakepubsub seek``: capture a subscription's
acknowledgment state, and go back to it or to a time."""

from __future__ import annotations

from typing import Any

import click

from lakepubsub.cli.backend import (
    add_get_and_delete,
    backend,
    echo,
    echo_each,
    paged,
    project_id,
)


@click.group()
def snapshots() -> None:
    """Capture a subscription's acknowledgment state, to seek back to later."""


@snapshots.command("create")
@click.argument("snapshot")
@click.option("--subscription", required=True, help="The subscription to capture.")
@click.pass_context
def snapshots_create(ctx: click.Context, snapshot: str, subscription: str) -> None:
    """Create SNAPSHOT of a subscription and print it as JSON."""
    project = project_id(ctx)
    sub = (
        subscription if "/" in subscription else f"projects/{project}/subscriptions/{subscription}"
    )
    body = {"subscription": sub}
    echo(backend(ctx).call("PUT", f"/v1/projects/{project}/snapshots/{snapshot}", body))


@snapshots.command("list")
@click.pass_context
def snapshots_list(ctx: click.Context) -> None:
    """Print the project's snapshots, one a line."""
    docs = paged(ctx, f"/v1/projects/{project_id(ctx)}/snapshots", "snapshots")
    echo_each(
        (f"{d['name']}  topic={d['topic']}  expires={d.get('expireTime')}" for d in docs),
        none=f"no snapshots in project {project_id(ctx)}",
    )


add_get_and_delete(snapshots, "snapshots", "snapshot", get=None, delete="Delete SNAPSHOT.")


@click.command()
@click.argument("subscription")
@click.option("--time", "time_", default=None, help="RFC 3339 time, e.g. 2026-01-02T03:04:05Z.")
@click.option("--snapshot", default=None, help="Snapshot id, or projects/P/snapshots/S.")
@click.pass_context
def seek(ctx: click.Context, subscription: str, time_: str | None, snapshot: str | None) -> None:
    """Seek SUBSCRIPTION to a time (what was published before it counts as acknowledged,
    what came after does not) or to a snapshot's acknowledgment state."""
    if (time_ is None) == (snapshot is None):
        raise click.UsageError("give exactly one of --time and --snapshot")
    project = project_id(ctx)
    body: dict[str, Any] = {"time": time_}
    if snapshot is not None:
        body = {
            "snapshot": snapshot if "/" in snapshot else f"projects/{project}/snapshots/{snapshot}"
        }
    backend(ctx).call("POST", f"/v1/projects/{project}/subscriptions/{subscription}:seek", body)
    click.echo(f"{subscription}: sought to {time_ or body['snapshot']}")


COMMANDS = [snapshots, seek]
