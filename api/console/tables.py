"""What the console reads from the lake, table by table, for the sampler.

Each reader keeps its table's log (``TableLog``) between samples, so a table
that did not move costs one stat (one GET on S3) per sample. Files are
immutable: what is read from one (its offsets and message sizes, for backlog
bytes) is kept until the file leaves the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakepubsub import schemas
from lakepubsub._lake import Lake, TableLog, storage_errors
from lakepubsub.leases import LEASED, LeaseState
from lakepubsub.messages import TruncationEvent

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


class TopicReader:
    """A topic's messages table: its head, and the sizes of messages in it. One thread."""

    def __init__(self, lake: Lake, topic_uid: str) -> None:
        self.log = TableLog(lake, lake.messages_uri(topic_uid), tracked=("offset", "publish_time"))
        # path -> (offsets, sizes), sorted by offset: read once per file.
        self._sizes: dict[str, tuple[pa.Array, pa.Array]] = {}
        self._published: dict[int, int] = {}  # offset -> publish time (oldest unacked)

    def refresh(self) -> None:
        self.log.tail()
        live = self.log.files
        for path in [p for p in self._sizes if p not in live]:
            del self._sizes[path]

    def head(self) -> int:
        """One past the highest offset in the table (0 when empty)."""
        return 1 + max((f.maxs.get("offset", -1) for f in self.log.files.values()), default=-1)

    def bytes_of(self, lo: int, hi: int, offsets: list[int]) -> int:
        """Total size of the messages with ``lo <= offset < hi`` or in ``offsets``."""
        low = min([lo, *offsets]) if offsets else lo
        if hi <= low:
            return 0
        wanted = pa.array(offsets, pa.int64())
        total = 0
        for f in self.log.files.values():
            first, last = f.mins.get("offset"), f.maxs.get("offset")
            if first is None or last is None or last < low or first >= hi:
                continue
            offs, sizes = self._read_sizes(f.path)
            in_range = pc.and_(pc.greater_equal(offs, lo), pc.less(offs, hi))
            mask = pc.or_(in_range, pc.is_in(offs, value_set=wanted)) if offsets else in_range
            total += pc.sum(pc.filter(sizes, mask)).as_py() or 0
        return total

    def publish_time_us(self, offset: int) -> int | None:
        """When the message at ``offset`` was published, if the table still holds it."""
        known = self._published.get(offset)
        if known is not None:
            return known
        if len(self._published) >= PUBLISHED_CACHE:
            self._published.clear()
        for f in self.log.files.values():
            if f.mins.get("offset", offset + 1) <= offset <= f.maxs.get("offset", -1):
                with storage_errors(self.log.uri):
                    rows = pq.read_table(
                        self.log.open_file(f.path),
                        columns=["publish_time"],
                        filters=[("offset", "=", offset)],
                    )
                if rows.num_rows:
                    found = int(rows["publish_time"].cast(pa.int64())[0].as_py())
                    self._published[offset] = found
                    return found
        return None

    def _read_sizes(self, path: str) -> tuple[pa.Array, pa.Array]:
        found = self._sizes.get(path)
        if found is None:
            with storage_errors(self.log.uri):
                rows = pq.read_table(self.log.open_file(path), columns=["offset", "size"])
            found = (
                rows["offset"].combine_chunks().cast(pa.int64()),
                rows["size"].combine_chunks().cast(pa.int64()),
            )
            self._sizes[path] = found
        return found


class LeaseReader:
    """A subscription's lease table, read again only when it moved. One thread."""

    def __init__(self, lake: Lake, subscription_uid: str) -> None:
        self.log = TableLog(lake, lake.leases_uri(subscription_uid))
        self._state: LeaseState | None = None

    def state(self) -> LeaseState:
        self.log.tail()
        if self._state is None or self._state.version != self.log.version:
            parts = []
            with storage_errors(self.log.uri):
                for path in self.log.files:
                    rows = pq.read_table(self.log.open_file(path))
                    parts.append(rows.select(schemas.LEASES.names).cast(schemas.LEASES))
            table = pa.concat_tables(parts) if parts else schemas.LEASES.empty_table()
            self._state = LeaseState.from_arrow(table, self.log.version)
        return self._state


def leases_out(state: LeaseState, now_us: int) -> int:
    """Messages out for delivery now (leased, deadline not passed)."""
    return sum(
        1
        for (kind, _), row in state.rows.items()
        if kind == schemas.KIND_MESSAGE and row.state == LEASED and row.deadline_us > now_us
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
                rows = pq.read_table(self.log.open_file(f.path))
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
        if kind == schemas.KIND_EVENT and row.event:
            event = TruncationEvent.from_json(orjson.loads(row.event))
            out.append(
                Truncation(
                    event.time_us, event.reason, event.first_offset, event.end_offset, None, None
                )
            )
    return out
