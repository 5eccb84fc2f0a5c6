"""Translation between Pub/Sub JSON and the core engine's types, shared by both
doors: ``fields`` (durations, times, enums, base64, update masks, unbuilt
features), ``resources`` (topics, subscriptions, snapshots) and ``messages``
(publish bodies, deliveries, truncation events, ack failures)."""

from __future__ import annotations

from api.convert.fields import (
    ENCODINGS,
    decode_data,
    enum_name,
    parse_time_us,
    refuse_unbuilt,
)
from api.convert.messages import (
    ack_failures_error,
    event_body,
    event_message_id,
    publish_batch,
    received_body,
)
from api.convert.resources import (
    push_config,
    snapshot_body,
    snapshot_labels,
    subscription_body,
    subscription_from_body,
    subscription_update,
    topic_body,
    topic_from_body,
    topic_update,
)
from lakepubsub.messages import format_time_us

__all__ = [
    "ENCODINGS",
    "ack_failures_error",
    "decode_data",
    "enum_name",
    "event_body",
    "event_message_id",
    "format_time_us",
    "parse_time_us",
    "publish_batch",
    "push_config",
    "received_body",
    "refuse_unbuilt",
    "snapshot_body",
    "snapshot_labels",
    "subscription_body",
    "subscription_from_body",
    "subscription_update",
    "topic_body",
    "topic_from_body",
    "topic_update",
]
