"""What the console reads from the lake, table by table, for the sampler.

Each reader keeps its table's log (``TableLog``) between samples, so a table
that did not move costs one stat (one GET on S3) per sample. Files are
immutable: what is read from one (its offsets and message sizes, for backlog
bytes) is kept until the file leaves the table.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import NamedTuple

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from lakepubsub._lake import Lake, TableLog, storage_errors, table_schemas
from lakepubsub.delivery.leases import LEASED, LeaseState
from lakepubsub.messages import TruncationEvent
from lakepubsub.publish.messages_table import Overlay

# Truncations the console keeps per subscription from the truncation log.
KEEP_TRUNCATIONS = 20
# Publish times kept per topic (one per subscription's oldest unacknowledged offset).
PUBLISHED_CACHE = 1024


@dataclass(frozen=True, slots=True)
class Footprint:
    """A table's size at one version."""

    version: int
    files: int
    bytes: int


def footprint(log: TableLog) -> Footprint:
    return Footprint(log.version, len(log.files), sum(f.size for f in log.files.values()))


class Reads:
    """How many objects one sample may still read for one purpose (message sizes,
    commits looked back through)."""

    def __init__(self, files: int) -> None:
        self.left = files


class _File(NamedTuple):
    lo: int  # lowest offset
    hi: int  # highest offset
    rows: int
    path: str


class TopicReader:
    """A topic's messages table: its head, its size, and the sizes of messages in it.

    Files are indexed by offset as the log adds them (rebuilt when files are
    removed); a file's message sizes are read once, only when a backlog needs
    them. One thread.
    """

    def __init__(self, lake: Lake, topic_uid: str, intake: Overlay | None = None) -> None:
        self.log = TableLog(lake, lake.messages_uri(topic_uid), tracked=("offset", "publish_time"))
        self.topic_uid = topic_uid
        self._intake = intake  # the topic's newest messages may be there (S3)
        self._files: list[_File] = []  # by lowest offset
        self._los: list[int] = []
        self._indexed = 0
        self._generation = -1
        self._head = 0
        self._bytes = 0
        # path -> sizes in offset order (files hold contiguous offsets), read once.
        self._sizes: dict[str, list[int]] = {}
        self._totals: dict[str, int] = {}
        self._read_rows = 0  # over the files read: for the mean size of unread ones
        self._read_bytes = 0
        self._published: dict[int, int] = {}  # offset -> publish time (oldest unacked)

    def refresh(self) -> None:
        log = self.log
        log.tail()
        if self._generation != log.generation:  # files were removed: index again
            self._generation, self._indexed = log.generation, 0
            self._files, self._los, self._head, self._bytes = [], [], 0, 0
            live = log.files
            for path in [p for p in self._sizes if p not in live]:
                del self._sizes[path]
                del self._totals[path]
        fresh = log.added[self._indexed :]
        self._indexed = len(log.added)
        added = [
            _File(f.mins["offset"], f.maxs["offset"], f.rows, f.path)
            for f in fresh
            if f.rows and "offset" in f.mins and "offset" in f.maxs
        ]
        self._bytes += sum(f.size for f in fresh)
        if not added:
            return
        if (self._los and added[0].lo < self._los[-1]) or added != sorted(added):
            added = sorted(self._files + added)
            self._files, self._los = [], []
        for f in added:
            self._files.append(f)
            self._los.append(f.lo)
            self._head = max(self._head, f.hi + 1)

    def head(self) -> int:
        """One past the highest offset in the table or the intake (0 when empty)."""
        if self._intake is not None:
            return max(self._head, self._intake.next_offset(self.topic_uid))
        return self._head

    def footprint(self) -> Footprint:
        return Footprint(self.log.version, len(self.log.files), self._bytes)

    def bytes_of(self, lo: int, hi: int, offsets: list[int], reads: Reads) -> int:
        """Total size of the messages with ``lo <= offset < hi`` or in ``offsets``
        (sorted, below ``lo``). Exact for files whose sizes were read; ``reads`` caps
        the files read now, and the rest count their rows at the mean size so far."""
        total = 0
        i = max(0, bisect.bisect_right(self._los, lo) - 1)
        while i < len(self._files) and self._files[i].lo < hi:
            f = self._files[i]
            i += 1
            if f.hi < lo:
                continue
            first, last = max(lo, f.lo), min(hi - 1, f.hi)
            sizes = self._file_sizes(f, reads)
            if sizes is None:
                total += round((last - first + 1) * self._mean_size(f))
            elif first == f.lo and last == f.hi:
                total += self._totals[f.path]
            else:
                total += sum(sizes[first - f.lo : last - f.lo + 1])
        if self._intake is not None:  # what is past the table's head is in the intake
            total += self._intake_bytes(lo, hi, [o for o in offsets if o >= self._head])
        for offset in offsets:
            j = bisect.bisect_right(self._los, offset) - 1
            if j < 0 or self._files[j].hi < offset:
                continue  # no longer stored
            f = self._files[j]
            sizes = self._file_sizes(f, reads)
            total += round(self._mean_size(f)) if sizes is None else sizes[offset - f.lo]
        return total

    def _intake_bytes(self, lo: int, hi: int, offsets: list[int]) -> int:
        assert self._intake is not None
        start = min([max(lo, self._head), *offsets])
        if start >= hi and not offsets:
            return 0
        rows = self._intake.read(self.topic_uid, start, max(hi, offsets[-1] + 1 if offsets else hi))
        wanted = pc.or_(
            pc.and_(pc.greater_equal(rows["offset"], lo), pc.less(rows["offset"], hi)),
            pc.is_in(rows["offset"], value_set=pa.array(offsets, pa.int64())),
        )
        return int(pc.sum(rows.filter(wanted)["size"]).as_py() or 0)

    def _mean_size(self, f: _File) -> float:
        if self._read_rows:
            return self._read_bytes / self._read_rows
        stored = self.log.files.get(f.path)
        return stored.size / f.rows if stored is not None else 0.0

    def _file_sizes(self, f: _File, reads: Reads) -> list[int] | None:
        found = self._sizes.get(f.path)
        if found is not None or reads.left <= 0:
            return found
        reads.left -= 1
        with storage_errors(self.log.uri):
            rows = self.log.parquet(f.path).read(columns=["offset", "size"])
        offsets: list[int] = rows["offset"].to_pylist()
        sizes: list[int] = rows["size"].to_pylist()
        if offsets != list(range(f.lo, f.hi + 1)):  # not contiguous: place each by offset
            by_offset = dict(zip(offsets, sizes, strict=True))
            sizes = [by_offset.get(o, 0) for o in range(f.lo, f.hi + 1)]
        self._sizes[f.path] = sizes
        self._totals[f.path] = sum(sizes)
        self._read_rows += len(sizes)
        self._read_bytes += self._totals[f.path]
        return sizes

    def publish_time_us(self, offset: int) -> int | None:
        """When the message at ``offset`` was published, if the table still holds it."""
        known = self._published.get(offset)
        if known is not None:
            return known
        if len(self._published) >= PUBLISHED_CACHE:
            self._published.clear()
        j = bisect.bisect_right(self._los, offset) - 1
        if j < 0 or self._files[j].hi < offset:
            return None
        with storage_errors(self.log.uri):
            rows = self.log.parquet(self._files[j].path).read(columns=["offset", "publish_time"])
        rows = rows.filter(pc.equal(rows["offset"], offset))
        if not rows.num_rows:
            return None
        found = int(rows["publish_time"].cast(pa.int64())[0].as_py())
        self._published[offset] = found
        return found


class LeaseReader:
    """A subscription's lease table, read again only when it moved, and then only the
    files added since (a commit adds one or two and removes those it replaced).
    One thread."""

    def __init__(self, lake: Lake, subscription_uid: str) -> None:
        self.log = TableLog(lake, lake.leases_uri(subscription_uid))
        self._state: LeaseState | None = None
        self._files: dict[str, pa.Table] = {}

    def state(self) -> LeaseState:
        self.log.tail()
        if self._state is None or self._state.version != self.log.version:
            live = self.log.files
            self._files = {p: t for p, t in self._files.items() if p in live}
            with storage_errors(self.log.uri):
                for path in live:
                    if path not in self._files:
                        rows = self.log.parquet(path).read()
                        self._files[path] = rows.select(table_schemas.LEASES.names).cast(
                            table_schemas.LEASES
                        )
            parts = list(self._files.values())
            table = pa.concat_tables(parts) if parts else table_schemas.empty_leases()
            self._state = LeaseState.from_arrow(table, self.log.version)
        return self._state


def leases_out(state: LeaseState, now_us: int) -> int:
    """Messages out for delivery now (leased, deadline not passed)."""
    return sum(
        1
        for (kind, _), row in state.rows.items()
        if kind == table_schemas.KIND_MESSAGE and row.state == LEASED and row.deadline_us > now_us
    )


@dataclass(frozen=True, slots=True)
class Truncation:
    """One truncation of a subscription's backlog, as the console lists it."""

    time_us: int
    reason: str
    first_offset: int
    end_offset: int
    messages: int | None  # dropped; None when not recorded (an event still pending)
    bytes: int | None


class TruncationLog:
    """The truncation job's log (``truncations``), read file by file as it grows,
    keeping the newest ``KEEP_TRUNCATIONS`` rows per subscription. One thread."""

    def __init__(self, lake: Lake) -> None:
        self.log = TableLog(lake, lake.truncations_uri)
        self._generation = -1
        self._read = 0
        # Replaced whole on every change, so another thread may read it at any time.
        self.by_subscription: dict[str, list[Truncation]] = {}

    def refresh(self) -> None:
        self.log.tail()
        if self._generation != self.log.generation:  # files removed (compaction): reread
            self._generation, self._read, self.by_subscription = self.log.generation, 0, {}
        fresh = self.log.added[self._read :]
        if not fresh:
            return
        found = {uid: list(rows) for uid, rows in self.by_subscription.items()}
        with storage_errors(self.log.uri):
            for f in fresh:
                rows = self.log.parquet(f.path).read()
                columns = [
                    rows[name].to_pylist()
                    for name in ("subscription_uid", "reason", "first_offset", "end_offset")
                ]
                times = rows["time"].cast(pa.int64()).to_pylist()
                dropped = rows["messages_dropped"].to_pylist(), rows["bytes_dropped"].to_pylist()
                for i, uid in enumerate(columns[0]):
                    found.setdefault(uid, []).append(
                        Truncation(
                            times[i],
                            columns[1][i],
                            columns[2][i],
                            columns[3][i],
                            dropped[0][i],
                            dropped[1][i],
                        )
                    )
        for kept in found.values():
            kept.sort(key=lambda t: t.time_us)
            del kept[:-KEEP_TRUNCATIONS]
        self._read = len(self.log.added)
        self.by_subscription = found


def pending_events(state: LeaseState) -> list[Truncation]:
    """Truncation events a subscription holds for its next pulls (not acknowledged yet)."""
    out = []
    for (kind, _), row in sorted(state.rows.items()):
        if kind == table_schemas.KIND_EVENT and row.event:
            event = TruncationEvent.from_json(orjson.loads(row.event))
            out.append(
                Truncation(
                    event.time_us, event.reason, event.first_offset, event.end_offset, None, None
                )
            )
    return out
