"""Mappings the gRPC door's modules share: the protobuf classes google-cloud-pubsub
ships, resource names from requests, and answers on the wire."""

from __future__ import annotations

import functools
from typing import Any, cast

from google.protobuf.message import Message

from lakepubsub.resources.names import SubscriptionName, TopicName


def pb(wrapper: Any) -> type[Message]:
    """The raw protobuf class that google-cloud-pubsub ships inside a proto-plus type."""
    return cast("type[Message]", wrapper.pb())


@functools.lru_cache(maxsize=4096)
def topic_name(path: str) -> TopicName:
    return TopicName.parse(path)


@functools.lru_cache(maxsize=4096)
def subscription_name(path: str) -> SubscriptionName:
    return SubscriptionName.parse(path)


def serialized(response: Message | bytes) -> bytes:
    """A handler's answer on the wire: a protobuf message serialized, or bytes already
    encoded (deliveries: ``api/grpc/encode.py``)."""
    return response if isinstance(response, bytes) else response.SerializeToString()
