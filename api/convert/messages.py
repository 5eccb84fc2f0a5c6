"""Messages: publish request bodies to batches, deliveries and truncation events
to JSON, and exactly-once ack failures as Pub/Sub reports them."""

from __future__ import annotations

import binascii
from typing import Any

from pybase64 import b64decode, b64encode_as_string

from api.convert.fields import decode_data
from api.errors import invalid_request
from lakepubsub import errors
from lakepubsub.messages import ReceivedMessage, TruncationEvent, format_time_us
from lakepubsub.publish import batches
from lakepubsub.publish.batches import Batch

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


def event_message_id(ack_id: str) -> str:
    return f"event-{ack_id}"


def _event_item(ack_id: str, attempt: int, event: TruncationEvent) -> dict[str, Any]:
    # Unmodified Google clients ignore "event"; they see the message.
    return {
        "ackId": ack_id,
        "message": {
            "messageId": event_message_id(ack_id),
            "publishTime": format_time_us(event.time_us),
            "attributes": event.attributes(),
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
