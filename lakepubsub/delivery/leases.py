"""A subscription's delivery state.

The lease table of a subscription holds one cursor row and one row per
outstanding message or event. ``LeaseState`` is that table in memory at one
version; a ``Planner`` (``lakepubsub/delivery/planner.py``) applies acks,
deadline changes, truncations and claims to it and yields the rows to write.

Invariants:
- every offset below ``cursor.frontier`` without a message row is acknowledged
  (or was dropped by truncation, or did not match the filter);
- the acknowledged floor is the smallest message-row offset, or the frontier;
- a row is out for delivery iff ``state == LEASED and deadline_us > now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakepubsub import constants
from lakepubsub._lake import table_schemas
from lakepubsub.delivery.lease_rows import HELD, LEASED, WAITING, Block, Key, LeaseRows, Row

__all__ = ["HELD", "LEASED", "WAITING", "Block", "Key", "LeaseRows", "Row"]

# The deadline of a change that gives back deliveries no client received (their
# stream or long poll ended before they were written): ``Planner.release``.
RELEASE = -1

CURSOR_KEY: Key = (table_schemas.KIND_CURSOR, 0)
# StreamingPull leases run this much past the deadline the stream asked for
# (``planner.Policy.lease_slack_us``). Google's clients send a deadline change for every
# message they receive (the "receipt modack"), asking for the same deadline a
# moment later; a lease that already lasts that long, and at most this much
# longer, is left as it is, so those changes cost no lease-table write. A
# client that dies is redelivered to this much later.
LEASE_SLACK_US = 2 * constants.US_PER_S


# The cursor row's own columns, after the row columns (table_schemas.LEASES).
_CURSOR_FIELDS = ("frontier", "next_delivery", "next_event", "active_us")
# Builds a named tuple from a tuple of its fields, without argument handling.
_new = tuple.__new__
_NEVER_US = 2**63 - 1


@dataclass
class Cursor:
    frontier: int  # every offset below has a row or is acknowledged
    next_delivery: int  # the next delivery id to hand out
    next_event: int  # the sequence number of the next event row
    active_us: int  # last time a client did something (expiration policy)


@dataclass
class LeaseState:
    """The lease table at ``version``: the cursor and the outstanding rows (given as
    a dict, they become a ``LeaseRows``)."""

    version: int
    cursor: Cursor
    rows: LeaseRows = field(default_factory=LeaseRows)
    _earliest_due_us: int | None = field(default=None, init=False, repr=False, compare=False)
    _due_exact: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rows, LeaseRows):
            given: Mapping[Key, Row] = self.rows
            self.rows = LeaseRows(dict(given))

    @classmethod
    def from_arrow(cls, table: pa.Table, version: int) -> LeaseState:
        kinds = table.column("kind").to_pylist()
        at = kinds.index(table_schemas.KIND_CURSOR) if table_schemas.KIND_CURSOR in kinds else -1
        if at < 0:
            raise ValueError("lease table has no cursor row")
        cursor = Cursor(*(table.column(name)[at].as_py() for name in _CURSOR_FIELDS))
        columns = [kinds, *(table.column(name).to_pylist() for name in Row._fields[1:])]
        rows = {
            (r[0], r[1]): _new(Row, r)
            for r in zip(*columns, strict=True)
            if r[0] != table_schemas.KIND_CURSOR
        }
        return cls(version, cursor, LeaseRows(rows))

    def floor(self) -> int:
        """The lowest unacknowledged offset (the frontier when none is outstanding)."""
        offsets = [k[1] for k in self.rows.single if k[0] == table_schemas.KIND_MESSAGE]
        return min(
            min(offsets, default=self.cursor.frontier),
            self.rows.min_block_offset(self.cursor.frontier),
        )

    def outstanding(self) -> int:
        single = sum(1 for k in self.rows.single if k[0] == table_schemas.KIND_MESSAGE)
        return single + self.rows.block_count()

    def earliest_due_us(self, now_us: int | None = None) -> int:
        """No stored row is deliverable before this time (a lower bound: back-off is
        not counted). A state made by a plan inherits its parent's bound lowered by
        the rows the plan changed (``inherit_due``), which stays a lower bound as
        rows go; it is computed again, exactly, once ``now_us`` reaches it. Without
        a bound yet, it is computed. States are not changed in place."""
        bound = self._earliest_due_us
        if bound is None or (now_us is not None and bound <= now_us and not self._due_exact):
            # One pass over every row: a cycle that leases 1,000 messages of a
            # 10,000-message window made it each time (3-4 % of a drain's CPU).
            bound = min(
                (r.deadline_us for r in self.rows.single.values() if r.state != HELD),
                default=_NEVER_US,
            )
            bound = min(bound, self.rows.earliest_block_deadline(_NEVER_US))
            self._earliest_due_us, self._due_exact = bound, True
        return bound

    def due_bound(self) -> int | None:
        """The bound ``earliest_due_us`` holds now, if it was computed or inherited."""
        return self._earliest_due_us

    def inherit_due(
        self, bound: int | None, changed: Iterable[Row | None] = (), blocks: Iterable[Block] = ()
    ) -> None:
        """Take ``bound`` (a parent state's ``due_bound``) lowered by ``changed`` rows
        and new ``blocks`` as this state's lower bound; None leaves it to be computed."""
        if bound is None:
            return
        lowest = min(
            (r.deadline_us for r in changed if r is not None and r.state != HELD),
            default=_NEVER_US,
        )
        lowest = min(lowest, min((b.deadline_us for b in blocks), default=_NEVER_US))
        self._earliest_due_us, self._due_exact = min(bound, lowest), False


def initial_rows(frontier: int, now_us: int) -> pa.Table:
    """A new subscription's lease table: the cursor, starting at ``frontier``."""
    return to_arrow([], Cursor(frontier, 1, 0, now_us))


def to_arrow(rows: Iterable[Row], cursor: Cursor | None, ops: list[str] | None = None) -> pa.Table:
    """Rows (and the cursor row) in the lease-table schema, with an ``op`` column if given."""
    # A row's fields are the schema's first columns, so the rows transpose into them.
    columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] or [
        [] for _ in Row._fields
    ]
    count = len(columns[0])
    columns += [[None] * count for _ in _CURSOR_FIELDS]
    if cursor is not None:
        for column, value in zip(
            columns, (table_schemas.KIND_CURSOR, 0, 0, 0, 0, 0, None, None), strict=False
        ):
            column.append(value)
        for column, name in zip(columns[len(Row._fields) :], _CURSOR_FIELDS, strict=True):
            column.append(getattr(cursor, name))
    table = pa.table(columns, schema=table_schemas.LEASES)
    if ops is not None:
        table = table.append_column("op", pa.array(ops, pa.string()))
    return table
