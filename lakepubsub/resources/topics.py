"""Topics: the resource and its validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lakepubsub import constants, errors
from lakepubsub.resources.labels import validate_labels
from lakepubsub.resources.names import SchemaName, TopicName

# Fields a topic update may change (Pub/Sub's updateMask paths, snake_case);
# ``schema_settings.<field>`` changes one field of the schema settings.
MUTABLE_FIELDS = frozenset({"labels", "message_retention_s", "schema_settings"})
SCHEMA_SETTINGS_FIELDS = frozenset({"schema", "encoding", "first_revision_id", "last_revision_id"})
# What a topic's schema setting reads once its schema was deleted (as Pub/Sub).
DELETED_SCHEMA = "_deleted-schema_"
SCHEMA_ENCODINGS = ("JSON", "BINARY")


@dataclass(frozen=True)
class SchemaSettings:
    """Messages published to the topic must be ``encoding`` (JSON or BINARY) messages of
    ``schema`` (a path), valid for one of its revisions from ``first_revision_id`` to
    ``last_revision_id`` (either end open when empty)."""

    schema: str
    encoding: str = "JSON"
    first_revision_id: str = ""
    last_revision_id: str = ""

    def validated(self) -> SchemaSettings:
        if self.schema != DELETED_SCHEMA:
            SchemaName.parse(self.schema)
        if self.encoding not in SCHEMA_ENCODINGS:
            raise errors.InvalidArgument(
                f"schemaSettings.encoding must be JSON or BINARY, not {self.encoding!r}"
            )
        return self

    @property
    def deleted(self) -> bool:
        return self.schema == DELETED_SCHEMA

    def spec(self) -> dict[str, str]:
        return {
            "schema": self.schema,
            "encoding": self.encoding,
            "first_revision_id": self.first_revision_id,
            "last_revision_id": self.last_revision_id,
        }

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> SchemaSettings | None:
        return cls(**spec) if spec else None


@dataclass(frozen=True)
class Topic:
    """A topic. ``message_retention_s`` keeps messages that long even once every
    subscription has acknowledged them; unset (None), the lake keeps them for
    ``constants.DEFAULT_TOPIC_HISTORY_S`` (7 days). ``FOREVER_RETENTION_S`` (100
    years) is the longest allowed, and means forever."""

    name: TopicName
    labels: Mapping[str, str] = field(default_factory=dict)
    message_retention_s: int | None = None
    schema_settings: SchemaSettings | None = None
    uid: str = ""
    created_us: int = 0

    def validated(self) -> Topic:
        validate_labels(self.labels)
        if self.schema_settings is not None:
            self.schema_settings.validated()
        if self.message_retention_s is not None and not (
            constants.MIN_RETENTION_S <= self.message_retention_s <= constants.FOREVER_RETENTION_S
        ):
            raise errors.InvalidArgument(
                "messageRetentionDuration must be between 10 minutes and"
                f" {constants.FOREVER_RETENTION_S}s (100 years: forever)"
            )
        return self

    @property
    def history_s(self) -> int:
        """How long the lake keeps a message after it was published, whoever acknowledged it."""
        if self.message_retention_s is None:
            return constants.DEFAULT_TOPIC_HISTORY_S
        return self.message_retention_s

    @property
    def keeps_forever(self) -> bool:
        return self.history_s >= constants.FOREVER_RETENTION_S

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "labels": dict(self.labels),
            "message_retention_s": self.message_retention_s,
        }
        if self.schema_settings is not None:
            spec["schema_settings"] = self.schema_settings.spec()
        return spec

    @classmethod
    def from_spec(
        cls, name: TopicName, uid: str, created_us: int, spec: Mapping[str, Any]
    ) -> Topic:
        return cls(
            name=name,
            labels=dict(spec.get("labels") or {}),
            message_retention_s=spec.get("message_retention_s"),
            schema_settings=SchemaSettings.from_spec(spec.get("schema_settings")),
            uid=uid,
            created_us=created_us,
        )

    def updated(self, changes: Mapping[str, Any], mask: list[str]) -> Topic:
        """Apply the masked fields of ``changes``; unknown or immutable fields are errors."""
        if not mask:
            raise errors.InvalidArgument("updateMask must name at least one field")
        unknown = [f for f in mask if f.split(".")[0] not in MUTABLE_FIELDS]
        if unknown:
            raise errors.InvalidArgument(f"cannot update topic field(s): {', '.join(unknown)}")
        whole = {f: changes.get(f, _DEFAULTS[f]) for f in mask if "." not in f}
        updated = replace(self, **whole)
        parts = [f.partition(".")[2] for f in mask if f.startswith("schema_settings.")]
        if parts:
            updated = replace(updated, schema_settings=self._schema_parts(changes, parts))
        return updated.validated()

    def _schema_parts(self, changes: Mapping[str, Any], parts: list[str]) -> SchemaSettings:
        """The schema settings with only the fields ``parts`` taken from ``changes``."""
        unknown = [p for p in parts if p not in SCHEMA_SETTINGS_FIELDS]
        if unknown:
            raise errors.InvalidArgument(f"unknown schemaSettings field(s): {', '.join(unknown)}")
        new = changes.get("schema_settings") or SchemaSettings("")
        current = self.schema_settings
        if current is None:
            if "schema" not in parts:
                raise errors.InvalidArgument(f"Topic {self.name} has no schema settings to update")
            current = SchemaSettings("")
        return replace(current, **{p: getattr(new, p) for p in parts})


_DEFAULTS: dict[str, Any] = {"labels": {}, "message_retention_s": None, "schema_settings": None}
