"""One narrow interface to the lake root: local directory or ``s3://bucket/prefix``."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from botocore.exceptions import BotoCoreError, ClientError
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from obstore.exceptions import BaseError as ObstoreError

from lakepubsub import constants, errors
from lakepubsub._lake.meter import METER
from lakepubsub._lake.objects import Objects, split_s3
from lakepubsub.settings import Settings

log = logging.getLogger(__name__)

# Names the intake table's place when it is not under the lake root (Lake.intake_uri).
INTAKE_POINTER = "intake-location"


# delta-rs lists a local _delta_log and refuses a listing with a gap in the
# version numbers. A directory listing may miss a file created while it runs
# (POSIX leaves it unspecified) and see a later one, so a table committed to
# many times a second is sometimes listed with a gap that is not there.
_LOG_RACE = "Expected contiguous commit files"


def log_race(exc: BaseException) -> bool:
    """Whether delta-rs failed because the log grew while it listed it (retry)."""
    return _LOG_RACE in str(exc)


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn storage failures into ``Unavailable``; commit conflicts pass through, and
    so does a log listed while it grew, as a conflict (the optimistic loops retry)."""
    try:
        yield
    except (CommitFailedError, errors.LakePubSubError):
        raise
    except TableNotFoundError as exc:
        raise errors.NotFound(f"{what}: table not found") from exc
    except (DeltaError, OSError, BotoCoreError, ClientError, ObstoreError) as exc:
        if log_race(exc):
            raise CommitFailedError(f"{what}: the log grew while it was read; retry") from exc
        raise errors.Unavailable(f"{what}: storage unavailable: {exc}") from exc


def open_delta(
    uri: str, *, version: int | None = None, storage_options: Mapping[str, str] | None = None
) -> DeltaTable:
    """``DeltaTable(uri)``, retried while the log grows under the listing."""
    options = dict(storage_options) if storage_options else None
    for attempt in range(constants.LOG_RACE_ATTEMPTS):
        try:
            return DeltaTable(uri, version=version, storage_options=options)
        except DeltaError as exc:
            if not log_race(exc) or attempt == constants.LOG_RACE_ATTEMPTS - 1:
                raise
            time.sleep(
                min(constants.LOG_RACE_PAUSE_MAX_S, constants.LOG_RACE_PAUSE_S * (attempt + 1))
            )
    raise AssertionError("unreachable")


class Lake:
    """Table locations and storage options for one lake root.

    Layout (see docs/architecture.md)::

        {root}/catalog                       topics, subscriptions, snapshots
        {root}/topics/{uid}/messages         one messages table per topic
        {root}/subscriptions/{uid}/leases    cursor, leases and events of one subscription
        {root}/truncations                   log of truncations, for operators
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._s3: Any = None
        parsed = urlparse(settings.lake)
        self.is_s3 = parsed.scheme in ("s3", "s3a")
        if self.is_s3:
            self.bucket = parsed.netloc
            self.prefix = parsed.path.strip("/")
            self.root = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
            self.storage_options: dict[str, str] | None = dict(settings.storage_options)
        elif parsed.scheme in ("", "file"):
            path = parsed.path if parsed.scheme == "file" else settings.lake
            self.root = os.path.abspath(path)
            self.bucket = ""
            self.prefix = ""
            self.storage_options = None
            os.makedirs(self.root, exist_ok=True)
        else:
            raise errors.InvalidArgument(f"unsupported lake URI {settings.lake!r}")
        self.objects = Objects(
            self.is_s3,
            self.storage_options,
            constants.WRITTEN_CACHE_BYTES,
            direct=settings.direct_writes,
        )
        self._intake_uri: str | None = None

    # -- locations -----------------------------------------------------------------

    def uri(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    @property
    def catalog_uri(self) -> str:
        return self.uri("catalog")

    @property
    def truncations_uri(self) -> str:
        return self.uri("truncations")

    def messages_uri(self, topic_uid: str) -> str:
        return self.uri("topics", topic_uid, "messages")

    def intake_uri(self) -> str:
        """Where the lake's intake table lives: ``{root}/intake``, or under
        ``LAKEPUBSUB_INTAKE_LAKE``. Every process and job must agree, so the place
        is recorded in the lake (``{root}/intake-location``) by the first process
        that sets it, and read from there by the others (one GET, then cached);
        a process set to another place is refused."""
        if self._intake_uri is None:
            self._intake_uri = self._find_intake()
        return self._intake_uri

    def _find_intake(self) -> str:
        pointer = self.uri(INTAKE_POINTER)
        wanted = self.settings.intake_lake
        target = f"{wanted.rstrip('/')}/intake" if wanted else None
        with storage_errors(pointer):
            recorded = self.objects.read(pointer)
            if recorded is None and target is not None and target != self.uri("intake"):
                if self.exists(self.uri("intake")):  # its rows would be lost from view
                    raise errors.FailedPrecondition(
                        f"this lake's intake is at {self.uri('intake')}; it cannot move to "
                        f"{target} (LAKEPUBSUB_INTAKE_LAKE)"
                    )
                if self.objects.put_if_absent(pointer, target.encode()):
                    return target
                recorded = self.objects.read(pointer)
        found = recorded.decode() if recorded is not None else self.uri("intake")
        if target is not None and found != target:
            raise errors.FailedPrecondition(
                f"this lake's intake is at {found}, not {target} (LAKEPUBSUB_INTAKE_LAKE)"
            )
        return found

    def leases_uri(self, subscription_uid: str) -> str:
        return self.uri("subscriptions", subscription_uid, "leases")

    def snapshot_uri(self, snapshot_uid: str) -> str:
        return self.uri("snapshots", snapshot_uid, "leases")

    def job_run_uri(self, job: str) -> str:
        """The JSON object that keeps a maintenance job's last run (``jobs/runs.py``;
        the console's lake page reads it)."""
        return self.uri("jobs", f"{job}.json")

    # -- tables --------------------------------------------------------------------

    def open(self, uri: str, *, version: int | None = None) -> DeltaTable:
        """Open an existing table; ``NotFound`` if there is none."""
        with storage_errors(uri):
            try:
                return open_delta(uri, version=version, storage_options=self.storage_options)
            except DeltaError as exc:
                if log_race(exc):
                    raise errors.Unavailable(f"{uri}: the log grew while it was read") from exc
                raise

    def exists(self, uri: str) -> bool:
        with storage_errors(uri):
            return DeltaTable.is_deltatable(uri, storage_options=self.storage_options)

    def create(
        self,
        uri: str,
        schema: pa.Schema,
        *,
        configuration: Mapping[str, str],
        partition_by: list[str] | None = None,
        description: str | None = None,
    ) -> DeltaTable:
        """Create a table, or open it if it already exists with this schema."""
        with storage_errors(uri):
            try:
                return DeltaTable.create(
                    uri,
                    schema,
                    mode="ignore",
                    partition_by=partition_by,
                    description=description,
                    configuration=self._properties(configuration),
                    storage_options=self.storage_options,
                    raise_if_key_not_exists=False,
                )
            except CommitFailedError:
                # Version 0 exists: another creator won, or our own commit landed and
                # its answer was lost (the retried conditional PUT then fails).
                return self._created(uri)

    def create_with(self, uri: str, rows: pa.Table, *, configuration: Mapping[str, str]) -> None:
        """Create a table holding ``rows`` in its first commit; error if it exists.

        Callers pass a fresh location (a new uid), so a version 0 that exists
        after a failed commit is this call's own commit whose answer was lost.
        """
        with storage_errors(uri):
            try:
                write_deltalake(
                    uri,
                    rows,
                    mode="error",
                    configuration=self._properties(configuration),
                    storage_options=self.storage_options,
                )
            except CommitFailedError:
                self._created(uri)

    def _properties(self, configuration: Mapping[str, str]) -> dict[str, str]:
        """A new table's properties: a local lake keeps a short log (constants.py)."""
        properties = dict(configuration)
        if not self.is_s3:
            properties["delta.logRetentionDuration"] = constants.LOCAL_LOG_RETENTION
        return properties

    def _created(self, uri: str) -> DeltaTable:
        """The table a create that failed to commit left behind; ``Unavailable`` if none."""
        if not DeltaTable.is_deltatable(uri, storage_options=self.storage_options):
            raise errors.Unavailable(f"{uri}: create did not commit; retry")
        return DeltaTable(uri, storage_options=self.storage_options)

    def remove_tree(self, *parts: str) -> None:
        """Delete everything under ``{root}/parts``; best effort, logs failures."""
        try:
            if self.is_s3:
                self._remove_s3_prefix("/".join(p for p in (self.prefix, *parts) if p) + "/")
            else:
                shutil.rmtree(os.path.join(self.root, *parts), ignore_errors=True)
        except Exception:  # a leftover directory is swept by the gc job
            log.warning("could not remove %s", "/".join(parts), exc_info=True)

    def remove_table(self, uri: str) -> None:
        """Delete a whole table given by its URI, which may be outside the lake root
        (the intake's own place); errors are raised, not logged."""
        with storage_errors(uri):
            if not self.is_s3:
                shutil.rmtree(uri, ignore_errors=False)
                return
            bucket, key = split_s3(uri)
            self._remove_s3_prefix(key.rstrip("/") + "/", bucket)

    def list_dirs(self, *parts: str) -> list[str]:
        """Names of the immediate children of ``{root}/parts``."""
        if not self.is_s3:
            path = os.path.join(self.root, *parts)
            return sorted(os.listdir(path)) if os.path.isdir(path) else []
        prefix = "/".join(p for p in (self.prefix, *parts) if p) + "/"
        names: list[str] = []
        paginator = self.s3_client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
            for entry in page.get("CommonPrefixes", []):
                names.append(entry["Prefix"][len(prefix) :].rstrip("/"))
        return sorted(names)

    def list_objects(self, *parts: str) -> list[tuple[str, float]]:
        """Names and modification times (seconds since the epoch) of the objects
        directly under ``{root}/parts``."""
        if not self.is_s3:
            path = os.path.join(self.root, *parts)
            try:
                entries = list(os.scandir(path))
            except FileNotFoundError:
                return []
            found = []
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):  # removed while listed
                    if entry.is_file():
                        found.append((entry.name, entry.stat().st_mtime))
            return found
        prefix = "/".join(p for p in (self.prefix, *parts) if p) + "/"
        found = []
        paginator = self.s3_client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
            for obj in page.get("Contents", []):
                found.append((obj["Key"][len(prefix) :], obj["LastModified"].timestamp()))
        return found

    # -- S3 --------------------------------------------------------------------------

    def s3_client(self) -> Any:
        """A boto3 S3 client for this lake (one per Lake; boto3 clients are thread-safe)."""
        if self._s3 is None:
            self._s3 = self._new_s3_client()
        return self._s3

    def _new_s3_client(self) -> Any:
        import boto3  # noqa: PLC0415 — ~170 ms to import, and only S3 lakes need it

        opts = self.storage_options or {}
        client = boto3.client(
            "s3",
            endpoint_url=opts.get("AWS_ENDPOINT_URL"),
            aws_access_key_id=opts.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=opts.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=opts.get("AWS_SESSION_TOKEN"),
            region_name=opts.get("AWS_REGION", "us-east-1"),
        )
        return METER.watch(client)  # counts this process's S3 requests (the console shows them)

    def _remove_s3_prefix(self, prefix: str, bucket: str | None = None) -> None:
        client = self.s3_client()
        bucket = bucket or self.bucket
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
