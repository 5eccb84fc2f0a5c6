"""What one dispatcher cycle plans with the lease ``Planner``: the subscription's
policy, the acks and truncations applied, and what the waiting pulls claim
(ready rows first, then new messages past the frontier, filtered and held behind
busy ordering keys; exhausted ones go to the dead-letter topic). The dispatcher
(``lakepubsub/delivery/dispatcher.py``) commits the result."""

from __future__ import annotations

import math
from collections.abc import Callable

import orjson

from lakepubsub._lake import table_schemas
from lakepubsub.delivery.ackids import AckId, subscription_tag
from lakepubsub.delivery.leases import LEASE_SLACK_US, RELEASE, Row
from lakepubsub.delivery.planner import Claim, Planner, Policy
from lakepubsub.delivery.requests import AckRequest, PullRequest, TruncateRequest
from lakepubsub.messages import (
    Message,
    Part,
    PublishMessage,
    Received,
    ReceivedMessage,
    Run,
    TruncationEvent,
    from_arrow,
    message_ack_ids,
)
from lakepubsub.publish.messages_table import MessagesTable
from lakepubsub.resources.filters import Filter
from lakepubsub.resources.names import TopicName
from lakepubsub.resources.subscriptions import Subscription, parse_subscription_filter

# Publishes dead-lettered messages to a topic; returns once they are committed.
DeadLetterSink = Callable[[TopicName, list[PublishMessage]], None]

# Per cycle: at most this many messages dead-lettered, and at most this many
# offsets scanned past the frontier when a filter or ordering skips messages.
MAX_DEAD_LETTERS_PER_CYCLE = 1_000
MAX_SCAN_PER_CYCLE = 100_000
# A filtered read covers this many times the offsets the recent pass rate says
# the demand needs (a little extra saves a second read when the rate dips), and
# assumes at least this pass rate (a filter that passed nothing lately).
SCAN_MARGIN = 1.1
MIN_PASS_RATE = 1 / 64


class Claimer:
    """Claims messages for one subscription's pulls; remembers across cycles the
    compiled filter, the share of messages it passes, and what was dead-lettered
    by an attempt that lost its race."""

    def __init__(self, dead_letter: DeadLetterSink) -> None:
        self._dead_letter = dead_letter
        # Offsets already published to the dead-letter topic by a commit attempt
        # that lost its race: the retry drops them without publishing again.
        self._dead_lettered: set[int] = set()
        self._filter: tuple[str, Filter] | None = None
        self._pass_rate: float | None = None  # share of scanned messages the filter passed
        self.moved = False  # this attempt published to the dead-letter topic

    def committed(self) -> None:
        """The cycle's commit landed: its dead-lettered rows are gone for good."""
        self._dead_lettered.clear()

    def claim(
        self, sub: Subscription, planner: Planner, messages: MessagesTable, demand: int
    ) -> Received:
        """The deliveries for ``demand``: ready rows (events first), then new messages."""
        ready = planner.available()
        exhausted = [r for r in ready if planner.exhausted(r)][:MAX_DEAD_LETTERS_PER_CYCLE]
        ready = [r for r in ready if not planner.exhausted(r)][:demand]
        wanted = [r.offset for r in exhausted + ready if r.kind == table_schemas.KIND_MESSAGE]
        found = {m.offset: m for m in from_arrow(messages.read_offsets(wanted))}
        self._move_to_dead_letter(sub, planner, exhausted, found)
        again: list[ReceivedMessage] = []
        for row in ready:
            if row.kind == table_schemas.KIND_EVENT:
                event = TruncationEvent.from_json(orjson.loads(row.event or "{}"))
                again.append(received(planner.lease(row), event))
            elif row.offset in found:
                again.append(received(planner.lease(row), found[row.offset]))
            else:  # the message is gone (retention); nothing left to deliver
                planner.drop(row.key)
        parts: list[Part] = [again]
        self._claim_new(sub, planner, messages, demand - len(again), parts)
        return Received(parts)

    def _claim_new(
        self,
        sub: Subscription,
        planner: Planner,
        messages: MessagesTable,
        demand: int,
        parts: list[Part],
    ) -> None:
        """Lease up to ``demand`` messages past the frontier (added to ``parts``):
        filtered out ones count as acknowledged, ones behind a busy ordering key are
        held. Without ordering, each read's messages go as a ``Run``, in their
        stored columns."""
        head = messages.head()
        match = self._compiled_filter(sub)
        ordering = planner.policy.ordering
        busy = planner.busy_keys() if ordering else set()
        scanned = claimed = 0
        # With skipping (filter, held keys), a read is sized from the share of
        # messages recent reads passed, so one read usually fills the demand;
        # until that is known, each round reads twice as far as the last.
        skip_chunk = demand * 4
        while claimed < demand and planner.cursor.frontier < head:
            start = planner.cursor.frontier
            wanted = demand - claimed
            if match is None and not ordering:
                chunk = wanted
            elif self._pass_rate is not None:
                chunk = min(MAX_SCAN_PER_CYCLE, math.ceil(wanted * SCAN_MARGIN / self._pass_rate))
            else:
                chunk, skip_chunk = skip_chunk, min(skip_chunk * 2, MAX_SCAN_PER_CYCLE)
            end = min(head, start + max(chunk, 1))
            table = messages.read_range(start, end)
            read = table.num_rows
            if match is not None and read:
                table = table.filter(match.mask(table["attributes"]))
                self._learn_pass_rate(table.num_rows, read)
            if ordering:  # messages behind a busy key are held, the others go
                taken = []
                for message in from_arrow(table):
                    key = message.ordering_key
                    if key and key in busy:
                        planner.hold(message.offset, key)
                        continue
                    taken.append(message)
                    if len(taken) == wanted:
                        break
                offsets = [m.offset for m in taken]
                deliveries = planner.lease_new(offsets, [m.ordering_key or None for m in taken])
                ack_ids = message_ack_ids(planner.policy.tag, offsets, deliveries)
                new = tuple.__new__
                parts.append(
                    [
                        new(ReceivedMessage, (a, 1, m, None))
                        for a, m in zip(ack_ids, taken, strict=True)
                    ]
                )
            else:  # every message read (and passed) goes, up to the demand
                table = table.slice(0, wanted)
                offsets = table.column("offset").to_pylist()
                # No Arrow compute call here: its fixed cost (tens of µs) is more than
                # the whole claim of the one message a latency-bound pull leases.
                keys = table.column("ordering_key")
                ordering_keys: list[str | None] = (
                    [None] * len(offsets)
                    if keys.null_count == len(keys)
                    else [k or None for k in keys.to_pylist()]
                )
                deliveries = planner.lease_new(offsets, ordering_keys)
                parts.append(Run(table, None, deliveries, planner.policy.tag))
            claimed += len(offsets)
            if len(offsets) == wanted:
                end = offsets[-1] + 1
            planner.advance(end)
            scanned += end - start
            if scanned >= MAX_SCAN_PER_CYCLE:
                break

    def _learn_pass_rate(self, passed: int, read: int) -> None:
        rate = max(passed / read, MIN_PASS_RATE)
        previous = self._pass_rate
        self._pass_rate = rate if previous is None else (previous + rate) / 2

    def _compiled_filter(self, sub: Subscription) -> Filter | None:
        text = sub.filter
        if not text:
            return None
        if self._filter is None or self._filter[0] != text:
            self._filter = (text, parse_subscription_filter(text))
            self._pass_rate = None
        return None if self._filter[1].matches_all else self._filter[1]

    def _move_to_dead_letter(
        self, sub: Subscription, planner: Planner, rows: list[Row], found: dict[int, Message]
    ) -> None:
        """Publish exhausted messages to the dead-letter topic, then drop their rows.

        The publish commits before the lease commit that drops the rows, so a crash
        in between delivers the message again (and dead-letters it again): it can
        be in both places briefly, never in neither.
        """
        policy = sub.dead_letter_policy
        if not rows or policy is None:
            return
        name = sub.name
        batch = []
        for row in rows:
            message = found.get(row.offset)
            if message is not None and row.offset not in self._dead_lettered:
                attributes = {
                    **message.attributes,
                    "CloudPubSubDeadLetterSourceDeliveryCount": str(row.attempt),
                    "CloudPubSubDeadLetterSourceSubscription": name.id,
                    "CloudPubSubDeadLetterSourceSubscriptionProject": name.project,
                    "CloudPubSubDeadLetterSourceTopicPublishTime": str(message.publish_time_us),
                }
                batch.append(PublishMessage(message.data, attributes, message.ordering_key))
        if batch:
            self._dead_letter(policy.dead_letter_topic, batch)
            self.moved = True
        for row in rows:
            self._dead_lettered.add(row.offset)
            planner.drop(row.key)


def truncate(
    planner: Planner, messages: MessagesTable, request: TruncateRequest
) -> TruncationEvent:
    end = messages.head() if request.end_offset is None else request.end_offset
    first = planner.state.floor()
    event = TruncationEvent(first, max(first, end), request.reason, planner.now_us)
    if request.silent:
        planner.consume_to(end)
    elif end > first:
        planner.truncate(end, orjson.dumps(event.to_json()).decode())
    return event


def apply(planner: Planner, request: AckRequest) -> dict[str, str]:
    if request.deadline_s is None:
        return planner.acknowledge(request.ack_ids)
    if request.deadline_s == RELEASE:
        return planner.release(request.ack_ids)
    return planner.modify_deadline(request.ack_ids, request.deadline_s)


def policy_of(sub: Subscription) -> Policy:
    retry = sub.retry_policy
    dead_letter = sub.dead_letter_policy
    return Policy(
        tag=subscription_tag(sub.uid),
        ack_deadline_s=sub.ack_deadline_s,
        exactly_once=sub.enable_exactly_once_delivery,
        min_backoff_s=retry.minimum_backoff_s if retry else None,
        max_backoff_s=retry.maximum_backoff_s if retry else None,
        ordering=sub.enable_message_ordering,
        max_delivery_attempts=dead_letter.max_delivery_attempts if dead_letter else None,
    )


def apply_pull_deadlines(planner: Planner, deliveries: Received, pulls: list[PullRequest]) -> None:
    """Give each delivery the lease of the pull it goes to (the dispatcher serves the
    planned pulls in order, each its ``max_messages``). Only a cycle whose pulls ask
    for different deadlines comes here: it parses the ack ids for their rows."""
    at = 0
    for pull in pulls:
        share = deliveries[at : at + pull.max_messages]
        at += pull.max_messages
        if pull.ack_deadline_s is not None:
            for ack_id in share.ack_ids():
                key = AckId.parse(ack_id).key
                planner.set_lease_deadline(key, pull.ack_deadline_s, LEASE_SLACK_US)


def received(claim: Claim, item: Message | TruncationEvent) -> ReceivedMessage:
    if isinstance(item, TruncationEvent):
        return ReceivedMessage(str(claim.ack_id), claim.row.attempt, event=item)
    return tuple.__new__(ReceivedMessage, (str(claim.ack_id), claim.row.attempt, item, None))
