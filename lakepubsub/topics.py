"""Topics: the resource and its validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lakepubsub import constants, errors
from lakepubsub.labels import validate_labels
from lakepubsub.names import TopicName

# Fields a topic update may change (Pub/Sub's updateMask paths, snake_case).
MUTABLE_FIELDS = frozenset({"labels", "message_retention_s"})


@dataclass(frozen=True)
class Topic:
    """A topic. ``message_retention_s`` keeps messages that long even once every
    subscription has acknowledged them; unset (None), the lake keeps them for
    ``constants.DEFAULT_TOPIC_HISTORY_S`` (7 days). ``FOREVER_RETENTION_S`` (100
    years) is the longest allowed, and means forever."""

    name: TopicName
    labels: Mapping[str, str] = field(default_factory=dict)
    message_retention_s: int | None = None
    uid: str = ""
    created_us: int = 0

    def validated(self) -> Topic:
        validate_labels(self.labels)
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
        return {"labels": dict(self.labels), "message_retention_s": self.message_retention_s}

    @classmethod
    def from_spec(
        cls, name: TopicName, uid: str, created_us: int, spec: Mapping[str, Any]
    ) -> Topic:
        return cls(
            name=name,
            labels=dict(spec.get("labels") or {}),
            message_retention_s=spec.get("message_retention_s"),
            uid=uid,
            created_us=created_us,
        )

    def updated(self, changes: Mapping[str, Any], mask: list[str]) -> Topic:
        """Apply the masked fields of ``changes``; unknown or immutable fields are errors."""
        if not mask:
            raise errors.InvalidArgument("updateMask must name at least one field")
        unknown = [f for f in mask if f not in MUTABLE_FIELDS]
        if unknown:
            raise errors.InvalidArgument(f"cannot update topic field(s): {', '.join(unknown)}")
        return replace(self, **{f: changes.get(f, _DEFAULTS[f]) for f in mask}).validated()


_DEFAULTS: dict[str, Any] = {"labels": {}, "message_retention_s": None}
