"""A subscription's delivery state and the pure logic that changes it.

The lease table of a subscription holds one cursor row and one row per
outstanding message or event. ``LeaseState`` is that table in memory at one
version; a ``Planner`` applies acks, deadline changes, truncations and claims
to it and yields the rows to write. The delivery dispatcher commits them as one
MERGE (docs/architecture.md, "pull/ack commit protocol").

Invariants:
- every offset below ``cursor.frontier`` without a message row is acknowledged
  (or was dropped by truncation, or did not match the filter);
- the acknowledged floor is the smallest message-row offset, or the frontier;
- a row is out for delivery iff ``state == LEASED and deadline_us > now``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from lakepubsub import constants, schemas
from lakepubsub.ackids import AckId

Key = tuple[int, int]  # kind, offset

# Row states.
LEASED = 0  # out for delivery until deadline_us
WAITING = 1  # (re)deliverable from deadline_us on: nacked, or backing off
HELD = 2  # behind an earlier outstanding message of its ordering key

# Per-ack-id failure reasons, as Pub/Sub's exactly-once ErrorInfo metadata.
INVALID_ACK_ID = "PERMANENT_FAILURE_INVALID_ACK_ID"

CURSOR_KEY: Key = (schemas.KIND_CURSOR, 0)
_NEVER_US = 2**63 - 1


@dataclass
class Cursor:
    frontier: int  # every offset below has a row or is acknowledged
    next_delivery: int  # the next delivery id to hand out
    next_event: int  # the sequence number of the next event row
    active_us: int  # last time a client did something (expiration policy)


@dataclass(frozen=True)
class Row:
    kind: int
    offset: int
    delivery_id: int = 0
    attempt: int = 0
    state: int = WAITING
    deadline_us: int = 0
    ordering_key: str | None = None
    event: str | None = None

    @property
    def key(self) -> Key:
        return (self.kind, self.offset)


@dataclass
class LeaseState:
    """The lease table at ``version``: the cursor and the outstanding rows."""

    version: int
    cursor: Cursor
    rows: dict[Key, Row] = field(default_factory=dict)
    _earliest_due_us: int | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_arrow(cls, table: pa.Table, version: int) -> LeaseState:
        cursor: Cursor | None = None
        rows: dict[Key, Row] = {}
        for r in table.to_pylist():
            if r["kind"] == schemas.KIND_CURSOR:
                cursor = Cursor(r["frontier"], r["next_delivery"], r["next_event"], r["active_us"])
            else:
                row = Row(
                    r["kind"], r["offset"], r["delivery_id"], r["attempt"], r["state"],
                    r["deadline_us"], r["ordering_key"], r["event"],
                )  # fmt: skip
                rows[row.key] = row
        if cursor is None:
            raise ValueError("lease table has no cursor row")
        return cls(version, cursor, rows)

    def floor(self) -> int:
        """The lowest unacknowledged offset (the frontier when none is outstanding)."""
        offsets = [k[1] for k in self.rows if k[0] == schemas.KIND_MESSAGE]
        return min(offsets, default=self.cursor.frontier)

    def outstanding(self) -> int:
        return sum(1 for k in self.rows if k[0] == schemas.KIND_MESSAGE)

    def earliest_due_us(self) -> int:
        """No stored row is deliverable before this time (a lower bound: back-off is
        not counted). Computed once per state; states are not changed in place."""
        if self._earliest_due_us is None:
            self._earliest_due_us = min(
                (r.deadline_us for r in self.rows.values() if r.state != HELD),
                default=_NEVER_US,
            )
        return self._earliest_due_us


def initial_rows(frontier: int, now_us: int) -> pa.Table:
    """A new subscription's lease table: the cursor, starting at ``frontier``."""
    return to_arrow([], Cursor(frontier, 1, 0, now_us))


def to_arrow(rows: Iterable[Row], cursor: Cursor | None, ops: list[str] | None = None) -> pa.Table:
    """Rows (and the cursor row) in the lease-table schema, with an ``op`` column if given."""
    columns: dict[str, list[Any]] = {f.name: [] for f in schemas.LEASES}
    for r in rows:
        for name, value in (
            ("kind", r.kind), ("offset", r.offset), ("delivery_id", r.delivery_id),
            ("attempt", r.attempt), ("state", r.state), ("deadline_us", r.deadline_us),
            ("ordering_key", r.ordering_key), ("event", r.event), ("frontier", None),
            ("next_delivery", None), ("next_event", None), ("active_us", None),
        ):  # fmt: skip
            columns[name].append(value)
    if cursor is not None:
        for name, value in (
            ("kind", schemas.KIND_CURSOR), ("offset", 0), ("delivery_id", 0), ("attempt", 0),
            ("state", 0), ("deadline_us", 0), ("ordering_key", None), ("event", None),
            ("frontier", cursor.frontier), ("next_delivery", cursor.next_delivery),
            ("next_event", cursor.next_event), ("active_us", cursor.active_us),
        ):  # fmt: skip
            columns[name].append(value)
    table = pa.table(columns, schema=schemas.LEASES)
    if ops is not None:
        table = table.append_column("op", pa.array(ops, pa.string()))
    return table


@dataclass(frozen=True)
class Claim:
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

    def backoff_us(self, attempt: int) -> int:
        if self.min_backoff_s is None or self.max_backoff_s is None:
            return 0
        delay = self.min_backoff_s * 2 ** max(0, attempt - 1)
        return int(min(self.max_backoff_s, max(self.min_backoff_s, delay)) * constants.US_PER_S)


class Planner:
    """Applies requests to a ``LeaseState`` without touching it; yields the changes."""

    def __init__(self, state: LeaseState, policy: Policy, now_us: int) -> None:
        self.state = state
        self.policy = policy
        self.now_us = now_us
        self.cursor = replace(state.cursor, active_us=now_us)  # a copy: the planner's own
        self.changed: dict[Key, Row | None] = {}  # None: delete

    # -- reading through pending changes ---------------------------------------------

    def row(self, key: Key) -> Row | None:
        if key in self.changed:
            return self.changed[key]
        return self.state.rows.get(key)

    def _live(self, row: Row | None, ack: AckId) -> bool:
        return (
            row is not None
            and row.delivery_id == ack.delivery_id
            and row.state == LEASED
            and row.deadline_us > self.now_us
        )

    # -- acks and deadlines -------------------------------------------------------------

    def acknowledge(self, ack_ids: list[AckId]) -> dict[str, str]:
        """Delete the rows the ids name. Returns failures (exactly-once only)."""
        failures: dict[str, str] = {}
        for ack in ack_ids:
            row = self.row(ack.key) if ack.tag == self.policy.tag else None
            if self.policy.exactly_once and not self._live(row, ack):
                failures[str(ack)] = INVALID_ACK_ID
                continue
            if row is not None:
                self.changed[ack.key] = None
        return failures

    def modify_deadline(self, ack_ids: list[AckId], deadline_s: int) -> dict[str, str]:
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
                new = replace(
                    row,
                    state=WAITING,
                    deadline_us=self.now_us + self.policy.backoff_us(row.attempt),
                )
            else:
                new = replace(row, deadline_us=self.now_us + deadline_s * constants.US_PER_S)
            self.changed[ack.key] = new
        return failures

    # -- truncation ------------------------------------------------------------------------

    def truncate(self, end_offset: int, event: str) -> tuple[list[int], int]:
        """Drop everything unacknowledged below ``end_offset`` and queue an event.

        Returns the outstanding offsets dropped and the old frontier (offsets from
        there to ``end_offset`` were never delivered and are dropped too).
        """
        dropped = []
        for key in list(self.state.rows) + list(self.changed):
            row = self.row(key)
            if row is not None and row.kind == schemas.KIND_MESSAGE and row.offset < end_offset:
                self.changed[key] = None
                dropped.append(row.offset)
        old_frontier = self.cursor.frontier
        seq = self.cursor.next_event
        self.changed[(schemas.KIND_EVENT, seq)] = Row(
            schemas.KIND_EVENT, seq, state=WAITING, deadline_us=0, event=event
        )
        self.cursor = replace(
            self.cursor, frontier=max(old_frontier, end_offset), next_event=seq + 1
        )
        return sorted(set(dropped)), old_frontier

    def consume_to(self, end_offset: int) -> int:
        """Acknowledge every message below ``end_offset`` (a batch consumer's commit).

        Returns how many outstanding rows were acknowledged.
        """
        done = 0
        for key in list(self.state.rows) + list(self.changed):
            row = self.row(key)
            if row is not None and row.kind == schemas.KIND_MESSAGE and row.offset < end_offset:
                self.changed[key] = None
                done += 1
        self.advance(end_offset)
        return done

    # -- claims ----------------------------------------------------------------------------

    def _rows(self) -> dict[Key, Row]:
        """The rows as they stand with this plan's changes applied."""
        rows = dict(self.state.rows)
        for key, new in self.changed.items():
            if new is None:
                rows.pop(key, None)
            else:
                rows[key] = new
        return rows

    def available(self) -> list[Row]:
        """Rows that may be delivered now: events first, then messages by offset.

        With ordering, only the oldest outstanding message of each ordering key
        may go out, and only when no earlier delivery of it is live.
        """
        if not self.policy.ordering and self.state.earliest_due_us() > self.now_us:
            # No stored row is due: only rows this plan changed can be (a nack, an
            # event). With a large window this skips a pass over every lease.
            due = [
                r
                for r in self.changed.values()
                if r is not None
                and r.state in (LEASED, WAITING)
                and self._available_at(r) <= self.now_us
            ]
            due.sort(key=lambda r: (r.kind != schemas.KIND_EVENT, r.offset))
            return due
        rows = self._rows()
        heads = _key_heads(rows.values()) if self.policy.ordering else {}
        ready = []
        for r in rows.values():
            if r.ordering_key and r.ordering_key in heads:
                if heads[r.ordering_key] is not r:
                    continue
                if r.state == HELD:
                    ready.append(r)
                    continue
            if r.state in (LEASED, WAITING) and self._available_at(r) <= self.now_us:
                ready.append(r)
        ready.sort(key=lambda r: (r.kind != schemas.KIND_EVENT, r.offset))
        return ready

    def busy_keys(self) -> set[str]:
        """Ordering keys with a message outstanding: their new messages must wait."""
        return {
            r.ordering_key
            for r in self._rows().values()
            if r.kind == schemas.KIND_MESSAGE and r.ordering_key
        }

    def hold(self, offset: int, ordering_key: str) -> None:
        """Record a new message that waits behind an earlier one of its ordering key."""
        key = (schemas.KIND_MESSAGE, offset)
        self.changed[key] = Row(schemas.KIND_MESSAGE, offset, state=HELD, ordering_key=ordering_key)

    def exhausted(self, row: Row) -> bool:
        """Whether ``row`` used up its delivery attempts (dead-letter policy)."""
        limit = self.policy.max_delivery_attempts
        return limit is not None and row.kind == schemas.KIND_MESSAGE and row.attempt >= limit

    def reset(self, frontier: int, rows: list[Row]) -> None:
        """Seek: forget every outstanding message, restart at ``frontier`` with ``rows``."""
        for key in list(self.state.rows) + list(self.changed):
            if key[0] == schemas.KIND_MESSAGE:
                self.drop(key)
        for row in rows:
            self.changed[row.key] = replace(row, delivery_id=0, state=WAITING, deadline_us=0)
        self.cursor.frontier = frontier

    def _available_at(self, row: Row) -> int:
        if row.state == LEASED:  # an expired lease counts as a failed attempt
            return row.deadline_us + self.policy.backoff_us(row.attempt)
        return row.deadline_us

    def next_wakeup_us(self) -> int | None:
        """When the earliest outstanding row becomes deliverable, if any."""
        times = [
            self._available_at(r) for r in self.state.rows.values() if r.state in (LEASED, WAITING)
        ]
        return min(times, default=None)

    def lease(self, row: Row) -> Claim:
        """Hand ``row`` out now: a new delivery id, one more attempt, a fresh deadline."""
        delivery = self.cursor.next_delivery
        self.cursor.next_delivery += 1
        leased = Row(
            row.kind,
            row.offset,
            delivery,
            row.attempt + 1,
            LEASED,
            self.now_us + self.policy.ack_deadline_s * constants.US_PER_S,
            row.ordering_key,
            row.event,
        )
        self.changed[row.key] = leased
        return Claim(leased, AckId(self.policy.tag, row.kind, row.offset, delivery))

    def set_lease_deadline(self, key: Key, deadline_s: int) -> None:
        """Give a row leased by this plan a deadline of its own (``deadline_s`` from now)."""
        row = self.changed.get(key)
        if row is not None and row.state == LEASED:
            self.changed[key] = replace(
                row, deadline_us=self.now_us + deadline_s * constants.US_PER_S
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
        before = replace(self.state.cursor, active_us=self.cursor.active_us)
        stale = self.now_us - self.state.cursor.active_us > (
            constants.ACTIVITY_RESOLUTION_S * constants.US_PER_S
        )
        return bool(self.changed) or before != self.cursor or stale

    def result_state(self, version: int) -> LeaseState:
        return LeaseState(version, self.cursor, self._rows())


def _key_heads(rows: Iterable[Row]) -> dict[str, Row]:
    """The oldest outstanding message of every ordering key."""
    heads: dict[str, Row] = {}
    for r in rows:
        if r.kind == schemas.KIND_MESSAGE and r.ordering_key:
            head = heads.get(r.ordering_key)
            if head is None or r.offset < head.offset:
                heads[r.ordering_key] = r
    return heads
