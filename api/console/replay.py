"""Replaying a subscription's dead letters: moving the messages it dead-lettered back
to its topic, through a subscription of the dead-letter topic.

Each round pulls from that subscription, republishes the messages this
subscription dead-lettered to its topic (data, attributes and ordering key as
first published, in offset order, plus ``lakepubsub.replayed_from``) and
acknowledges them only once the publish has committed. So a message is never
lost: a failure before the acknowledgment leaves it in the dead-letter
subscription. A failure between the two (a crash, an acknowledgment refused
because its lease ran out) leaves it there too, already republished: the
result counts those, so a second replay is not a silent duplicate, and the
replayed copies name their origin. Messages dead-lettered from other
subscriptions are released (deliverable again at once, the attempt not
counted) and left where they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lakepubsub import Engine, errors
from lakepubsub.messages import Message, PublishMessage, ReceivedMessage
from lakepubsub.resources.names import SubscriptionName, TopicName

# What dead-lettering adds to a message (lakepubsub/delivery/planning.py, as Pub/Sub does);
# a replay removes them and says where the message came from instead.
SOURCE_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
SOURCE_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
DEAD_LETTER_ATTRIBUTES = frozenset(
    {
        "CloudPubSubDeadLetterSourceDeliveryCount",
        SOURCE_SUBSCRIPTION,
        SOURCE_PROJECT,
        "CloudPubSubDeadLetterSourceTopicPublishTime",
    }
)
# "<dead-letter topic>@<message id there>" on every replayed message.
REPLAYED_FROM = "lakepubsub.replayed_from"
# Messages replayed by one request at most (one click); the page says when there may be more.
MAX_REPLAY = 1000
# Messages one request looks at at most (those of other subscriptions included).
MAX_LOOKED_AT = 10 * MAX_REPLAY
# Pulled per round.
ROUND = 100


@dataclass
class Replayed:
    """What one replay did."""

    replayed: int = 0
    message_ids: list[str] = field(default_factory=list)  # in the topic, as republished
    not_acknowledged: int = 0  # republished, but still in the dead-letter subscription
    others: set[str] = field(default_factory=set)  # ids dead-lettered from other subscriptions
    looked_at: int = 0  # messages pulled, ours and others'
    more: bool = False  # stopped at a limit while pulls still came back full


def replay(
    engine: Engine,
    subscription: SubscriptionName,
    topic: TopicName,
    dead_letters: SubscriptionName,
    dead_letter_topic: TopicName,
    *,
    limit: int = MAX_REPLAY,
) -> Replayed:
    """Republish to ``topic`` what ``subscription`` dead-lettered, from ``dead_letters``
    (a subscription of ``dead_letter_topic``), up to ``limit`` messages.

    Raises the publish's error if one fails, saying what the rounds before did."""
    done = Replayed()
    held: list[ReceivedMessage] = []  # others' messages, leased until the replay ends
    try:
        while done.replayed < limit and done.looked_at < MAX_LOOKED_AT:
            want = min(ROUND, limit - done.replayed)
            got = engine.pull(dead_letters, max_messages=want, return_immediately=True)
            if not got:
                done.more = False
                break
            done.looked_at += len(got)
            mine = [r for r in got if r.message is not None and _from(r.message, subscription)]
            ours = {r.ack_id for r in mine}
            held += [r for r in got if r.ack_id not in ours]
            if mine:
                _republish(engine, mine, topic, dead_letters, dead_letter_topic, done)
            done.more = len(got) == want
    finally:
        done.others = {r.message.message_id for r in held if r.message is not None}
        engine.release(dead_letters, held)
    return done


def _republish(
    engine: Engine,
    mine: list[ReceivedMessage],
    topic: TopicName,
    dead_letters: SubscriptionName,
    dead_letter_topic: TopicName,
    done: Replayed,
) -> None:
    """Publish ``mine`` to ``topic`` in offset order, then acknowledge them."""
    mine.sort(key=lambda r: r.message.offset if r.message is not None else 0)
    try:
        ids = engine.publish(topic, [_restored(r, dead_letter_topic) for r in mine])
    except errors.LakePubSubError as exc:
        engine.release(dead_letters, mine)
        raise type(exc)(
            f"{summary(done, topic, dead_letters)} Then a publish failed, and the "
            f"{len(mine)} messages it held are back in {dead_letters.path}: {exc}"
        ) from exc
    failed = engine.acknowledge(dead_letters, [r.ack_id for r in mine])
    done.replayed += len(mine)
    done.message_ids += ids
    done.not_acknowledged += len(failed)


def _from(message: Message, subscription: SubscriptionName) -> bool:
    attributes = message.attributes
    return (
        attributes.get(SOURCE_SUBSCRIPTION) == subscription.id
        and attributes.get(SOURCE_PROJECT) == subscription.project
    )


def _restored(received: ReceivedMessage, dead_letter_topic: TopicName) -> PublishMessage:
    message = received.message
    assert message is not None
    attributes = {k: v for k, v in message.attributes.items() if k not in DEAD_LETTER_ATTRIBUTES}
    attributes[REPLAYED_FROM] = f"{dead_letter_topic.path}@{message.message_id}"
    return PublishMessage(message.data, attributes, message.ordering_key)


def summary(done: Replayed, topic: TopicName, dead_letters: SubscriptionName) -> str:
    """What a replay did, in a sentence or a few."""
    if not done.replayed:
        text = (
            f"Nothing replayed: {dead_letters.path} held no message ready that was "
            f"dead-lettered from this subscription."
        )
    else:
        ids = done.message_ids
        span = ids[0] if len(ids) == 1 else f"{ids[0]} to {ids[-1]}"
        text = (
            f"Replayed {done.replayed:,} dead-lettered message{'s' if done.replayed != 1 else ''} "
            f"from {dead_letters.path} to {topic.path} (message ids {span} there)."
        )
    if done.not_acknowledged:
        text += (
            f" {done.not_acknowledged:,} of them could not be acknowledged in "
            f"{dead_letters.path} (their leases ran out): they are still there, and a "
            f"replay would republish them again."
        )
    if done.others:
        text += (
            f" {len(done.others):,} dead-lettered from other subscriptions "
            f"{'were' if len(done.others) != 1 else 'was'} left in {dead_letters.path}."
        )
    if done.more:
        text += " Stopped at the limit of one replay: replay again for the rest."
    return text
