"""Topics, subscriptions and snapshots: Pub/Sub JSON bodies to the engine's
resources and back."""

from __future__ import annotations

from typing import Any

from api import models as m
from api.convert.fields import (
    ENCODINGS,
    enum_name,
    format_duration,
    parse_duration_s,
    refuse_unbuilt,
    snake,
    update_mask,
)
from lakepubsub import errors
from lakepubsub.messages import format_time_us
from lakepubsub.resources.names import SubscriptionName, TopicName
from lakepubsub.resources.snapshots import Snapshot
from lakepubsub.resources.subscriptions import (
    DEFAULT_DEAD_LETTER_ATTEMPTS,
    DEFAULT_MAX_BACKOFF_S,
    DEFAULT_MIN_BACKOFF_S,
    DeadLetterPolicy,
    OidcToken,
    PushConfig,
    RetryPolicy,
    Subscription,
    TruncationPolicy,
)
from lakepubsub.resources.topics import SchemaSettings, Topic

# -- topics -------------------------------------------------------------------------------


def topic_from_body(name: TopicName, body: m.TopicBody) -> Topic:
    refuse_unbuilt(body, "topic")
    if body.name and body.name != name.path:
        raise errors.InvalidArgument(f"topic.name {body.name!r} does not match the URL")
    retention = (
        int(parse_duration_s(body.message_retention_duration, "messageRetentionDuration"))
        if body.message_retention_duration
        else None
    )
    return Topic(
        name,
        labels=body.labels,
        message_retention_s=retention,
        schema_settings=schema_settings(body.schema_settings),
    )


# protobuf enums in JSON: the value's name, or its number (Google's REST clients


def schema_settings(body: m.SchemaSettingsBody | None) -> SchemaSettings | None:
    """A topic's schema settings; None when absent or all empty (no schema)."""
    if body is None:
        return None
    encoding = enum_name(body.encoding, ENCODINGS, "schemaSettings.encoding")
    if not (body.schema_ or body.first_revision_id or body.last_revision_id) and (
        encoding == ENCODINGS[0]
    ):
        return None
    return SchemaSettings(
        body.schema_,
        # Pub/Sub validates an unspecified encoding as JSON.
        "JSON" if encoding == ENCODINGS[0] else encoding,
        body.first_revision_id,
        body.last_revision_id,
    )


def topic_changes(body: m.TopicBody) -> dict[str, Any]:
    refuse_unbuilt(body, "topic")
    changes: dict[str, Any] = {
        "labels": body.labels,
        "schema_settings": schema_settings(body.schema_settings),
    }
    if body.message_retention_duration:
        changes["message_retention_s"] = int(
            parse_duration_s(body.message_retention_duration, "messageRetentionDuration")
        )
    return changes


_TOPIC_MASK = {
    "labels": "labels",
    "message_retention_duration": "message_retention_s",
    "schema_settings": "schema_settings",
}


def topic_mask(mask: str) -> list[str]:
    """Core field names; ``schema_settings.<field>`` paths keep their field."""
    roots = update_mask(mask, _TOPIC_MASK, "topic")
    paths = [snake(p.strip()) for p in mask.split(",") if p.strip()]
    return [
        path if root == "schema_settings" and "." in path else root
        for root, path in zip(roots, paths, strict=True)
    ]


def topic_body(topic: Topic) -> dict[str, Any]:
    body: dict[str, Any] = {"name": topic.name.path}
    if topic.labels:
        body["labels"] = dict(topic.labels)
    if topic.message_retention_s is not None:
        body["messageRetentionDuration"] = format_duration(topic.message_retention_s)
    if topic.schema_settings is not None:
        settings = topic.schema_settings
        out = {"schema": settings.schema, "encoding": settings.encoding}
        if settings.first_revision_id:
            out["firstRevisionId"] = settings.first_revision_id
        if settings.last_revision_id:
            out["lastRevisionId"] = settings.last_revision_id
        body["schemaSettings"] = out
    return body


# -- subscriptions --------------------------------------------------------------------


_SUBSCRIPTION_MASK = {
    "ack_deadline_seconds": "ack_deadline_s",
    "labels": "labels",
    "retain_acked_messages": "retain_acked_messages",
    "message_retention_duration": "message_retention_s",
    "truncation_policy": "truncation_policy",
    "enable_exactly_once_delivery": "enable_exactly_once_delivery",
    "expiration_policy": "expiration_ttl_s",
    "dead_letter_policy": "dead_letter_policy",
    "retry_policy": "retry_policy",
    "push_config": "push_config",
    "filter": "filter",
    "topic": "topic",
    "enable_message_ordering": "enable_message_ordering",
}


def subscription_mask(mask: str) -> list[str]:
    return update_mask(mask, _SUBSCRIPTION_MASK, "subscription")


def push_config(body: m.PushConfigBody | None) -> PushConfig:
    if body is None:
        return PushConfig()
    if body.pubsub_wrapper is not None and body.no_wrapper is not None:
        raise errors.InvalidArgument("pushConfig: set at most one of pubsubWrapper and noWrapper")
    oidc = (
        OidcToken(body.oidc_token.service_account_email, body.oidc_token.audience)
        if body.oidc_token
        else None
    )
    return PushConfig(
        push_endpoint=body.push_endpoint,
        attributes=body.attributes,
        oidc_token=oidc,
        no_wrapper=body.no_wrapper is not None,
        write_metadata=bool(body.no_wrapper and body.no_wrapper.write_metadata),
    )


def subscription_fields(body: m.SubscriptionBody) -> dict[str, Any]:
    """The core fields a body sets (absent fields are left out)."""
    refuse_unbuilt(body, "subscription")
    fields: dict[str, Any] = {}
    if body.ack_deadline_seconds:
        fields["ack_deadline_s"] = body.ack_deadline_seconds
    if body.labels is not None:
        fields["labels"] = body.labels
    if body.retain_acked_messages is not None:
        fields["retain_acked_messages"] = body.retain_acked_messages
    if body.message_retention_duration:
        fields["message_retention_s"] = int(
            parse_duration_s(body.message_retention_duration, "messageRetentionDuration")
        )
    if body.truncation_policy is not None:
        fields["truncation_policy"] = TruncationPolicy(
            body.truncation_policy.max_bytes, body.truncation_policy.max_age_seconds
        )
    if body.filter is not None:
        fields["filter"] = body.filter
    if body.enable_message_ordering is not None:
        fields["enable_message_ordering"] = body.enable_message_ordering
    if body.enable_exactly_once_delivery is not None:
        fields["enable_exactly_once_delivery"] = body.enable_exactly_once_delivery
    if body.expiration_policy is not None:
        ttl = body.expiration_policy.ttl
        fields["expiration_ttl_s"] = (
            int(parse_duration_s(ttl, "expirationPolicy.ttl")) if ttl else None
        )
    if body.dead_letter_policy is not None and body.dead_letter_policy.dead_letter_topic:
        fields["dead_letter_policy"] = DeadLetterPolicy(
            TopicName.parse(body.dead_letter_policy.dead_letter_topic),
            body.dead_letter_policy.max_delivery_attempts or DEFAULT_DEAD_LETTER_ATTEMPTS,
        )
    if body.retry_policy is not None:
        rp = body.retry_policy
        fields["retry_policy"] = RetryPolicy(
            parse_duration_s(rp.minimum_backoff, "retryPolicy.minimumBackoff")
            if rp.minimum_backoff
            else DEFAULT_MIN_BACKOFF_S,
            parse_duration_s(rp.maximum_backoff, "retryPolicy.maximumBackoff")
            if rp.maximum_backoff
            else DEFAULT_MAX_BACKOFF_S,
        )
    if body.push_config is not None:
        fields["push_config"] = push_config(body.push_config)
    return fields


def subscription_from_body(name: SubscriptionName, body: m.SubscriptionBody) -> Subscription:
    if body.name and body.name != name.path:
        raise errors.InvalidArgument(f"subscription.name {body.name!r} does not match the URL")
    if not body.topic:
        raise errors.InvalidArgument("subscription.topic is required")
    fields = subscription_fields(body)
    if fields.get("enable_exactly_once_delivery") and "ack_deadline_s" not in fields:
        fields["ack_deadline_s"] = 60  # Pub/Sub's default for exactly-once subscriptions
    return Subscription(name=name, topic=TopicName.parse(body.topic), **fields)


def subscription_body(sub: Subscription) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": sub.name.path,
        "topic": sub.topic.path,
        "pushConfig": _push_body(sub.push_config),
        "ackDeadlineSeconds": sub.ack_deadline_s,
        "retainAckedMessages": sub.retain_acked_messages,
        "messageRetentionDuration": format_duration(sub.message_retention_s),
        "enableMessageOrdering": sub.enable_message_ordering,
        "enableExactlyOnceDelivery": sub.enable_exactly_once_delivery,
        "expirationPolicy": (
            {"ttl": format_duration(sub.expiration_ttl_s)} if sub.expiration_ttl_s else {}
        ),
        "detached": sub.detached,
        "state": "ACTIVE",
    }
    if sub.labels:
        body["labels"] = dict(sub.labels)
    if sub.filter:
        body["filter"] = sub.filter
    if sub.truncation_policy is not None:
        tp: dict[str, Any] = {}
        if sub.truncation_policy.max_bytes is not None:
            tp["maxBytes"] = sub.truncation_policy.max_bytes
        if sub.truncation_policy.max_age_s is not None:
            tp["maxAgeSeconds"] = sub.truncation_policy.max_age_s
        body["truncationPolicy"] = tp
    if sub.dead_letter_policy is not None:
        body["deadLetterPolicy"] = {
            "deadLetterTopic": sub.dead_letter_policy.dead_letter_topic.path,
            "maxDeliveryAttempts": sub.dead_letter_policy.max_delivery_attempts,
        }
    if sub.retry_policy is not None:
        body["retryPolicy"] = {
            "minimumBackoff": format_duration(sub.retry_policy.minimum_backoff_s),
            "maximumBackoff": format_duration(sub.retry_policy.maximum_backoff_s),
        }
    return body


def _push_body(push: PushConfig) -> dict[str, Any]:
    if not push.is_push:
        return {}
    body: dict[str, Any] = {"pushEndpoint": push.push_endpoint}
    if push.attributes:
        body["attributes"] = dict(push.attributes)
    if push.oidc_token is not None:
        body["oidcToken"] = {
            "serviceAccountEmail": push.oidc_token.service_account_email,
            "audience": push.oidc_token.audience,
        }
    if push.no_wrapper:
        body["noWrapper"] = {"writeMetadata": push.write_metadata}
    return body


# -- snapshots ---------------------------------------------------------------------------


def snapshot_body(snapshot: Snapshot) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": snapshot.name.path,
        "topic": snapshot.topic.path,
        "expireTime": format_time_us(snapshot.expire_time_us),
    }
    if snapshot.labels:
        body["labels"] = dict(snapshot.labels)
    return body


def topic_update(body: m.UpdateTopicRequest) -> tuple[dict[str, Any], list[str]]:
    """What an update of a topic changes: the fields its body sets, and its mask."""
    return topic_changes(body.topic), topic_mask(body.update_mask)


def subscription_update(body: m.UpdateSubscriptionRequest) -> tuple[dict[str, Any], list[str]]:
    """What an update of a subscription changes: the fields its body sets, and its mask."""
    return subscription_fields(body.subscription), subscription_mask(body.update_mask)


def snapshot_labels(body: m.UpdateSnapshotRequest) -> dict[str, str]:
    """The labels an update sets; a snapshot's labels are all an update may change."""
    paths = [p.strip() for p in body.update_mask.split(",") if p.strip()]
    if paths != ["labels"]:
        raise errors.InvalidArgument("only 'labels' of a snapshot can be updated")
    return body.snapshot.labels
