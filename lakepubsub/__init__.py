"""lakepubsub: publish/subscribe with Delta Lake tables as the only source of truth."""

from lakepubsub.engine import Engine
from lakepubsub.messages import Message, PublishMessage, ReceivedMessage, TruncationEvent
from lakepubsub.resources.names import SnapshotName, SubscriptionName, TopicName
from lakepubsub.resources.subscriptions import (
    DeadLetterPolicy,
    PushConfig,
    RetryPolicy,
    Subscription,
    TruncationPolicy,
)
from lakepubsub.resources.topics import Topic
from lakepubsub.settings import Settings

__all__ = [
    "DeadLetterPolicy",
    "Engine",
    "Message",
    "PublishMessage",
    "PushConfig",
    "ReceivedMessage",
    "RetryPolicy",
    "Settings",
    "SnapshotName",
    "Subscription",
    "SubscriptionName",
    "Topic",
    "TopicName",
    "TruncationEvent",
    "TruncationPolicy",
]
__version__ = "0.1.0"
