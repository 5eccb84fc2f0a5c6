"""Resource names: ``projects/{project}/topics|subscriptions|snapshots|schemas/{id}``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Self

from lakepubsub import constants, errors

_ID = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~+%]*")
# Project ids are not validated by the Pub/Sub emulator beyond being a path segment;
# we accept the characters real project ids and numbers use.
_PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-_.:]{0,99}")


def validate_project(project: str) -> str:
    if not _PROJECT.fullmatch(project):
        raise errors.InvalidArgument(f"Invalid project id: {project!r}")
    return project


def validate_id(kind: str, resource_id: str) -> str:
    """Check a topic/subscription/snapshot id against Pub/Sub's naming rules."""
    if not constants.MIN_NAME_LENGTH <= len(resource_id) <= constants.MAX_NAME_LENGTH:
        raise errors.InvalidArgument(
            f"Invalid {kind} name {resource_id!r}: must be "
            f"{constants.MIN_NAME_LENGTH}-{constants.MAX_NAME_LENGTH} characters long"
        )
    if not _ID.fullmatch(resource_id):
        raise errors.InvalidArgument(
            f"Invalid {kind} name {resource_id!r}: must start with a letter and contain only "
            "letters, numbers, dashes (-), underscores (_), periods (.), tildes (~), "
            "plus signs (+) or percent signs (%)"
        )
    if resource_id.lower().startswith("goog"):
        raise errors.InvalidArgument(
            f"Invalid {kind} name {resource_id!r}: must not start with 'goog'"
        )
    return resource_id


@dataclass(frozen=True, order=True)
class ResourceName:
    """A validated ``projects/{project}/{collection}/{id}`` name; each subclass gives its
    collection and what one of it is called (``kind``) in its class line."""

    collection: ClassVar[str] = ""
    kind: ClassVar[str] = ""

    project: str
    id: str

    def __init_subclass__(cls, *, collection: str, kind: str) -> None:
        super().__init_subclass__()
        cls.collection = collection
        cls.kind = kind

    def __post_init__(self) -> None:
        validate_project(self.project)
        validate_id(self.kind, self.id)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/{self.collection}/{self.id}"

    def __str__(self) -> str:
        return self.path

    @classmethod
    def parse(cls, path: str) -> Self:
        match path.split("/"):
            case ["projects", project, collection, name] if collection == cls.collection:
                return cls(project, name)
        raise errors.InvalidArgument(
            f"Invalid {cls.kind} name {path!r}: expected "
            f"projects/{{project}}/{cls.collection}/{{{cls.kind}}}"
        )


class TopicName(ResourceName, collection="topics", kind="topic"): ...


class SubscriptionName(ResourceName, collection="subscriptions", kind="subscription"): ...


class SnapshotName(ResourceName, collection="snapshots", kind="snapshot"): ...


class SchemaName(ResourceName, collection="schemas", kind="schema"): ...
