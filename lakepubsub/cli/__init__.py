"""The ``lakepubsub`` command, and the one place that composes the library with its
doors (``api``) and the Spark jobs (``jobs``): nothing else under ``lakepubsub``
imports either (the import-linter contracts in ``pyproject.toml``)."""

from lakepubsub.cli.commands import main

__all__ = ["main"]
