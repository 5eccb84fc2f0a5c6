"""A subscription's outstanding rows in memory: single rows, and blocks of leases
made together.

A pull that leases 16 or more new messages without ordering keys (``Planner.
lease_new``) makes leases that differ only in their offset and delivery id:
attempt 1, leased, one deadline. Held as one ``Row`` tuple per message in a dict
keyed by ``(kind, offset)``, every delivered message cost a tuple, a key and a dict
entry when leased, again when deferred and when acknowledged, and a row in Python
lists when written: 3.2 µs per message of a drain's bookkeeping, against 0.4 µs
now, the ack's parse included (``python -m bench leases``). A ``Block`` holds such
a run of leases as its offsets and its first delivery id, with the set of offsets
still outstanding; an ack of many ids takes its share out of that set in one set
operation, and a commit writes the block's rows as Arrow columns. ``LeaseRows`` is
the mapping the rest of the delivery code reads (``LeaseState.rows``): its single
rows and its blocks' rows, by key, a block's ``Row`` built when asked for.
Everything that changes one row on its own (a deadline change, a nack, a release,
a redelivery) takes it out of its block and keeps it as a single row.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, MutableMapping
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from lakepubsub._lake import table_schemas

Key = tuple[int, int]  # kind, offset
MESSAGE = table_schemas.KIND_MESSAGE

# Row states.
LEASED = 0  # out for delivery until deadline_us
WAITING = 1  # (re)deliverable from deadline_us on: nacked, or backing off
HELD = 2  # behind an earlier outstanding message of its ordering key

# Builds a named tuple from a tuple of its fields, without argument handling.
_new = tuple.__new__


class Row(NamedTuple):
    """One outstanding message or event. A named tuple, not a frozen dataclass:
    every delivery makes one or more, and a tuple is built about three times
    faster; its fields are also the lease table's first columns, in order."""

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


class Block:
    """Leases of new messages made by one plan: message ``offsets[i]`` (ascending)
    has delivery id ``first_delivery + i``, attempt 1, and is leased until
    ``deadline_us``; ``live`` holds the offsets still outstanding here. A block's
    id is its first delivery id (delivery ids are never issued twice)."""

    __slots__ = ("_step", "deadline_us", "first_delivery", "hi", "live", "lo", "offsets")

    def __init__(
        self,
        offsets: list[int],
        first_delivery: int,
        deadline_us: int,
        live: set[int] | None = None,
    ) -> None:
        self.offsets = offsets
        self.first_delivery = first_delivery
        self.deadline_us = deadline_us
        self.live = set(offsets) if live is None else live
        self.lo, self.hi = offsets[0], offsets[-1] + 1
        # Without a filter a block's offsets are consecutive: an offset's delivery id
        # is then arithmetic, not a search.
        self._step = self.hi - self.lo == len(offsets)

    @property
    def id(self) -> int:
        return self.first_delivery

    def delivery_of(self, offset: int) -> int:
        if self._step:
            return self.first_delivery + offset - self.lo
        return self.first_delivery + bisect_left(self.offsets, offset)

    def row(self, offset: int) -> Row:
        """The row of one of the block's outstanding offsets."""
        return _new(
            Row,
            (MESSAGE, offset, self.delivery_of(offset), 1, LEASED, self.deadline_us, None, None),
        )

    def copy(self) -> Block:
        return Block(self.offsets, self.first_delivery, self.deadline_us, set(self.live))

    def to_arrow(self) -> pa.Table:
        """The live rows in the lease-table schema, by offset."""
        live = np.fromiter(self.live, np.int64, len(self.live))
        live.sort()
        if self._step:
            deliveries = live - self.lo + self.first_delivery
        else:
            deliveries = np.searchsorted(np.asarray(self.offsets, np.int64), live)
            deliveries += self.first_delivery
        n = len(live)
        columns = [
            pa.array(np.full(n, MESSAGE, np.int8)),
            pa.array(live),
            pa.array(deliveries),
            pa.array(np.ones(n, np.int32)),
            pa.array(np.full(n, LEASED, np.int8)),
            pa.array(np.full(n, self.deadline_us, np.int64)),
        ]
        columns += [pa.nulls(n, f.type) for f in table_schemas.LEASES][len(columns) :]
        return pa.Table.from_arrays(columns, schema=table_schemas.LEASES)


class LeaseRows(MutableMapping[Key, Row]):
    """Outstanding rows by key: single rows (a dict) and blocks (``Block``), disjoint.

    Reads are safe from another thread while the dispatcher changes the rows in
    place (``LeaseTable.defer``): the list of blocks and their starts is replaced
    whole, as one tuple, and a block's outstanding set changes by single set
    operations, each atomic under the interpreter lock."""

    def __init__(self, rows: dict[Key, Row] | None = None, blocks: Iterable[Block] = ()) -> None:
        self.single: dict[Key, Row] = {} if rows is None else rows
        self._blocks: tuple[list[int], list[Block]] = ([], [])
        self.add_blocks(blocks)

    # -- blocks ------------------------------------------------------------------------

    @property
    def blocks(self) -> list[Block]:
        return self._blocks[1]

    def add_blocks(self, blocks: Iterable[Block]) -> None:
        los, kept = self._blocks
        new = list(blocks)
        if not new:
            return
        if los and any(b.lo < los[-1] for b in new):
            merged = sorted([*kept, *new], key=lambda b: b.lo)
        else:  # past the frontier: after every block held (the common case)
            merged = [*kept, *sorted(new, key=lambda b: b.lo)]
        self._blocks = ([b.lo for b in merged], merged)

    def prune(self) -> None:
        """Forget blocks with nothing outstanding."""
        if any(not b.live for b in self._blocks[1]):
            kept = [b for b in self._blocks[1] if b.live]
            self._blocks = ([b.lo for b in kept], kept)

    def block_of(self, offset: int) -> Block | None:
        """The block whose outstanding offsets hold ``offset``."""
        los, blocks = self._blocks
        i = bisect_right(los, offset) - 1
        if i >= 0:
            block = blocks[i]
            if offset in block.live:
                return block
        return None

    def block_hits(self, ordered: list[int]) -> dict[int, set[int]]:
        """Of message offsets ``ordered`` (ascending), the ones outstanding in each
        block, by block id. Blocks' ranges do not overlap (each leases offsets read
        past the frontier, which then moves past them; a seek, which moves it back,
        first empties every block), so each offset is looked up in one block only."""
        los, blocks = self._blocks
        if not ordered or not blocks:
            return {}
        found: dict[int, set[int]] = {}
        at, end = 0, len(ordered)
        for block in blocks[max(bisect_right(los, ordered[0]) - 1, 0) :]:
            if block.lo > ordered[-1]:
                break
            first = bisect_left(ordered, block.lo, at, end)
            at = bisect_left(ordered, block.hi, first, end)
            if at > first:
                hit = block.live.intersection(ordered[first:at])
                if hit:
                    found[block.id] = hit
        return found

    def discard_hits(self, hits: dict[int, set[int]]) -> set[int]:
        """Take ``block_hits``' offsets out of their blocks; the ids of the blocks
        changed."""
        changed = set()
        if hits:
            for block in self._blocks[1]:
                gone = hits.get(block.id)
                if gone is not None and not block.live.isdisjoint(gone):
                    block.live -= gone
                    changed.add(block.id)
        return changed

    def apply(self, changed: dict[Key, Row | None]) -> set[int]:
        """Apply a plan's single-row changes (None: delete); the ids of the blocks
        that lost a row to them."""
        touched = set()
        single = self.single
        for key, row in changed.items():
            if key[0] == MESSAGE and self._blocks[1]:
                block = self.block_of(key[1])
                if block is not None:
                    block.live.discard(key[1])
                    touched.add(block.id)
            if row is None:
                single.pop(key, None)
            else:
                single[key] = row
        return touched

    def copy(self) -> LeaseRows:
        return LeaseRows(dict(self.single), [b.copy() for b in self._blocks[1]])

    def block_count(self) -> int:
        """Rows held in blocks."""
        return sum(len(b.live) for b in self._blocks[1])

    def earliest_block_deadline(self, default: int) -> int:
        return min((b.deadline_us for b in self._blocks[1] if b.live), default=default)

    def min_block_offset(self, default: int) -> int:
        return min((min(b.live) for b in self._blocks[1] if b.live), default=default)

    # -- the mapping --------------------------------------------------------------------

    def get(self, key: Key, default: Row | None = None) -> Row | None:  # type: ignore[override]
        row = self.single.get(key)
        if row is not None:
            return row
        if key[0] == MESSAGE and self._blocks[1]:
            block = self.block_of(key[1])
            if block is not None:
                return block.row(key[1])
        return default

    def __getitem__(self, key: Key) -> Row:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        if key in self.single:
            return True
        return (
            isinstance(key, tuple)
            and key[0] == MESSAGE
            and bool(self._blocks[1])
            and self.block_of(key[1]) is not None
        )

    def __iter__(self) -> Iterator[Key]:
        yield from list(self.single)
        for block in self._blocks[1]:
            for offset in sorted(block.live):
                yield (MESSAGE, offset)

    def __len__(self) -> int:
        return len(self.single) + self.block_count()

    def __setitem__(self, key: Key, row: Row) -> None:
        self.apply({key: row})

    def __delitem__(self, key: Key) -> None:
        if key not in self:
            raise KeyError(key)
        self.apply({key: None})

    def __repr__(self) -> str:
        return f"LeaseRows({dict(self.items())!r})"
