"""What a push request carries: seed 003's JSON envelope, or the raw data (``noWrapper``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
from pybase64 import b64encode_as_string  # SIMD base64 (see api/convert/)

import lakepubsub
from lakepubsub.messages import ReceivedMessage, TruncationEvent, format_time_us
from lakepubsub.resources.subscriptions import Subscription

USER_AGENT = f"lakepubsub-push/{lakepubsub.__version__}"
# Attributes of a truncation event, as pull responses show them to clients
# that do not know the ``event`` field.
# Header names an attribute may not set (noWrapper): they are the request's own.
RESERVED_HEADERS = frozenset(
    {
        "authorization",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "host",
        "keep-alive",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
    }
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SAFE_VALUE = re.compile(r"[\t\x20-\x7e]*")


@dataclass(frozen=True)
class PushRequest:
    body: bytes
    headers: dict[str, str]
    message_id: str


def event_message_id(event: TruncationEvent) -> str:
    """A stable id for a truncation event (the same on every redelivery)."""
    return f"event-{event.first_offset}-{event.end_offset}-{event.time_us}"


def build(sub: Subscription, received: ReceivedMessage) -> PushRequest:
    """The request for one delivery of ``received`` to ``sub``'s endpoint."""
    if sub.push_config.no_wrapper:
        return _unwrapped(sub, received)
    return _wrapped(sub, received)


def _wrapped(sub: Subscription, received: ReceivedMessage) -> PushRequest:
    doc: dict[str, Any]
    if received.event is not None:
        event = received.event
        message_id = event_message_id(event)
        published = format_time_us(event.time_us)
        message: dict[str, Any] = {
            "attributes": event.attributes(),
            "messageId": message_id,
            "message_id": message_id,
            "publishTime": published,
            "publish_time": published,
        }
        doc = {
            "message": message,
            "subscription": sub.name.path,
            "event": {
                "truncated": True,
                "firstOffset": event.first_offset,
                "endOffset": event.end_offset,
                "reason": event.reason,
                "time": published,
            },
        }
    else:
        assert received.message is not None
        msg = received.message
        message_id = msg.message_id
        published = format_time_us(msg.publish_time_us)
        message = {
            "data": b64encode_as_string(msg.data),
            "messageId": message_id,
            "message_id": message_id,
            "publishTime": published,
            "publish_time": published,
        }
        if msg.attributes:
            message["attributes"] = dict(msg.attributes)
        if msg.ordering_key:
            message["orderingKey"] = msg.ordering_key
        doc = {"message": message, "subscription": sub.name.path}
    if sub.reports_delivery_attempts:
        doc["deliveryAttempt"] = received.delivery_attempt
    headers = {"content-type": "application/json", "user-agent": USER_AGENT}
    return PushRequest(orjson.dumps(doc), headers, message_id)


def _unwrapped(sub: Subscription, received: ReceivedMessage) -> PushRequest:
    """Pub/Sub's noWrapper: the data is the body; with ``writeMetadata`` the attributes
    become headers and the metadata ``x-goog-pubsub-*`` headers. A truncation event
    has no data; its attributes are always sent, so that it can be told apart."""
    headers = {"content-type": "application/octet-stream", "user-agent": USER_AGENT}
    if received.event is not None:
        event = received.event
        body = b""
        message_id = event_message_id(event)
        published = format_time_us(event.time_us)
        attributes = event.attributes()
        ordering_key = ""
        _add_attributes(headers, attributes)
    else:
        assert received.message is not None
        msg = received.message
        body = msg.data
        message_id = msg.message_id
        published = format_time_us(msg.publish_time_us)
        ordering_key = msg.ordering_key
        if sub.push_config.write_metadata:
            _add_attributes(headers, dict(msg.attributes))
    if sub.push_config.write_metadata:
        headers["x-goog-pubsub-subscription-name"] = sub.name.path
        headers["x-goog-pubsub-message-id"] = message_id
        headers["x-goog-pubsub-publish-time"] = published
        if sub.reports_delivery_attempts:
            headers["x-goog-pubsub-delivery-attempt"] = str(received.delivery_attempt)
        if ordering_key and _SAFE_VALUE.fullmatch(ordering_key):
            headers["x-goog-pubsub-ordering-key"] = ordering_key
    return PushRequest(body, headers, message_id)


def _add_attributes(headers: dict[str, str], attributes: dict[str, str]) -> None:
    # Attributes that cannot be headers (not a token, a control character in the
    # value) or that would replace the request's own headers are left out.
    for key, value in attributes.items():
        name = key.lower()
        if (
            not _TOKEN.fullmatch(key)
            or name in RESERVED_HEADERS
            or name.startswith("x-goog-pubsub-")
            or not _SAFE_VALUE.fullmatch(value)
        ):
            continue
        headers[key] = value
