"""``lakepubsub intake drain``: turn a lake's intake off (lakepubsub/publish/intake_drain.py)."""

from __future__ import annotations

import os

import click

from lakepubsub import Engine, Settings
from lakepubsub.cli.backend import lake_root
from lakepubsub.publish.intake_drain import drain


@click.group()
def intake() -> None:
    """The lake's intake, where publishes of every topic commit together on S3."""


@intake.command("drain")
@click.pass_context
def intake_drain(ctx: click.Context) -> None:
    """Move every topic's messages out of the intake into its own table, then remove
    the intake, so servers may run with LAKEPUBSUB_INTAKE=0. Stop every server on
    the lake first (the drain refuses while one runs)."""
    # Not check_lake: its engine, on S3's defaults, would make an intake.
    lake = lake_root(ctx.ensure_object(dict)["lake"])
    os.environ["LAKEPUBSUB_LAKE"] = lake
    engine = Engine(Settings.from_env(intake=False))
    try:
        if engine.intake is None:
            click.echo(f"lake {lake} has no intake")
            return
        done = drain(engine.lake, engine.intake)
    finally:
        engine.close()
    click.echo(
        f"the intake's {done.rows} messages of {done.topics} topics are in their topics' "
        f"tables; removed {done.uri}. Run the servers with LAKEPUBSUB_INTAKE=0."
    )


COMMANDS = [intake]
