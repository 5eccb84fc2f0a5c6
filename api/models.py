"""Request and response bodies of Pub/Sub REST v1 (camelCase JSON), plus our extensions."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    """A request or response body: camelCase JSON (protobuf's field names accepted too).
    A field that is not Pub/Sub's is refused with INVALID_ARGUMENT naming it, as Google
    does (api/errors.py words it)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# Pub/Sub fields whose features lakepubsub does not build. They are declared so that a
# request naming one is refused with a message that says so (api/convert/fields.py
# ``refuse_unbuilt``), on create and update alike, instead of as an unknown field.
NOT_BUILT = "Not built in lakepubsub: a request that sets it is refused (INVALID_ARGUMENT)."
# Fields Pub/Sub fills in its answers; a client may send them back, and they are ignored.
OUTPUT_ONLY = "Output only; ignored in requests."


class _Page(Model):
    """One page of a list; ``nextPageToken`` asks for the next."""

    next_page_token: str | None = None


def _not_built() -> Any:
    return Field(default=None, description=NOT_BUILT)


def _output_only() -> Any:
    return Field(default=None, description=OUTPUT_ONLY)


# -- errors -----------------------------------------------------------------------------


class Status(Model):
    code: int = Field(description="HTTP status code")
    message: str
    status: str = Field(description="google.rpc.Code name, e.g. NOT_FOUND")
    details: list[dict[str, Any]] = Field(default_factory=list)


class ErrorResponse(Model):
    error: Status


# -- topics -----------------------------------------------------------------------------


class SchemaSettingsBody(Model):
    schema_: str = Field(default="", alias="schema", description="projects/{p}/schemas/{s}")
    encoding: str | int | None = Field(default=None, description="JSON (default) or BINARY")
    first_revision_id: str = ""
    last_revision_id: str = ""


class _ResourceBody(Model):
    """Fields topics and subscriptions share that lakepubsub does not build or fill."""

    message_transforms: Any = _not_built()
    tags: Any = _not_built()
    state: str | None = _output_only()


class TopicBody(_ResourceBody):
    name: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    message_retention_duration: str | None = Field(
        default=None, description='Duration like "86400s"; messages are kept at least this long'
    )
    schema_settings: SchemaSettingsBody | None = None
    message_storage_policy: Any = _not_built()
    kms_key_name: Any = _not_built()
    ingestion_data_source_settings: Any = _not_built()
    satisfies_pzs: bool | None = _output_only()


class UpdateTopicRequest(Model):
    topic: TopicBody
    update_mask: str = Field(description="Comma-separated field paths, e.g. 'labels'")


class ListTopicsResponse(_Page):
    topics: list[TopicBody] = Field(default_factory=list)


class ListTopicSubscriptionsResponse(_Page):
    subscriptions: list[str] = Field(default_factory=list)


class PubsubMessage(Model):
    data: str | None = Field(default=None, description="base64-encoded payload")
    attributes: dict[str, str] | None = None
    message_id: str | None = None
    publish_time: str | None = None
    ordering_key: str | None = None


class PublishRequest(Model):
    messages: list[PubsubMessage]


class PublishResponse(Model):
    message_ids: list[str] = Field(default_factory=list)


# -- subscriptions ----------------------------------------------------------------------


class TruncationPolicyBody(Model):
    max_bytes: int | None = Field(default=None, description="Backlog bytes to keep at most")
    max_age_seconds: int | None = Field(default=None, description="Backlog age to keep at most")


class DeadLetterPolicyBody(Model):
    dead_letter_topic: str = ""
    max_delivery_attempts: int | None = None


class RetryPolicyBody(Model):
    minimum_backoff: str | None = None
    maximum_backoff: str | None = None


class ExpirationPolicyBody(Model):
    ttl: str | None = Field(default=None, description="Empty or absent: never expires")


class OidcTokenBody(Model):
    service_account_email: str = ""
    audience: str = ""


class NoWrapperBody(Model):
    write_metadata: bool = False


class PubsubWrapperBody(Model):
    """The default: messages are pushed wrapped in Pub/Sub's JSON envelope."""


class PushConfigBody(Model):
    push_endpoint: str = ""
    attributes: dict[str, str] = Field(default_factory=dict)
    oidc_token: OidcTokenBody | None = None
    pubsub_wrapper: PubsubWrapperBody | None = None
    no_wrapper: NoWrapperBody | None = None


class SubscriptionBody(_ResourceBody):
    name: str = ""
    topic: str = ""
    push_config: PushConfigBody | None = None
    ack_deadline_seconds: int | None = None
    retain_acked_messages: bool | None = None
    message_retention_duration: str | None = None
    labels: dict[str, str] | None = None
    enable_message_ordering: bool | None = None
    expiration_policy: ExpirationPolicyBody | None = None
    filter: str | None = None
    dead_letter_policy: DeadLetterPolicyBody | None = None
    retry_policy: RetryPolicyBody | None = None
    detached: bool | None = None
    enable_exactly_once_delivery: bool | None = None
    truncation_policy: TruncationPolicyBody | None = Field(
        default=None, description="lakepubsub extension (early Pub/Sub design)"
    )
    bigquery_config: Any = _not_built()
    cloud_storage_config: Any = _not_built()
    bigtable_config: Any = _not_built()
    topic_message_retention_duration: str | None = _output_only()
    analytics_hub_subscription_info: dict[str, Any] | None = _output_only()


class UpdateSubscriptionRequest(Model):
    subscription: SubscriptionBody
    update_mask: str


class ListSubscriptionsResponse(_Page):
    subscriptions: list[SubscriptionBody] = Field(default_factory=list)


class PullRequest(Model):
    max_messages: int = Field(default=0, description="1-1000 messages")
    return_immediately: bool = False


class TruncationEventBody(Model):
    truncated: bool = Field(
        default=True,
        description="false when :truncate found nothing unacknowledged to drop (no event queued)",
    )
    first_offset: int = Field(description="First dropped offset")
    end_offset: int = Field(description="One past the last dropped offset")
    reason: str
    time: str


class ReceivedMessageBody(Model):
    ack_id: str
    message: PubsubMessage
    delivery_attempt: int = 0
    event: TruncationEventBody | None = Field(
        default=None,
        description="lakepubsub extension: set for a truncation event (seed 000 PubsubEvent); "
        "the message then carries the event as attributes and no data",
    )


class PullResponse(Model):
    received_messages: list[ReceivedMessageBody] = Field(default_factory=list)


class AcknowledgeRequest(Model):
    ack_ids: list[str]


class ModifyAckDeadlineRequest(Model):
    ack_ids: list[str]
    # Protobuf JSON leaves out zero values, so a nack (0) arrives without the field.
    ack_deadline_seconds: int = 0


class ModifyPushConfigRequest(Model):
    push_config: PushConfigBody | None = None


class TruncateRequest(Model):
    """lakepubsub extension: drop every unacknowledged message (seed 000 TruncateSubscription)."""


class TruncateResponse(Model):
    event: TruncationEventBody


class SeekRequest(Model):
    time: str | None = Field(default=None, description="RFC 3339 time to seek to")
    snapshot: str | None = Field(default=None, description="projects/{p}/snapshots/{s}")


class SnapshotBody(Model):
    name: str = ""
    topic: str = ""
    expire_time: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class CreateSnapshotRequest(Model):
    subscription: str
    labels: dict[str, str] = Field(default_factory=dict)
    tags: Any = _not_built()


class UpdateSnapshotRequest(Model):
    snapshot: SnapshotBody
    update_mask: str


class ListSnapshotsResponse(_Page):
    snapshots: list[SnapshotBody] = Field(default_factory=list)


class ListTopicSnapshotsResponse(_Page):
    snapshots: list[str] = Field(default_factory=list)


class Empty(Model):
    pass
