"""The rows as a plan reads them: a ``LeaseState`` (``lakepubsub/delivery/leases.py``)
with the plan's changes, which leave the state as it is (``Planner`` builds on this).

A plan changes rows three ways: single rows set or deleted (``changed``), new
blocks of leases (``new_blocks``, ``lakepubsub/delivery/lease_rows.py``), and
message offsets an ack took out of blocks in bulk (``removed``, and by block in
``removed_from``). A key is in at most one of ``changed`` and ``removed``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import repeat

from lakepubsub._lake import table_schemas
from lakepubsub.delivery.ackids import AckId, MessageIds
from lakepubsub.delivery.lease_rows import Block, Key, LeaseRows, Row
from lakepubsub.delivery.leases import LeaseState

MESSAGE = table_schemas.KIND_MESSAGE


class PlannedRows:
    """A state and a plan's changes to it, read together."""

    def __init__(self, state: LeaseState) -> None:
        self.state = state
        self.changed: dict[Key, Row | None] = {}  # None: delete
        self.new_blocks: list[Block] = []
        self.removed: set[int] = set()  # message offsets acknowledged out of blocks
        self.removed_from: dict[int, set[int]] = {}  # the same, by block id

    def row(self, key: Key) -> Row | None:
        if key in self.changed:
            return self.changed[key]
        if key[0] == MESSAGE:
            offset = key[1]
            if offset in self.removed:
                return None
            for block in self.new_blocks:
                if block.lo <= offset < block.hi and offset in block.live:
                    return block.row(offset)
        return self.state.rows.get(key)

    def keys(self) -> Iterator[Key]:
        """Every key that may have a row (``row`` says whether it does)."""
        yield from list(self.state.rows)
        yield from list(self.changed)
        for block in self.new_blocks:
            for offset in sorted(block.live):
                yield (MESSAGE, offset)

    def result_rows(self) -> tuple[LeaseRows, set[int]]:
        """The rows with this plan's changes applied (a copy), and the ids of the
        blocks the plan made or changed."""
        rows = self.state.rows.copy()
        rows.add_blocks(b.copy() for b in self.new_blocks)
        touched = rows.discard_hits(self.removed_from) | rows.apply(self.changed)
        rows.prune()
        return rows, touched | {b.id for b in self.new_blocks}

    def single_rows(self) -> dict[Key, Row]:
        """The single rows (not in blocks) with this plan's changes applied. Blocks hold
        no ordering key, so this is every row an ordering key concerns."""
        rows = dict(self.state.rows.single)
        for key, new in self.changed.items():
            if new is None:
                rows.pop(key, None)
            else:
                rows[key] = new
        return rows

    def block_rows_due(self, backoff_us: int, now_us: int) -> list[Row]:
        """Rows of blocks, as this plan reads them, whose leases ran out by ``now_us``
        with ``backoff_us`` (the back-off after a first attempt) after that."""
        due = []
        changed = self.changed
        for block in [*self.state.rows.blocks, *self.new_blocks]:
            if block.deadline_us + backoff_us <= now_us:
                offsets = sorted(block.live - self.removed)
                due += [block.row(o) for o in offsets if (MESSAGE, o) not in changed]
        return due

    def outstanding(self) -> int:
        """Messages outstanding (not acknowledged, below the frontier) with this plan's
        changes applied."""
        count = self.state.outstanding() - len(self.removed)
        count += sum(len(b.live) for b in self.new_blocks)
        for key, new in self.changed.items():
            if key[0] == MESSAGE:
                before = key in self.state.rows or any(key[1] in b.live for b in self.new_blocks)
                if before != (new is not None):
                    count += -1 if new is None else 1
        return count

    def settle(self, tag: str, ack_ids: Sequence[AckId]) -> None:
        """Acknowledge without exactly-once, where any ack of a message settles it:
        per id, one lookup in the plan's changes or the state, with no method or
        property call (every delivered message comes here once). Message ids parsed
        in bulk (``MessageIds``) go by set operations, in C: out of their blocks,
        and by their keys for single rows."""
        changed = self.changed
        if isinstance(ack_ids, MessageIds):
            if ack_ids.tag != tag:
                return
            ordered = sorted(ack_ids.offsets)
            hits = self.state.rows.block_hits(ordered)
            for block in self.new_blocks:
                if new := block.live.intersection(ordered):
                    hits[block.id] = new
            for block_id, hit in hits.items():
                self.removed_from.setdefault(block_id, set()).update(hit)
            hit = set().union(*hits.values())
            if changed:  # a block's row this plan changed on its own is a single row
                moved = {k[1] for k in changed if k[0] == MESSAGE} & hit
                for offset in moved:
                    changed[(MESSAGE, offset)] = None
                hit -= moved
            self.removed |= hit
            if len(hit) == len(ordered):  # each id once, every one out in a block
                return
            # Not ``-=``: that walks all of ``removed``, which grows with every ack
            # of the plan; ``-`` walks the smaller side.
            offsets = set(ordered) - hit - self.removed
            if not offsets:
                return
            keys = set(zip(repeat(MESSAGE), offsets))
            planned = keys & changed.keys()
            for key in planned:
                if changed[key] is not None:
                    changed[key] = None
            changed.update(dict.fromkeys((keys - planned) & self.state.rows.single.keys()))
            return
        for ack in ack_ids:
            if ack[0] != tag:
                continue
            key = (ack[1], ack[2])
            if key in changed:
                if changed[key] is not None:
                    changed[key] = None
            elif self.row(key) is not None:  # in the state, or a block of this plan's
                changed[key] = None
