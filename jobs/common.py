"""What every job shares: the lake, a lazily started Spark session, bounded retries, reports.

Nothing here starts Spark or touches storage at import time: the API image
imports the CLI, and ``lakepubsub jobs run gc`` needs no JVM.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlparse

import pyarrow as pa
from botocore.exceptions import ClientError
from deltalake import DeltaTable

from lakepubsub import errors
from lakepubsub._lake import Lake, storage_errors
from lakepubsub.engine import Engine
from lakepubsub.retry import optimistic
from lakepubsub.scheduler import NullProgress, Progress
from lakepubsub.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("lakepubsub.jobs")
T = TypeVar("T")

# Spark master when the job is not launched by spark-submit and none is given.
DEFAULT_MASTER = "local[*]"
# A maintenance commit (compaction, vacuum, delete) that keeps losing races to
# the API's writers is retried with jittered back-off for at least this many
# attempts and this long, then skipped until the next run: the API must never
# wait for a job.
JOB_COMMIT_ATTEMPTS = 8
JOB_COMMIT_BUDGET_S = 30.0
# spark-submit hands a Python driver the JVM it started through these.
_SUBMIT_GATEWAY = "PYSPARK_GATEWAY_PORT"
_WHICH_LAKE = (
    " (give the lake's root with --lake or LAKEPUBSUB_LAKE; `lakepubsub serve` or "
    "`lakepubsub --direct` makes a new one)"
)


class _Result(Protocol):
    status: str


R = TypeVar("R", bound=_Result)
# The status of a table or topic a job could not finish ("error: ...").
ERROR_STATUS = "error"


def errored(results: list[R]) -> list[R]:
    """The results of a run (one per table or topic) that ended in an error."""
    return [r for r in results if r.status.startswith(ERROR_STATUS)]


def require_lake(settings: Settings) -> None:
    """``FailedPrecondition`` (one line) unless ``settings.lake`` is a lake already: a
    directory or prefix with a catalog. A job or query works on a lake a server
    (or ``lakepubsub --direct``) made; run from another directory, ``./.lake`` is
    not that lake, and making an empty one there would only hide the mistake."""
    parsed = urlparse(settings.lake)
    if parsed.scheme in ("", "file"):
        path = os.path.abspath(parsed.path if parsed.scheme else settings.lake)
        if not os.path.isdir(path):
            raise errors.FailedPrecondition(f"no lake at {path}: no such directory{_WHICH_LAKE}")
    lake = Lake(settings)
    if not lake.exists(lake.catalog_uri):
        raise errors.FailedPrecondition(f"no lake at {lake.root}: it has no catalog{_WHICH_LAKE}")


def settings_for(lake: str | None = None) -> Settings:
    """The lake exactly as ``lakepubsub serve`` finds it: ``lake`` if given, else
    ``LAKEPUBSUB_LAKE``; AWS settings from the usual environment variables."""
    env = dict(os.environ)
    if lake:
        env["LAKEPUBSUB_LAKE"] = lake
    return Settings.from_env(env)


class JobContext:
    """One job run's lake, engine, Spark session, clock and progress display.

    The engine and the session start on first use. ``clock_us`` is the time the
    job measures ages and expirations against (tests move it forward); the
    engine keeps the settings' clock for lease deadlines.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        spark: SparkSession | None = None,
        master: str | None = None,
        progress: Progress | None = None,
        clock_us: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        self.lake = Lake(settings)
        self.progress: Progress = progress or NullProgress()
        self.clock_us = clock_us or settings.clock_us
        self._spark = spark
        self._master = master
        self._engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self.settings)
        return self._engine

    def settle_intake(self) -> None:
        """Move every topic's messages still in the intake to the topic's own table
        (docs/architecture.md, "intake"), so a job that reads the tables sees each
        topic's whole history there."""
        intake = self.engine.intake
        if intake is not None:
            intake.move_all()

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self.progress.phase("starting Spark")
            self._spark = spark_session(self._master)
        return self._spark

    def now_us(self) -> int:
        return self.clock_us()

    def close(self) -> None:
        """Stop the engine's threads. A Spark session is left to whoever owns the process."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def __enter__(self) -> JobContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spark_session(
    master: str | None = None, *, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The running session, spark-submit's, or a new local one on ``master``
    (``conf``: settings for a new session)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 — PySpark loads when the job runs, not when the CLI imports this

    from lakepubsub.spark import local_session, register_source  # noqa: PLC0415 — likewise
    from lakepubsub.spark.session import SESSION_CONF  # noqa: PLC0415 — likewise

    active = SparkSession.getActiveSession()
    if active is not None:
        register_source(active)
        return active
    if master is None and _SUBMIT_GATEWAY in os.environ:
        # Launched by spark-submit: keep its master and resources, add our settings.
        builder = SparkSession.builder.appName("lakepubsub-jobs")
        # Its --packages or --jars must bring delta-spark (and hadoop-aws for s3a).
        for key, value in {**SESSION_CONF, **(conf or {})}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        register_source(spark)
        return spark
    return local_session("lakepubsub-jobs", master or DEFAULT_MASTER, conf=conf)


def retrying(label: str, attempt: Callable[[], T]) -> T:
    """Run a maintenance commit until it wins a race, within the job's budget.

    ``attempt`` must reload the table itself. Raises ``errors.Aborted`` when the
    budget is spent (the table is too busy now; the next run tries again).
    """
    return optimistic(
        attempt, table=label, attempts=JOB_COMMIT_ATTEMPTS, budget_s=JOB_COMMIT_BUDGET_S
    )


@dataclass(frozen=True)
class FileStats:
    """A table version's data files, from its add actions (no data is read)."""

    version: int
    files: int
    rows: int
    bytes: int
    small_files: int  # files below the size they were counted against

    @classmethod
    def of(cls, table: DeltaTable, small_below: int = 0) -> FileStats:
        with storage_errors(table.table_uri):
            actions = pa.table(table.get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return cls(table.version(), 0, 0, 0, 0)
        sizes = actions.column("size_bytes").to_pylist()
        records = actions.column("num_records").to_pylist()
        return cls(
            version=table.version(),
            files=actions.num_rows,
            rows=sum(r or 0 for r in records),
            bytes=sum(sizes),
            small_files=sum(1 for s in sizes if s < small_below),
        )


def newest_change_s(lake: Lake, *parts: str) -> float | None:
    """The newest modification time (epoch seconds) of anything under ``{root}/parts``.

    ``None`` when there is nothing there. (This and ``_read_log_file`` read
    storage below the table level, as ``Lake.moved`` does; ``Lake`` methods
    would be their right home.)
    """
    if not lake.is_s3:
        newest: float | None = None
        for dirpath, _, filenames in os.walk(os.path.join(lake.root, *parts)):
            for name in [".", *filenames]:
                try:
                    mtime = os.stat(os.path.join(dirpath, name)).st_mtime
                except FileNotFoundError:
                    continue
                newest = mtime if newest is None else max(newest, mtime)
        return newest
    prefix = "/".join(p for p in (lake.prefix, *parts) if p) + "/"
    paginator = lake.s3_client().get_paginator("list_objects_v2")
    times = [
        obj["LastModified"].timestamp()
        for page in paginator.paginate(Bucket=lake.bucket, Prefix=prefix)
        for obj in page.get("Contents", [])
    ]
    return max(times, default=None)


def has_checkpoint(lake: Lake, table: DeltaTable) -> bool:
    """Whether the table's current version has a checkpoint (then it had no commits since)."""
    return _read_log_file(lake, table, f"{table.version():020d}.checkpoint.parquet") is not None


def commit_info(lake: Lake, table: DeltaTable, version: int) -> dict[str, Any]:
    """The commitInfo action of commit ``version`` ({} if it has none).

    Read from the commit file itself: delta-rs's ``history()`` orders commits by
    their commitInfo time and so mislabels versions when a commit that waited
    out a conflict lands after commits prepared later.
    """
    text = _read_log_file(lake, table, f"{version:020d}.json")
    if text is None:
        raise errors.NotFound(f"{table.table_uri}: no commit {version}")
    for line in text.decode().splitlines():
        action = json.loads(line) if line.strip() else {}
        if "commitInfo" in action:
            info: dict[str, Any] = action["commitInfo"]
            return info
    return {}


def _read_log_file(lake: Lake, table: DeltaTable, name: str) -> bytes | None:
    """A file of the table's ``_delta_log``, or ``None`` if there is none."""
    uri = table.table_uri.rstrip("/")
    with storage_errors(uri):
        if not lake.is_s3:
            try:
                with open(os.path.join(uri.removeprefix("file://"), "_delta_log", name), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
        key = uri.split("/", 3)[3] + "/_delta_log/" + name
        try:
            body: bytes = lake.s3_client().get_object(Bucket=lake.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return body


def open_if_exists(lake: Lake, uri: str) -> DeltaTable | None:
    """The table at ``uri``, or ``None`` if it is gone (deleted while the job ran)."""
    try:
        return lake.open(uri)
    except errors.NotFound:
        return None


def report_json(report: Any) -> str:
    """A job report (a dataclass) as one JSON line."""
    return json.dumps(dataclasses.asdict(report), default=str, sort_keys=True)


class Stopwatch:
    """Seconds since creation, rounded for reports."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return round(time.perf_counter() - self.started, 3)
