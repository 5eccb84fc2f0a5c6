"""The console's sampler: every few seconds, what each topic and subscription looks
like in the lake, kept in bounded rings for the last hour's charts.

It reads the lake, not this process's counters, so the charts show every
process's traffic on the lake. One thread, started by the first console request
and stopped after ``IDLE_STOP_S`` without one; a table that did not move since
the last sample costs one stat (``api/console/tables.py``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from api.console.maintenance import JobCommits, Seen, read_runs
from api.console.tables import (
    Footprint,
    LeaseReader,
    Reads,
    TopicReader,
    Truncation,
    TruncationLog,
    footprint,
    leases_out,
)
from lakepubsub import Engine, errors
from lakepubsub._lake import TableLog, table_schemas
from lakepubsub._lake.meter import METER
from lakepubsub.delivery.leases import LeaseState
from lakepubsub.resources import catalog as cat

log = logging.getLogger(__name__)

# Charts cover this much history.
WINDOW_S = 3600.0
# How often the lake is sampled (LAKEPUBSUB_CONSOLE_SAMPLE_S overrides it).
SAMPLE_INTERVAL_S = 5.0
# Sampling stops this long after the last console request (charts then have a gap).
IDLE_STOP_S = 3600.0
# Rates are averaged over this much of the newest history.
RATE_WINDOW_S = 60.0
# Files one sample may read for message sizes (about 0.5 ms each locally); a backlog
# in files not read yet counts their rows at the mean message size read so far.
SIZE_READS_PER_SAMPLE = 40
# Commit files one sample may read looking back for the jobs' commits (about 50 us
# each locally, a GET on S3), over all tables (api/console/maintenance.py).
COMMIT_READS_PER_SAMPLE = 200
# The jobs' run records are read at most this often on S3 (3 GETs), every sample locally.
JOB_RUNS_READ_S = 60.0
# The series of this process's S3 requests (lakepubsub/_lake/meter.py).
S3 = "s3"
# The catalog may be this stale for a sample.
CATALOG_MAX_STALENESS_S = 1.0


@dataclass(frozen=True, slots=True)
class TopicPoint:
    t: float  # wall-clock seconds
    head: int


@dataclass(frozen=True, slots=True)
class SubscriptionPoint:
    t: float
    backlog: int  # unacknowledged messages
    backlog_bytes: int
    oldest_unacked_s: float  # age of the oldest unacknowledged message; 0 without backlog
    deliveries: int  # deliveries handed out so far (the cursor's delivery counter)
    leases_out: int


@dataclass(frozen=True, slots=True)
class MeterPoint:
    t: float
    requests: int  # this process's S3 requests through boto3 so far
    cost_usd: float  # what they cost at list prices


@dataclass
class Series:
    """One resource incarnation's samples, oldest first, and its table's size."""

    points: deque[TopicPoint | SubscriptionPoint | MeterPoint]
    size: Footprint | None = None
    state: LeaseState | None = None  # a subscription's newest lease state (never changed)
    jobs: Seen | None = None  # a topic's last compaction and message delete
    error: str = ""


# A rate needs two samples of a cumulative series.
_RATE_POINTS = 2


def rate(points: list[tuple[float, float]], window_s: float = RATE_WINDOW_S) -> float | None:
    """Per second, over the newest ``window_s`` of a cumulative series."""
    if len(points) < _RATE_POINTS:
        return None
    t1, v1 = points[-1]
    t0, v0 = next(((t, v) for t, v in points if t >= t1 - window_s), points[0])
    if t1 <= t0:
        t0, v0 = points[-2]
    return max(0.0, (v1 - v0) / (t1 - t0)) if t1 > t0 else None


def per_second(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A cumulative series as the rate between consecutive points."""
    return [
        (t1, max(0.0, (v1 - v0) / (t1 - t0)))
        for (t0, v0), (t1, v1) in itertools.pairwise(points)
        if t1 > t0
    ]


@dataclass(frozen=True, slots=True)
class _Backlog:
    """A subscription's backlog as of a lease-table version and a topic head."""

    version: int
    head: int
    messages: int
    bytes: int
    oldest_us: int | None  # publish time of the oldest unacknowledged message


@dataclass
class _Readers:
    topics: dict[str, TopicReader] = field(default_factory=dict)
    leases: dict[str, LeaseReader] = field(default_factory=dict)
    job_commits: dict[str, JobCommits] = field(default_factory=dict)
    catalog: TableLog | None = None
    truncations: TruncationLog | None = None
    backlogs: dict[str, _Backlog] = field(default_factory=dict)


class Sampler:
    """Samples the lake on a thread of its own; pages read ``series``."""

    def __init__(
        self,
        engine: Engine,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.capacity = max(2, int(WINDOW_S / interval_s) + 1)
        self._clock = clock
        self._lock = threading.Lock()
        self._series: dict[str, Series] = {}  # uid (or table name) -> samples
        self._readers = _Readers()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._last_request = 0.0
        self.samples = 0  # completed samples, for tests and the lake page
        self.last_sample_s = 0.0  # how long the last sample took
        self.last_sample_cpu_s = 0.0  # and the CPU time its thread used
        # Each job's last run (jobs/runs.py), replaced whole when read again.
        self.job_runs: dict[str, dict[str, Any]] = {}
        self._runs_read_at = float("-inf")

    # -- what pages read --------------------------------------------------------------------

    def series(self, uid: str) -> Series | None:
        with self._lock:
            return self._series.get(uid)

    def points(self, uid: str) -> list[TopicPoint | SubscriptionPoint | MeterPoint]:
        with self._lock:
            found = self._series.get(uid)
            return list(found.points) if found is not None else []

    def subscription_points(self, uid: str) -> list[SubscriptionPoint]:
        """The points of the subscription ``uid``, oldest first."""
        return [p for p in self.points(uid) if isinstance(p, SubscriptionPoint)]

    def touch(self) -> None:
        """A console request: start sampling if it is not running."""
        self._last_request = time.monotonic()
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=10)

    # -- sampling ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._last_request > IDLE_STOP_S:
                return
            started, cpu = time.monotonic(), time.thread_time()
            try:
                self.sample()
            except Exception:  # the next sample tries again; pages show the last one
                log.exception("console sample failed")
            self.last_sample_s = time.monotonic() - started
            self.last_sample_cpu_s = time.thread_time() - cpu
            self._stop.wait(max(0.0, self.interval_s - self.last_sample_s))

    def sample(self) -> None:
        """Read every topic's head and every subscription's backlog once."""
        view = self.engine.catalog.view(max_staleness_s=CATALOG_MAX_STALENESS_S)
        lake = self.engine.lake
        readers = self._readers
        now = self._clock()
        heads: dict[str, int] = {}
        topics = view.of_kind(cat.TOPIC)
        commit_reads = Reads(COMMIT_READS_PER_SAMPLE)
        for entry in topics:
            reader = readers.topics.get(entry.uid)
            try:
                if reader is None:
                    reader = readers.topics[entry.uid] = TopicReader(
                        lake, entry.uid, self.engine.intake
                    )
                reader.refresh()
                heads[entry.uid] = reader.head()
                commits = readers.job_commits.get(entry.uid)
                if commits is None:
                    commits = readers.job_commits[entry.uid] = JobCommits(lake, reader.log)
                commits.advance(commit_reads)
            except errors.LakePubSubError as exc:
                self._failed(entry.uid, exc)
                continue
            self._record(
                entry.uid, TopicPoint(now, heads[entry.uid]), reader.footprint(), jobs=commits.seen
            )
        subscriptions = view.of_kind(cat.SUBSCRIPTION)
        reads = Reads(SIZE_READS_PER_SAMPLE)
        for entry in subscriptions:
            topic = readers.topics.get(entry.topic_uid or "")
            head = heads.get(entry.topic_uid or "")
            if topic is None or head is None:
                continue
            leases = readers.leases.get(entry.uid)
            try:
                if leases is None:
                    leases = readers.leases[entry.uid] = LeaseReader(lake, entry.uid)
                state = leases.state()
                point, readers.backlogs[entry.uid] = _subscription_point(
                    now, state, topic, head, readers.backlogs.get(entry.uid), reads
                )
            except errors.LakePubSubError as exc:
                self._failed(entry.uid, exc)
                continue
            self._record(entry.uid, point, footprint(leases.log), state)
        self._sample_others()
        if lake.is_s3:
            reading = METER.reading()
            self._record(S3, MeterPoint(now, reading.total, reading.cost_usd))
        others = {"catalog", "truncations", S3}
        live = {e.uid for e in topics} | {e.uid for e in subscriptions} | others
        for uid in [u for u in readers.topics if u not in live]:
            del readers.topics[uid]
            readers.job_commits.pop(uid, None)
        for uid in [u for u in readers.leases if u not in live]:
            del readers.leases[uid]
            readers.backlogs.pop(uid, None)
        with self._lock:
            for uid in [u for u in self._series if u not in live]:
                del self._series[uid]
        self.samples += 1

    def _sample_others(self) -> None:
        """The catalog's size; the truncation log's size and its newest rows."""
        lake = self.engine.lake
        readers = self._readers
        try:
            if readers.catalog is None:
                readers.catalog = TableLog(lake, lake.catalog_uri)
            readers.catalog.tail()
            if readers.truncations is None and lake.exists(lake.truncations_uri):
                readers.truncations = TruncationLog(lake)
            if readers.truncations is not None:
                readers.truncations.refresh()
        except errors.LakePubSubError as exc:
            self._failed("catalog", exc)
            return
        if not lake.is_s3 or time.monotonic() - self._runs_read_at >= JOB_RUNS_READ_S:
            self._runs_read_at = time.monotonic()
            try:
                self.job_runs = read_runs(lake)
            except errors.LakePubSubError as exc:
                self._failed("jobs", exc)
        with self._lock:
            for name, log in (("catalog", readers.catalog), ("truncations", readers.truncations)):
                if log is not None:
                    table = log if isinstance(log, TableLog) else log.log
                    self._series.setdefault(name, Series(deque(maxlen=1))).size = footprint(table)

    def truncations(self, subscription_uid: str) -> list[Truncation]:
        """The truncation job's newest records of a subscription, oldest first."""
        log = self._readers.truncations
        return list(log.by_subscription.get(subscription_uid, ())) if log is not None else []

    def _record(
        self,
        uid: str,
        point: TopicPoint | SubscriptionPoint | MeterPoint,
        size: Footprint | None = None,
        state: LeaseState | None = None,
        *,
        jobs: Seen | None = None,
    ) -> None:
        with self._lock:
            series = self._series.get(uid)
            if series is None:
                series = self._series[uid] = Series(deque(maxlen=self.capacity))
            series.points.append(point)
            series.size = size
            series.state = state
            series.jobs = jobs
            series.error = ""

    def _failed(self, uid: str, exc: Exception) -> None:
        log.warning("console sample of %s failed: %s", uid, exc)
        with self._lock:
            series = self._series.setdefault(uid, Series(deque(maxlen=self.capacity)))
            series.error = str(exc)


def _subscription_point(
    now: float,
    state: LeaseState,
    topic: TopicReader,
    head: int,
    last: _Backlog | None,
    reads: Reads,
) -> tuple[SubscriptionPoint, _Backlog]:
    if last is not None and last.version == state.version and last.head == head:
        backlog = last  # nothing moved: no file is looked at again
    else:
        frontier = state.cursor.frontier
        outstanding = sorted(k[1] for k in state.rows if k[0] == table_schemas.KIND_MESSAGE)
        count = len(outstanding) + max(0, head - frontier)
        published_us = None
        if count:
            published_us = topic.publish_time_us(outstanding[0] if outstanding else frontier)
        size = topic.bytes_of(frontier, head, outstanding, reads) if count else 0
        backlog = _Backlog(state.version, head, count, size, published_us)
    oldest_s = 0.0
    if backlog.oldest_us is not None:
        oldest_s = max(0.0, now - backlog.oldest_us / 1e6)
    point = SubscriptionPoint(
        t=now,
        backlog=backlog.messages,
        backlog_bytes=backlog.bytes,
        oldest_unacked_s=oldest_s,
        deliveries=state.cursor.next_delivery - 1,
        leases_out=leases_out(state, int(now * 1e6)),
    )
    return point, backlog
