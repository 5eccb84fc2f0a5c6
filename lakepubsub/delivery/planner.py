"""The pure logic that changes a subscription's delivery state: a ``Planner``
applies acks, deadline changes, truncations and claims to a ``LeaseState``
(``lakepubsub/delivery/leases.py``) without touching it and yields the rows to
write; the delivery dispatcher commits them as one MERGE (docs/architecture.md,
"pull/ack commit protocol")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from lakepubsub import constants
from lakepubsub._lake import table_schemas
from lakepubsub.delivery.ackids import INVALID_ACK_ID, AckId
from lakepubsub.delivery.leases import (
    HELD,
    LEASE_SLACK_US,
    LEASED,
    WAITING,
    Block,
    Key,
    LeaseState,
    Row,
)
from lakepubsub.delivery.plan_rows import PlannedRows

# Builds a named tuple from a tuple of its fields, without argument handling.
_new = tuple.__new__
# New leases from this many on are one ``Block``; fewer are single rows. A pull of one
# message (a latency-bound subscriber) would otherwise make a block per message, and
# every ack would look through thousands of them.
BLOCK_FROM = 16


def lease_holds(lease_end_us: int, asked_end_us: int) -> bool:
    """Whether a lease ending at ``lease_end_us`` already answers a deadline change
    asking it to end at ``asked_end_us``: it lasts that long, and at most
    ``LEASE_SLACK_US`` longer, so the change leaves it as it is."""
    return 0 <= lease_end_us - asked_end_us <= LEASE_SLACK_US


def change_leaves_leases(
    state: LeaseState, tag: str, ack_ids: Sequence[AckId], deadline_s: int, now_us: int
) -> bool:
    """Whether extending ``ack_ids`` to ``deadline_s`` from ``now_us`` would leave
    every lease as it is, on ``state`` and on any later version of it that no
    deadline change came between (``Planner.modify_deadline`` without exactly-once).

    Each id must name a delivery made by ``state`` or before it (a newer one is
    not known here) and either no longer leased under it (acknowledged, nacked,
    delivered again: an ack id is never issued again, so a change to it changes
    nothing), or leased until at least the asked end and at most the slack past
    it (``lease_holds``). Google's clients send such a change for every message
    they receive (the receipt modack, often after the ack of a message handled
    fast).
    """
    if not 0 < deadline_s <= constants.MAX_ACK_DEADLINE_S or not ack_ids:
        return False
    asked_us = now_us + deadline_s * constants.US_PER_S
    issued = state.cursor.next_delivery
    rows = state.rows
    for ack in ack_ids:
        if ack.tag != tag:
            continue  # another subscription's: the planner ignores it
        if ack.delivery_id >= issued:
            return False
        row = rows.get(ack.key)
        if row is None or row.delivery_id != ack.delivery_id or row.state != LEASED:
            continue
        if not lease_holds(row.deadline_us, asked_us):
            return False
    return True


class Claim(NamedTuple):
    """One delivery decided by a plan: a row now leased, and its ack id."""

    row: Row
    ack_id: AckId


@dataclass(frozen=True)
class Policy:
    """The subscription settings the planner needs."""

    tag: str
    ack_deadline_s: int
    exactly_once: bool = False
    min_backoff_s: float | None = None
    max_backoff_s: float | None = None
    ordering: bool = False
    max_delivery_attempts: int | None = None  # dead-letter after this many
    lease_slack_us: int = 0  # added to every lease's deadline (streams: LEASE_SLACK_US)

    @property
    def lease_us(self) -> int:
        """How long a new lease lasts."""
        return self.ack_deadline_s * constants.US_PER_S + self.lease_slack_us

    def backoff_us(self, attempt: int) -> int:
        if self.min_backoff_s is None or self.max_backoff_s is None:
            return 0
        delay = self.min_backoff_s * 2 ** max(0, attempt - 1)
        return int(min(self.max_backoff_s, max(self.min_backoff_s, delay)) * constants.US_PER_S)


class Planner(PlannedRows):
    """Applies requests to a ``LeaseState`` without touching it; yields the changes
    (read through ``PlannedRows``)."""

    def __init__(self, state: LeaseState, policy: Policy, now_us: int) -> None:
        super().__init__(state)
        self.policy = policy
        self.now_us = now_us
        self.cursor = replace(state.cursor, active_us=now_us)  # a copy: the planner's own
        # Delivery ids from here on are this plan's leases.
        self._first_delivery = self.cursor.next_delivery

    def _live(self, row: Row | None, ack: AckId) -> bool:
        return (
            row is not None
            and row.delivery_id == ack.delivery_id
            and row.state == LEASED
            and row.deadline_us > self.now_us
        )

    # -- acks and deadlines -------------------------------------------------------------

    def acknowledge(self, ack_ids: Sequence[AckId]) -> dict[str, str]:
        """Delete the rows the ids name. Returns failures (exactly-once only)."""
        failures: dict[str, str] = {}
        if not self.policy.exactly_once:
            self.settle(self.policy.tag, ack_ids)
            return failures
        for ack in ack_ids:  # exactly-once: only the live lease's id settles it
            row = self.row(ack.key) if ack.tag == self.policy.tag else None
            if self._live(row, ack):
                self.changed[ack.key] = None
            else:
                failures[str(ack)] = INVALID_ACK_ID
        return failures

    def modify_deadline(self, ack_ids: Sequence[AckId], deadline_s: int) -> dict[str, str]:
        """Extend (or with 0, end: a nack) the leases the ids name."""
        failures: dict[str, str] = {}
        for ack in ack_ids:
            row = self.row(ack.key) if ack.tag == self.policy.tag else None
            usable = (
                self._live(row, ack)
                if self.policy.exactly_once
                else row is not None and row.delivery_id == ack.delivery_id and row.state == LEASED
            )
            if not usable or row is None:
                if self.policy.exactly_once:
                    failures[str(ack)] = INVALID_ACK_ID
                continue
            if deadline_s == 0:
                new = row._replace(
                    state=WAITING,
                    deadline_us=self.now_us + self.policy.backoff_us(row.attempt),
                )
            else:
                deadline_us = self.now_us + deadline_s * constants.US_PER_S
                if lease_holds(row.deadline_us, deadline_us):
                    continue  # the lease already lasts that long, and not much longer
                new = row._replace(deadline_us=deadline_us)
            self.changed[ack.key] = new
        return failures

    def release(self, ack_ids: Sequence[AckId]) -> dict[str, str]:
        """Give back deliveries that never reached a client: deliverable again now,
        without back-off, and the attempt they used does not count."""
        for ack in ack_ids:
            row = self.row(ack.key) if ack.tag == self.policy.tag else None
            if row is None or row.delivery_id != ack.delivery_id or row.state != LEASED:
                continue
            self.changed[ack.key] = row._replace(
                state=WAITING, deadline_us=self.now_us, attempt=max(0, row.attempt - 1)
            )
        return {}

    # -- truncation ------------------------------------------------------------------------

    def truncate(self, end_offset: int, event: str) -> tuple[list[int], int]:
        """Drop everything unacknowledged below ``end_offset`` and queue an event.

        Returns the outstanding offsets dropped and the old frontier (offsets from
        there to ``end_offset`` were never delivered and are dropped too).
        """
        dropped = self._drop_below(end_offset)
        old_frontier = self.cursor.frontier
        seq = self.cursor.next_event
        self.changed[(table_schemas.KIND_EVENT, seq)] = Row(
            table_schemas.KIND_EVENT, seq, state=WAITING, deadline_us=0, event=event
        )
        self.cursor = replace(
            self.cursor, frontier=max(old_frontier, end_offset), next_event=seq + 1
        )
        return sorted(set(dropped)), old_frontier

    def consume_to(self, end_offset: int) -> int:
        """Acknowledge every message below ``end_offset`` (a batch consumer's commit).

        Returns how many outstanding rows were acknowledged.
        """
        done = len(self._drop_below(end_offset))
        self.advance(end_offset)
        return done

    def _drop_below(self, end_offset: int) -> list[int]:
        """Delete every message row below ``end_offset``; their offsets."""
        dropped = []
        for key in set(self.keys()):
            row = self.row(key)
            if (
                row is not None
                and row.kind == table_schemas.KIND_MESSAGE
                and row.offset < end_offset
            ):
                self.changed[key] = None
                dropped.append(row.offset)
        return dropped

    # -- claims ----------------------------------------------------------------------------

    def available(self) -> list[Row]:
        """Rows that may be delivered now: events first, then messages by offset.

        With ordering, the messages of an ordering key go out in offset order, as
        many at a time as are deliverable, and none while an earlier one of the
        key is out (a live lease) or backing off. A message that goes again (nacked,
        expired) takes the key's later messages that are out with it.
        """
        if not self.policy.ordering and self.state.earliest_due_us(self.now_us) > self.now_us:
            # No stored row is due: only rows this plan changed can be (a nack, an
            # event). With a large window this skips a pass over every lease.
            due = [
                r
                for r in self.changed.values()
                if r is not None
                and r.state in (LEASED, WAITING)
                and self._available_at(r) <= self.now_us
            ]
            due.sort(key=lambda r: (r.kind != table_schemas.KIND_EVENT, r.offset))
            return due
        # Blocks hold no ordering key: their rows are due as their leases end.
        ready = self.block_rows_due(self.policy.backoff_us(1), self.now_us)
        keyed: dict[str, list[Row]] = {}
        for r in self.single_rows().values():
            if self.policy.ordering and r.ordering_key and r.kind == table_schemas.KIND_MESSAGE:
                keyed.setdefault(r.ordering_key, []).append(r)
            elif r.state in (LEASED, WAITING) and self._available_at(r) <= self.now_us:
                ready.append(r)
        for group in keyed.values():
            group.sort(key=lambda r: r.offset)
            redelivering = False
            for r in group:
                if r.state == HELD or self._available_at(r) <= self.now_us:
                    redelivering = redelivering or r.state != HELD
                elif not (redelivering and r.state == LEASED):
                    break  # out, or backing off: the key's later messages wait behind it
                # else: out, behind one that goes again; as Pub/Sub does, it goes
                # again too, so the receiver sees the key in order.
                ready.append(r)
        ready.sort(key=lambda r: (r.kind != table_schemas.KIND_EVENT, r.offset))
        return ready

    def busy_keys(self) -> set[str]:
        """Ordering keys with a message outstanding that this plan has not just leased:
        their new messages must wait. (A key whose every outstanding message this
        plan leases may go on in the same delivery, in order.)"""
        return {
            r.ordering_key
            for r in self.single_rows().values()
            if r.kind == table_schemas.KIND_MESSAGE
            and r.ordering_key
            and not (r.state == LEASED and r.delivery_id >= self._first_delivery)
        }

    def hold(self, offset: int, ordering_key: str) -> None:
        """Record a new message that waits behind an earlier one of its ordering key."""
        key = (table_schemas.KIND_MESSAGE, offset)
        self.changed[key] = Row(
            table_schemas.KIND_MESSAGE, offset, state=HELD, ordering_key=ordering_key
        )

    def exhausted(self, row: Row) -> bool:
        """Whether ``row`` used up its delivery attempts (dead-letter policy)."""
        limit = self.policy.max_delivery_attempts
        return limit is not None and row.kind == table_schemas.KIND_MESSAGE and row.attempt >= limit

    def reset(self, frontier: int, rows: list[Row]) -> None:
        """Seek: forget every outstanding message, restart at ``frontier`` with ``rows``."""
        for key in list(self.keys()):
            if key[0] == table_schemas.KIND_MESSAGE:
                self.drop(key)
        for row in rows:
            self.changed[row.key] = row._replace(delivery_id=0, state=WAITING, deadline_us=0)
        self.cursor.frontier = frontier

    def _available_at(self, row: Row) -> int:
        if row.state == LEASED:  # an expired lease counts as a failed attempt
            return row.deadline_us + self.policy.backoff_us(row.attempt)
        return row.deadline_us

    def lease(self, row: Row) -> Claim:
        """Hand ``row`` out now: a new delivery id, one more attempt, a fresh deadline."""
        delivery = self.cursor.next_delivery
        self.cursor.next_delivery += 1
        kind, offset = row.kind, row.offset
        leased = _new(
            Row,
            (
                kind,
                offset,
                delivery,
                row.attempt + 1,
                LEASED,
                self.now_us + self.policy.lease_us,
                row.ordering_key,
                row.event,
            ),
        )
        self.changed[(kind, offset)] = leased
        return _new(Claim, (leased, _new(AckId, (self.policy.tag, kind, offset, delivery))))

    def lease_new(self, offsets: list[int], ordering_keys: list[str | None]) -> range:
        """``lease`` for messages past the frontier (no row yet; ``offsets``
        ascending), in bulk: their delivery ids, consecutive from the cursor's
        ``next_delivery`` on (their ack ids are ``messages.message_ack_ids`` of the
        policy's tag), without a ``Claim`` or ``AckId`` per message. Without ordering
        keys, from ``BLOCK_FROM`` on, the leases are one ``Block``; otherwise the rows
        ``lease`` would make."""
        first = self.cursor.next_delivery
        self.cursor.next_delivery = first + len(offsets)
        deliveries = range(first, first + len(offsets))
        kind, deadline_us = table_schemas.KIND_MESSAGE, self.now_us + self.policy.lease_us
        if not offsets:
            return deliveries
        if len(offsets) >= BLOCK_FROM and ordering_keys.count(None) == len(offsets):
            self.new_blocks.append(Block(offsets, first, deadline_us))
            return deliveries
        rows = [
            _new(Row, (kind, o, d, 1, LEASED, deadline_us, k, None))
            for o, d, k in zip(offsets, deliveries, ordering_keys, strict=True)
        ]
        self.changed.update({(kind, r.offset): r for r in rows})
        return deliveries

    def set_lease_deadline(self, key: Key, deadline_s: int, slack_us: int = 0) -> None:
        """Give a row leased by this plan a deadline of its own (``deadline_s`` from now,
        plus ``slack_us``)."""
        row = self.row(key)
        if row is not None and row.state == LEASED and row.delivery_id >= self._first_delivery:
            self.changed[key] = row._replace(
                deadline_us=self.now_us + deadline_s * constants.US_PER_S + slack_us
            )

    def drop(self, key: Key) -> None:
        """Forget a row (its message is gone or was moved elsewhere)."""
        if self.row(key) is not None:
            self.changed[key] = None

    def advance(self, frontier: int) -> None:
        self.cursor.frontier = max(self.cursor.frontier, frontier)

    # -- results ---------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether there is anything to commit (activity time alone is not worth one)."""
        return bool(self.changed or self.new_blocks or self.removed) or self.cursor_changed

    @property
    def cursor_changed(self) -> bool:
        """Whether the cursor row is worth rewriting: a field other than the activity
        time moved, or the stored activity time is older than its resolution."""
        before = replace(self.state.cursor, active_us=self.cursor.active_us)
        stale = self.now_us - self.state.cursor.active_us > (
            constants.ACTIVITY_RESOLUTION_S * constants.US_PER_S
        )
        return before != self.cursor or stale

    def result_state(self, version: int) -> LeaseState:
        """The state this plan makes, at ``version``."""
        return self.result_and_blocks(version)[0]

    def result_and_blocks(self, version: int) -> tuple[LeaseState, set[int]]:
        """``result_state``, and the ids of the blocks the plan made or changed."""
        rows, blocks = self.result_rows()
        state = LeaseState(version, self.cursor, rows)
        state.inherit_due(self.state.due_bound(), self.changed.values(), self.new_blocks)
        return state, blocks
