"""A subscription's lease table: its state at the latest version, and commits of a plan.

A commit is copy-on-write by file, as a MERGE would be, but written directly
(``TableLog``): the cursor row lives in a file of its own, rewritten by every
commit that changes it; rows a plan changed go to one new file, together with
the unchanged rows of the files they replace. A pull that leases 1,000 new
messages writes those 1,000 rows and the cursor; the ack that deletes them
writes no data file at all, only the commit that removes their file. When the
table would hold more than ``MAX_FILES`` files, a commit also folds the smallest
ones into its new file. The commit is a strict compare-and-swap on the version:
a plan made on a state that another writer has moved on fails and is redone.

Blocks of leases (``lakepubsub/delivery/lease_rows.py``) are tracked by file as
blocks, not by key: a file holds single rows and whole blocks, and a commit that
changes a block rewrites what is left of it, written from its columns.

A plan may also be *deferred* (``defer``): the state in memory moves on, and
the changes wait for the next commit, which writes them all relative to what
is stored. A lost race, or a reread after another writer's commit, drops what
was deferred (the dispatcher defers only what at-least-once may lose: a crash
or a takeover then redelivers).
"""

from __future__ import annotations

import time

import pyarrow as pa

from lakepubsub import metrics
from lakepubsub._lake import Lake, TableLog, storage_errors, table_schemas
from lakepubsub.delivery.leases import CURSOR_KEY, Block, Cursor, Key, LeaseState, Row, to_arrow
from lakepubsub.delivery.planner import Planner

# Files a lease table may hold before a commit folds its smallest files into the
# new one, leaving half as many: reading the state after another writer's commit
# reads every file (about 0.3 ms each locally). Folding only the smallest files
# keeps a commit's cost near the rows it changed: with a StreamingPull window of
# 10,000 messages (ten files of 1,000 leases), rewriting everything at 8 files
# made every commit copy all 10,000 rows (2,800 deliveries/s at engine level).
MAX_FILES = 32
# A changed cursor shares the file of at most this many written rows (``commit``).
CURSOR_WITH_ROWS_MAX = 256


class LeaseTable:
    """One process's handle on one subscription's lease table. Not thread-safe."""

    def __init__(self, lake: Lake, subscription_uid: str) -> None:
        self.uri = lake.leases_uri(subscription_uid)
        self._lake = lake
        self._log = TableLog(lake, self.uri)
        self._state: LeaseState | None = None
        # Where each stored single row and each stored block is (blocks by id).
        self._file_of: dict[Key, str] = {}
        self._keys_in: dict[str, set[Key]] = {}
        self._block_file: dict[int, str] = {}
        self._blocks_in: dict[str, set[int]] = {}
        # Deferred changes: single rows changed since the stored version (None:
        # deleted), blocks made or changed, how many rows those changes touched,
        # whether the cursor changed, and since when (time.monotonic()).
        self._pending: dict[Key, Row | None] = {}
        self._pending_blocks: set[int] = set()
        self._pending_block_rows = 0
        self._pending_cursor = False
        self.pending_since: float | None = None
        self._stored_cursor: Cursor | None = None

    @property
    def version(self) -> int:
        return self._log.version

    @property
    def cached(self) -> LeaseState | None:
        """The state as last read or committed here, without looking at storage."""
        return self._state

    def state(self, *, look: bool = True) -> LeaseState:
        """The state at the latest version; files are read only after others' commits.
        ``look=False``: the state as known here, without asking storage for commits
        by others (a commit then fails its compare-and-swap if there were some)."""
        if look or self._state is None:
            self._log.tail()
        if self._state is None or self._state.version != self._log.version:
            self._read()
        assert self._state is not None
        return self._state

    def _read(self) -> None:
        file_of: dict[Key, str] = {}
        keys_in: dict[str, set[Key]] = {}
        parts = []
        with storage_errors(self.uri):
            for path in self._log.files:
                rows = self._log.parquet(path).read()
                keys = set(zip(rows["kind"].to_pylist(), rows["offset"].to_pylist(), strict=True))
                keys_in[path] = keys
                file_of.update((key, path) for key in keys)
                parts.append(rows.select(table_schemas.LEASES.names).cast(table_schemas.LEASES))
        table = pa.concat_tables(parts) if parts else table_schemas.empty_leases()
        self._state = LeaseState.from_arrow(table, self._log.version)
        self._file_of, self._keys_in = file_of, keys_in
        self._block_file, self._blocks_in = {}, {}
        self._stored_cursor = self._state.cursor
        self._drop_pending()

    @property
    def pending(self) -> int:
        """Deferred row changes (and 1 for a deferred cursor change)."""
        return len(self._pending) + self._pending_block_rows + int(self._pending_cursor)

    def _drop_pending(self) -> None:
        self._pending, self._pending_cursor, self.pending_since = {}, False, None
        self._pending_blocks, self._pending_block_rows = set(), 0

    def defer(self, planner: Planner) -> LeaseState:
        """Take ``planner``'s changes into the state in memory, to be written by the
        next ``commit``."""
        assert self._state is not None and planner.state is self._state
        if self.pending_since is None:
            self.pending_since = time.monotonic()
        changed = planner.changed
        self._pending.update(changed)
        self._pending_cursor = self._pending_cursor or planner.cursor_changed
        # The plan's changes go into the rows in place, not into a copy of them: a
        # copy of every outstanding row each cycle (10,000 in a StreamingPull window)
        # was about 5 % of a drain's CPU. The state the plan was made on is the one
        # changed (it is superseded: nothing plans on it again), and a reader on
        # another thread (``CycleTables.leaves_leases``) sees each row before or
        # after its change. The plan's new blocks are taken as they are.
        parent = self._state
        rows = parent.rows
        blocks = planner.new_blocks
        rows.add_blocks(blocks)
        touched = rows.discard_hits(planner.removed_from) | rows.apply(changed)
        rows.prune()
        self._pending_blocks |= touched | {b.id for b in blocks}
        self._pending_block_rows += len(planner.removed) + sum(len(b.offsets) for b in blocks)
        self._state = LeaseState(parent.version, planner.cursor, rows)
        self._state.inherit_due(parent.due_bound(), changed.values(), blocks)
        return self._state

    def commit(self, planner: Planner) -> LeaseState:
        """Commit ``planner``'s changes on top of the state it was made from.

        Raises ``CommitFailedError`` if the table moved since; nothing is changed then.
        """
        assert self._state is not None and planner.state is self._state
        log = self._log
        started = time.perf_counter()
        result, planned_blocks = planner.result_and_blocks(log.version)
        changed = set(planner.changed) | set(self._pending)
        changed_blocks = planned_blocks | self._pending_blocks
        live = result.rows
        # An unchanged cursor stays in its file: an ack that deletes a file's rows
        # commits only the file's removal.
        cursor_file = self._file_of.get(CURSOR_KEY)
        rewrite_cursor = planner.cursor_changed or self._pending_cursor or cursor_file is None
        touched = {self._file_of[k] for k in changed if k in self._file_of}
        touched |= {self._block_file[b] for b in changed_blocks if b in self._block_file}
        if rewrite_cursor and cursor_file is not None:
            touched.add(cursor_file)
        if len(log.files) - len(touched) + 2 > MAX_FILES:
            smallest = sorted(
                (p for p in log.files if p not in touched),
                key=lambda p: log.files[p].rows,  # its add action's numRecords
            )
            touched |= set(smallest[: len(log.files) - len(touched) + 2 - MAX_FILES // 2])
        if (
            not touched
            and not any(k in live.single for k in changed)
            and not any(b.id in changed_blocks for b in live.blocks)
        ):
            # Nothing stored changes (rows made and dropped within the plan), but a
            # commit must carry an action: it rewrites the cursor.
            rewrite_cursor = True
            if cursor_file is not None:
                touched.add(cursor_file)
        # A file that goes takes the cursor row with it, should it hold it (folded, or
        # compacted with rows by another writer): the cursor is written anew.
        rewrite_cursor = rewrite_cursor or cursor_file in touched
        carried = set().union(*(self._keys_in.get(p, ()) for p in touched)) if touched else set()
        carried_blocks = set().union(*(self._blocks_in.get(p, ()) for p in touched))
        # Keys are (kind, offset) tuples: sorting them is a C comparison, where
        # sorting the rows by a key function costs a Python call per row.
        single = live.single
        keys = sorted(k for k in (carried | changed) - {CURSOR_KEY} if k in single)
        rows = [single[k] for k in keys]
        blocks = [b for b in live.blocks if b.id in changed_blocks or b.id in carried_blocks]
        stored_cursor = self._stored_cursor or self._state.cursor
        cursor = result.cursor if rewrite_cursor else stored_cursor
        # A changed cursor goes into a small rows' file: a file (a PUT on S3) less.
        # That file is rewritten with the next cursor change, carrying its rows, so
        # a large one (a drain's blocks) leaves the cursor a file of its own.
        written = len(rows) + sum(len(b.live) for b in blocks)
        with_rows = rewrite_cursor and 0 < written <= CURSOR_WITH_ROWS_MAX
        rows_add = cursor_add = None
        if rows or blocks:
            rows_add = log.write_file(_rows_table(rows, blocks, cursor if with_rows else None))
        if rewrite_cursor and not with_rows:
            cursor_add = log.write_file(to_arrow([], cursor))
        adds = [a for a in (cursor_add, rows_add) if a is not None]
        version = log.commit(
            [*adds, *(log.remove(p) for p in sorted(touched))],
            operation="MERGE",
            parameters={"predicate": "kind, offset"},
            blind_append=False,
        )
        metrics.COMMITS.labels("leases").inc()
        metrics.COMMIT_SECONDS.labels("leases").observe(time.perf_counter() - started)
        metrics.ROWS_PER_COMMIT.labels("leases").observe(written + int(rewrite_cursor))
        self._track(touched, cursor_add, rows_add, keys, blocks, with_rows)
        self._state = LeaseState(version, cursor, result.rows)
        self._state.inherit_due(result.due_bound())
        self._stored_cursor = cursor
        self._drop_pending()
        return self._state

    def _track(
        self,
        removed: set[str],
        cursor_add: dict[str, dict[str, str]] | None,
        rows_add: dict[str, dict[str, str]] | None,
        keys: list[Key],
        blocks: list[Block],
        cursor_in_rows: bool,
    ) -> None:
        written = set(keys)
        block_ids = {b.id for b in blocks}
        for path in removed:
            # Keys and blocks rewritten into the new file are repointed below; only the
            # rest go.
            for key in self._keys_in.pop(path, set()) - written:
                if self._file_of.get(key) == path:
                    del self._file_of[key]
            for block in self._blocks_in.pop(path, set()) - block_ids:
                if self._block_file.get(block) == path:
                    del self._block_file[block]
        if cursor_add is not None:
            cursor_path = cursor_add["add"]["path"]
            self._keys_in[cursor_path] = {CURSOR_KEY}
            self._file_of[CURSOR_KEY] = cursor_path
        if rows_add is not None:
            path = rows_add["add"]["path"]
            self._keys_in[path] = written | {CURSOR_KEY} if cursor_in_rows else written
            self._file_of.update(dict.fromkeys(keys, path))
            if cursor_in_rows:
                self._file_of[CURSOR_KEY] = path
            self._blocks_in[path] = block_ids
            self._block_file.update(dict.fromkeys(block_ids, path))


def _rows_table(rows: list[Row], blocks: list[Block], cursor: Cursor | None) -> pa.Table:
    """Single rows, blocks' live rows and the cursor row (if given), as one table in
    the lease-table schema."""
    parts = [b.to_arrow() for b in blocks]
    if rows or cursor is not None or not parts:
        parts.insert(0, to_arrow(rows, cursor))
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
