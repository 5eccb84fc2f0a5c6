"""Subscriptions: the resource, its policies, and their validation."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lakepubsub import constants, errors
from lakepubsub.resources.filters import Filter, parse_filter, parse_label_query
from lakepubsub.resources.labels import validate_labels
from lakepubsub.resources.names import SubscriptionName, TopicName

MAX_FILTER_BYTES = 256
MIN_DEAD_LETTER_ATTEMPTS = 5
MAX_DEAD_LETTER_ATTEMPTS = 100
DEFAULT_DEAD_LETTER_ATTEMPTS = 5
MAX_BACKOFF_S = 600.0
DEFAULT_MIN_BACKOFF_S = 10.0
DEFAULT_MAX_BACKOFF_S = 600.0
MIN_EXPIRATION_TTL_S = 24 * 3600
DEFAULT_EXPIRATION_TTL_S = 31 * 24 * 3600
MAX_SUBSCRIPTION_RETENTION_S = 7 * 24 * 3600


def parse_subscription_filter(text: str) -> Filter:
    """Pub/Sub's filter language, or else the early design's label query (seed 000)."""
    try:
        return parse_filter(text)
    except errors.InvalidArgument as filter_error:
        try:
            return parse_label_query(text)
        except errors.InvalidArgument:
            raise filter_error from None


@dataclass(frozen=True)
class TruncationPolicy:
    """Seed 000's truncation policy: drop the oldest backlog beyond these bounds."""

    max_bytes: int | None = None
    max_age_s: int | None = None

    def validated(self) -> TruncationPolicy:
        if self.max_bytes is None and self.max_age_s is None:
            raise errors.InvalidArgument("truncationPolicy needs maxBytes or maxAgeSeconds")
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise errors.InvalidArgument("truncationPolicy.maxBytes must be positive")
        if self.max_age_s is not None and self.max_age_s <= 0:
            raise errors.InvalidArgument("truncationPolicy.maxAgeSeconds must be positive")
        return self


@dataclass(frozen=True)
class DeadLetterPolicy:
    dead_letter_topic: TopicName
    max_delivery_attempts: int = DEFAULT_DEAD_LETTER_ATTEMPTS

    def validated(self) -> DeadLetterPolicy:
        if not MIN_DEAD_LETTER_ATTEMPTS <= self.max_delivery_attempts <= MAX_DEAD_LETTER_ATTEMPTS:
            raise errors.InvalidArgument(
                f"deadLetterPolicy.maxDeliveryAttempts must be between "
                f"{MIN_DEAD_LETTER_ATTEMPTS} and {MAX_DEAD_LETTER_ATTEMPTS}"
            )
        return self


@dataclass(frozen=True)
class RetryPolicy:
    minimum_backoff_s: float = DEFAULT_MIN_BACKOFF_S
    maximum_backoff_s: float = DEFAULT_MAX_BACKOFF_S

    def validated(self) -> RetryPolicy:
        for name, value in (
            ("minimum", self.minimum_backoff_s),
            ("maximum", self.maximum_backoff_s),
        ):
            if not 0 <= value <= MAX_BACKOFF_S:
                raise errors.InvalidArgument(f"retryPolicy.{name}Backoff must be 0-600s")
        if self.minimum_backoff_s > self.maximum_backoff_s:
            raise errors.InvalidArgument("retryPolicy.minimumBackoff exceeds maximumBackoff")
        return self

    def backoff_s(self, attempt: int) -> float:
        """Delay before the delivery after ``attempt`` failed ones: doubling, within bounds."""
        delay = self.minimum_backoff_s * 2.0 ** max(0, attempt - 1)
        return min(self.maximum_backoff_s, max(self.minimum_backoff_s, delay))


@dataclass(frozen=True)
class OidcToken:
    service_account_email: str = ""
    audience: str = ""


@dataclass(frozen=True)
class PushConfig:
    push_endpoint: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)
    oidc_token: OidcToken | None = None
    no_wrapper: bool = False
    write_metadata: bool = False

    @property
    def is_push(self) -> bool:
        return bool(self.push_endpoint)


@dataclass(frozen=True)
class Subscription:
    """A subscription and every setting Pub/Sub gives one, plus our truncation policy."""

    name: SubscriptionName
    topic: TopicName
    ack_deadline_s: int = constants.DEFAULT_ACK_DEADLINE_S
    labels: Mapping[str, str] = field(default_factory=dict)
    retain_acked_messages: bool = False
    message_retention_s: int = constants.DEFAULT_RETENTION_S
    truncation_policy: TruncationPolicy | None = None
    filter: str = ""
    enable_message_ordering: bool = False
    enable_exactly_once_delivery: bool = False
    expiration_ttl_s: int | None = DEFAULT_EXPIRATION_TTL_S
    dead_letter_policy: DeadLetterPolicy | None = None
    retry_policy: RetryPolicy | None = None
    push_config: PushConfig = field(default_factory=PushConfig)
    detached: bool = False
    uid: str = ""
    topic_uid: str = ""
    created_us: int = 0

    @property
    def reports_delivery_attempts(self) -> bool:
        """Whether deliveries carry their attempt number to subscribers (pull, stream and
        push): as in Pub/Sub, only with a dead-letter policy; otherwise it is left empty."""
        return self.dead_letter_policy is not None

    def validated(self) -> Subscription:
        if not constants.MIN_ACK_DEADLINE_S <= self.ack_deadline_s <= constants.MAX_ACK_DEADLINE_S:
            raise errors.InvalidArgument(
                f"ackDeadlineSeconds must be between {constants.MIN_ACK_DEADLINE_S} and "
                f"{constants.MAX_ACK_DEADLINE_S}"
            )
        validate_labels(self.labels)
        if (
            not constants.MIN_RETENTION_S
            <= self.message_retention_s
            <= MAX_SUBSCRIPTION_RETENTION_S
        ):
            raise errors.InvalidArgument(
                "messageRetentionDuration must be between 10 minutes and 7 days"
            )
        if len(self.filter.encode()) > MAX_FILTER_BYTES:
            raise errors.InvalidArgument(f"filter must be at most {MAX_FILTER_BYTES} bytes")
        parse_subscription_filter(self.filter)
        if self.expiration_ttl_s is not None and self.expiration_ttl_s < MIN_EXPIRATION_TTL_S:
            raise errors.InvalidArgument("expirationPolicy.ttl must be at least 1 day")
        if self.expiration_ttl_s is not None and self.expiration_ttl_s < self.message_retention_s:
            raise errors.InvalidArgument(
                "expirationPolicy.ttl must be at least the messageRetentionDuration"
            )
        for policy in (self.truncation_policy, self.dead_letter_policy, self.retry_policy):
            if policy is not None:
                policy.validated()
        if self.enable_exactly_once_delivery and self.push_config.is_push:
            raise errors.InvalidArgument("exactly-once delivery is only available for pull")
        return self

    def spec(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        for key in ("name", "uid", "topic_uid", "created_us"):
            doc.pop(key)
        doc["topic"] = self.topic.path
        if self.dead_letter_policy is not None:
            doc["dead_letter_policy"]["dead_letter_topic"] = (
                self.dead_letter_policy.dead_letter_topic.path
            )
        return doc

    @classmethod
    def from_spec(
        cls,
        name: SubscriptionName,
        uid: str,
        topic_uid: str,
        created_us: int,
        spec: Mapping[str, Any],
    ) -> Subscription:
        doc = dict(spec)
        doc["topic"] = TopicName.parse(doc["topic"])
        if doc.get("truncation_policy"):
            doc["truncation_policy"] = TruncationPolicy(**doc["truncation_policy"])
        if doc.get("dead_letter_policy"):
            dl = dict(doc["dead_letter_policy"])
            dl["dead_letter_topic"] = TopicName.parse(dl["dead_letter_topic"])
            doc["dead_letter_policy"] = DeadLetterPolicy(**dl)
        if doc.get("retry_policy"):
            doc["retry_policy"] = RetryPolicy(**doc["retry_policy"])
        push = dict(doc.get("push_config") or {})
        if push.get("oidc_token"):
            push["oidc_token"] = OidcToken(**push["oidc_token"])
        doc["push_config"] = PushConfig(**push)
        known = {f.name for f in dataclasses.fields(cls)}
        doc = {k: v for k, v in doc.items() if k in known}
        return cls(name=name, uid=uid, topic_uid=topic_uid, created_us=created_us, **doc)

    def updated(self, changes: Mapping[str, Any], mask: list[str]) -> Subscription:
        """Apply the masked fields of ``changes``; immutable fields are errors."""
        if not mask:
            raise errors.InvalidArgument("updateMask must name at least one field")
        immutable = [f for f in mask if f not in MUTABLE_FIELDS]
        if immutable:
            raise errors.InvalidArgument(
                f"cannot update subscription field(s): {', '.join(immutable)}"
            )
        defaults = Subscription(name=self.name, topic=self.topic)
        values = {f: changes.get(f, getattr(defaults, f)) for f in mask}
        return replace(self, **values).validated()


# Fields an update may change; the rest (topic, filter, exactly-once's pairing
# with push, ordering) are fixed at creation, as in Pub/Sub.
MUTABLE_FIELDS = frozenset(
    {
        "ack_deadline_s",
        "labels",
        "retain_acked_messages",
        "message_retention_s",
        "truncation_policy",
        "enable_exactly_once_delivery",
        "expiration_ttl_s",
        "dead_letter_policy",
        "retry_policy",
        "push_config",
    }
)
