"""Translation between Pub/Sub JSON and the core engine's types."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from datetime import UTC, datetime
from typing import Any

# pybase64: SIMD base64 (1 KiB: 0.5 against binascii's 2.8 us to decode, 0.2 against
# 1.2 to encode); the same alphabet, padding and validation rules.
from pybase64 import b64decode, b64encode_as_string

from api import models as m
from api.errors import invalid_request
from lakepubsub import errors
from lakepubsub.messages import ReceivedMessage, TruncationEvent
from lakepubsub.publish import batches
from lakepubsub.publish.batches import Batch
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

_DURATION = re.compile(r"(-?\d+(?:\.\d{1,9})?)s")
EVENT_ATTRIBUTE = "lakepubsub.event"


def parse_duration_s(text: str, field: str) -> float:
    """A protobuf Duration in JSON: ``"3.5s"``."""
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise errors.InvalidArgument(f"{field}: invalid duration {text!r}; expected e.g. '600s'")
    return float(match.group(1))


def format_duration(seconds: float) -> str:
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{seconds:.9f}".rstrip("0") + "s"


@functools.lru_cache(maxsize=4096)
def format_time_us(us: int) -> str:
    # Cached: every message of one publish commit has the same publish time.
    stamp = datetime.fromtimestamp(us // 1_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{us % 1_000_000:06d}Z"


def parse_time_us(text: str, field: str) -> int:
    """An RFC 3339 timestamp ("2026-01-02T03:04:05.123Z") in microseconds."""
    try:
        stamp = datetime.fromisoformat(text)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument(f"{field}: invalid RFC 3339 time {text!r}") from exc
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1_000_000)


def snapshot_body(snapshot: Snapshot) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": snapshot.name.path,
        "topic": snapshot.topic.path,
        "expireTime": format_time_us(snapshot.expire_time_us),
    }
    if snapshot.labels:
        body["labels"] = dict(snapshot.labels)
    return body


def decode_data(text: str | None, where: str) -> bytes:
    """Standard or URL-safe base64, padding optional, as protobuf JSON accepts."""
    if not text:
        return b""
    if not isinstance(text, str):
        raise errors.InvalidArgument(f"{where}.data must be a base64 string")
    try:  # the common case: standard alphabet, padded
        return b64decode(text, validate=True)
    except (binascii.Error, ValueError):  # ValueError: non-ASCII text
        pass
    cleaned = text.replace("-", "+").replace("_", "/")
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise errors.InvalidArgument(f"{where}.data: invalid base64") from exc


# -- Pub/Sub fields whose features are not built ------------------------------------------

# Field (protobuf name) -> the feature it asks for. A request that sets one is refused,
# on create and on update alike, rather than answered as if the feature were there.
UNBUILT_FIELDS = {
    "message_storage_policy": "message storage policies",
    "kms_key_name": "customer-managed encryption keys",
    "ingestion_data_source_settings": "import topics (ingestion data sources)",
    "message_transforms": "message transforms",
    "tags": "resource tags",
    "bigquery_config": "BigQuery subscriptions",
    "cloud_storage_config": "Cloud Storage subscriptions",
    "bigtable_config": "Bigtable subscriptions",
}


def _unbuilt(field: str, kind: str) -> errors.InvalidArgument:
    json_name = re.sub(r"_(\w)", lambda m: m.group(1).upper(), field)
    return errors.InvalidArgument(
        f"{kind}.{json_name}: {UNBUILT_FIELDS[field]} are not built in lakepubsub; "
        "leave the field out"
    )


def refuse_unbuilt(body: m.Model, kind: str) -> None:
    """INVALID_ARGUMENT if ``body`` sets a field of a feature that is not built. Empty
    values ask for nothing and pass, except a delivery config: any config, even an
    empty one, would make a BigQuery (…) subscription."""
    for field in UNBUILT_FIELDS.keys() & body.model_fields_set:
        value = getattr(body, field)
        if value is None or (value in ("", [], {}) and not field.endswith("_config")):
            continue
        raise _unbuilt(field, kind)


def topic_name(project: str, topic: str) -> TopicName:
    return TopicName(project, topic)


def subscription_name(project: str, subscription: str) -> SubscriptionName:
    return SubscriptionName(project, subscription)


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
# send ``enum-encoding=int``).
ENCODINGS = ("ENCODING_UNSPECIFIED", "JSON", "BINARY")


def enum_name(value: str | int | None, names: tuple[str, ...], field: str) -> str:
    """The name of a protobuf enum value given by name or number; index 0 when absent."""
    if value is None or value == "":
        return names[0]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value in names:
        return value
    raise errors.InvalidArgument(f"{field}: invalid value {value!r}; expected one of {names}")


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
    roots = _mask(mask, _TOPIC_MASK, "topic")
    paths = [_snake(p.strip()) for p in mask.split(",") if p.strip()]
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


def _snake(path: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", path).lower()


def _mask(mask: str, known: dict[str, str], kind: str) -> list[str]:
    paths = [_snake(p.strip()) for p in mask.split(",") if p.strip()]
    if not paths:
        raise errors.InvalidArgument("updateMask must name at least one field")
    out = []
    for path in paths:
        root = path.split(".")[0]
        if root in UNBUILT_FIELDS:
            raise _unbuilt(root, kind)
        if root not in known:
            raise errors.InvalidArgument(f"updateMask: unknown {kind} field {path!r}")
        out.append(known[root])
    return out


def subscription_mask(mask: str) -> list[str]:
    return _mask(mask, _SUBSCRIPTION_MASK, "subscription")


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


# -- messages -----------------------------------------------------------------------------


# The fields of a publish request and of its messages (JSON and protobuf names;
# messageId and publishTime are output only and ignored, as Pub/Sub does).
_PUBLISH_FIELDS = frozenset({"messages", "topic"})
_MESSAGE_FIELDS = frozenset({"data", "attributes", "orderingKey"})
_MESSAGE_FIELDS_ALL = _MESSAGE_FIELDS | {
    "ordering_key",
    "messageId",
    "message_id",
    "publishTime",
    "publish_time",
}


def _refuse_unknown(doc: dict[str, Any], known: frozenset[str], loc: tuple[Any, ...]) -> None:
    unknown = [key for key in doc if key not in known]
    if unknown:
        raise invalid_request([{"type": "extra_forbidden", "loc": (*loc, key)} for key in unknown])


def publish_batch(raw: Any) -> Batch:
    """A decoded publish body as a checked batch (the hot path: no per-message objects)."""
    items = raw.get("messages") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise errors.InvalidArgument("The request must contain a 'messages' list")
    if len(raw) > 1:
        _refuse_unknown(raw, _PUBLISH_FIELDS, ())
    data: list[bytes] = []
    attributes: list[list[tuple[str, str]] | None] = []
    keys: list[str | None] = []
    i = 0
    try:
        for i, item in enumerate(items):
            payload = item.get("data")
            if not payload:
                data.append(b"")
            else:
                try:  # the common case inline: standard alphabet, padded
                    data.append(b64decode(payload, validate=True))
                except (binascii.Error, ValueError, TypeError):
                    data.append(decode_data(payload, f"messages[{i}]"))
            attrs = item.get("attributes")
            attributes.append(list(attrs.items()) if attrs else None)
            if _MESSAGE_FIELDS.issuperset(item):
                keys.append(item.get("orderingKey") or None)
            else:  # protobuf names, output-only fields, or a field Pub/Sub does not have
                _refuse_unknown(item, _MESSAGE_FIELDS_ALL, ("messages", i))
                keys.append(item.get("orderingKey") or item.get("ordering_key") or None)
    except (AttributeError, TypeError) as exc:
        raise errors.InvalidArgument(
            f"messages[{i}]: expected an object with base64 'data', string 'attributes' "
            "and 'orderingKey'"
        ) from exc
    return batches.checked(data, attributes, keys)


def received_body(r: ReceivedMessage, *, attempts: bool) -> dict[str, Any]:
    """One delivery as JSON; ``attempts`` (``Subscription.reports_delivery_attempts``)
    fills ``deliveryAttempt``."""
    if r.event is not None:
        return _event_item(r.ack_id, r.delivery_attempt if attempts else 0, r.event)
    assert r.message is not None
    msg = r.message
    message: dict[str, Any] = {
        "data": b64encode_as_string(msg.data),
        "messageId": msg.message_id,
        "publishTime": format_time_us(msg.publish_time_us),
    }
    if msg.attributes:
        message["attributes"] = dict(msg.attributes)
    if msg.ordering_key:
        message["orderingKey"] = msg.ordering_key
    item: dict[str, Any] = {"ackId": r.ack_id, "message": message}
    if attempts:
        item["deliveryAttempt"] = r.delivery_attempt
    return item


def event_body(event: TruncationEvent) -> dict[str, Any]:
    """A truncation event as JSON; ``truncated`` is false when a ``:truncate`` found
    nothing to drop (and queued no event)."""
    return {
        "truncated": event.end_offset > event.first_offset,
        "firstOffset": event.first_offset,
        "endOffset": event.end_offset,
        "reason": event.reason,
        "time": format_time_us(event.time_us),
    }


def event_attributes(event: TruncationEvent) -> dict[str, str]:
    """How a truncation event looks to a client that knows only Pub/Sub: a message
    without data whose attributes say what happened (both doors deliver it so)."""
    return {
        EVENT_ATTRIBUTE: "truncated",
        "lakepubsub.first_offset": str(event.first_offset),
        "lakepubsub.end_offset": str(event.end_offset),
        "lakepubsub.reason": event.reason,
    }


def event_message_id(ack_id: str) -> str:
    return f"event-{ack_id}"


def _event_item(ack_id: str, attempt: int, event: TruncationEvent) -> dict[str, Any]:
    # Unmodified Google clients ignore "event"; they see the message.
    return {
        "ackId": ack_id,
        "message": {
            "messageId": event_message_id(ack_id),
            "publishTime": format_time_us(event.time_us),
            "attributes": event_attributes(event),
        },
        **({"deliveryAttempt": attempt} if attempt else {}),
        "event": event_body(event),
    }


def ack_failures_error(failures: dict[str, str]) -> errors.InvalidArgument | None:
    """Exactly-once failures, reported as Pub/Sub does: INVALID_ARGUMENT with an
    ErrorInfo whose metadata maps each failed ack id to its reason."""
    if not failures:
        return None
    return errors.InvalidArgument(
        f"{len(failures)} ack id(s) could not be processed",
        details=[
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "EXACTLY_ONCE_ACKID_FAILURE",
                "domain": "pubsub.googleapis.com",
                "metadata": failures,
            }
        ],
    )
