"""Options of the ``lakedelta`` data source, parsed once from Spark's option map.

Spark lower-cases option keys, so every key here is compared lower-case. Keys the
source does not know are storage options for delta-rs (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``…); they are upper-cased back, as delta-rs documents them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from lakepubsub import errors

PATH = "path"
VERSION = "versionasof"
VERSION_ALIAS = "version"
TIMESTAMP = "timestampasof"
# Delta Lake's own names for idempotent writes, so jobs written for delta-spark carry over.
TXN_APP_ID = "txnappid"
TXN_VERSION = "txnversion"
PARTITION_BY = "partitionby"
USER_METADATA = "usermetadata"
# Opt-in Spark filter pushdown. Off by default because Spark 4.2.0 caches the
# read plan of a pushdown on the relation: a later query on the same DataFrame
# or view that pushes no filter reuses it and silently loses rows. A reader
# with pushdown also needs spark.sql.python.filterPushdown.enabled=true.
PUSH_FILTERS = "pushfilters"
# Filters that belong to the relation itself (JSON [[column, op, value], ...]):
# they prune files and rows and are safe however often the DataFrame is reused.
FILTERS = "filters"
BATCH_ROWS = "batchrows"
MAX_PARTITION_BYTES = "maxpartitionbytes"
MIN_PARTITIONS = "minpartitions"
# Bytes of data files one read task takes at most (Spark's spark.sql.files.maxPartitionBytes).
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
# Rows per Arrow batch a read hands Spark: a batch of 1 KiB messages stays near
# 8 MiB on its way to the JVM.
DEFAULT_BATCH_ROWS = 8_192

_SOURCE_KEYS = frozenset(
    {PATH, VERSION, VERSION_ALIAS, TIMESTAMP, TXN_APP_ID, TXN_VERSION, PARTITION_BY}
    | {USER_METADATA, PUSH_FILTERS, FILTERS, BATCH_ROWS, MAX_PARTITION_BYTES, MIN_PARTITIONS}
)


@dataclass(frozen=True)
class SourceOptions:
    """What one read or write of a Delta table asks for."""

    path: str
    version: int | None = None
    timestamp: datetime | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    txn_app_id: str | None = None
    txn_version: int | None = None
    partition_by: tuple[str, ...] = ()
    user_metadata: str | None = None
    push_filters: bool = False
    filters: tuple[tuple[str, str, Any], ...] = ()
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    min_partitions: int = 1

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's options; ``InvalidArgument`` names the bad one."""
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        path = opts.get(PATH)
        if not path:
            raise errors.InvalidArgument("lakedelta: the 'path' option is required")
        version_text = opts.get(VERSION, opts.get(VERSION_ALIAS))
        version = _int_option(VERSION, version_text)
        timestamp = parse_timestamp(opts[TIMESTAMP]) if opts.get(TIMESTAMP) else None
        if version is not None and timestamp is not None:
            raise errors.InvalidArgument("lakedelta: give versionAsOf or timestampAsOf, not both")
        app_id = opts.get(TXN_APP_ID) or None
        txn_version = _int_option(TXN_VERSION, opts.get(TXN_VERSION))
        if (app_id is None) != (txn_version is None):
            raise errors.InvalidArgument("lakedelta: txnAppId and txnVersion go together")
        return cls(
            path=normalize_path(path),
            version=version,
            timestamp=timestamp,
            storage_options={k.upper(): v for k, v in opts.items() if k not in _SOURCE_KEYS},
            txn_app_id=app_id,
            txn_version=txn_version,
            partition_by=_column_list(opts.get(PARTITION_BY, "")),
            user_metadata=opts.get(USER_METADATA),
            push_filters=opts.get(PUSH_FILTERS, "false").lower() == "true",
            filters=_filter_triples(opts.get(FILTERS, "")),
            batch_rows=_int_or(BATCH_ROWS, opts, DEFAULT_BATCH_ROWS) or DEFAULT_BATCH_ROWS,
            max_partition_bytes=_int_or(MAX_PARTITION_BYTES, opts, DEFAULT_MAX_PARTITION_BYTES),
            min_partitions=_int_or(MIN_PARTITIONS, opts, 1) or 1,
        )

    @property
    def delta_storage_options(self) -> dict[str, str] | None:
        """Storage options as delta-rs takes them (``None`` when there are none)."""
        return dict(self.storage_options) or None

    @property
    def is_local(self) -> bool:
        return is_local_path(self.path)


def normalize_path(path: str) -> str:
    """An absolute local path (``file://`` stripped) or the URI as given, no trailing slash."""
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return os.path.abspath(parsed.path)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return os.path.abspath(path)
    return path.rstrip("/")


def is_local_path(path: str) -> bool:
    return urlparse(path).scheme in ("", "file")


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 timestamp; one without a zone is taken as UTC, like the session zone."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise errors.InvalidArgument(f"lakedelta: bad timestampAsOf {text!r}") from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _int_option(name: str, text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise errors.InvalidArgument(f"lakedelta: option {name} must be an integer") from exc
    if value < 0:
        raise errors.InvalidArgument(f"lakedelta: option {name} must not be negative")
    return value


def _int_or(name: str, options: Mapping[str, str], default: int) -> int:
    value = _int_option(name, options.get(name))
    return default if value is None else value


def _filter_triples(text: str) -> tuple[tuple[str, str, Any], ...]:
    if not text.strip():
        return ()
    try:
        triples = json.loads(text)
        return tuple((str(c), str(op).lower(), value) for c, op, value in triples)
    except (ValueError, TypeError) as exc:
        raise errors.InvalidArgument(
            "lakedelta: filters must be a JSON list of [column, op, value]"
        ) from exc


def _column_list(text: str) -> tuple[str, ...]:
    """``partitionBy`` as Spark passes it (a JSON list) or as a comma-separated list."""
    text = text.strip()
    if not text:
        return ()
    if text.startswith("["):
        return tuple(str(c) for c in json.loads(text))
    return tuple(c.strip() for c in text.split(",") if c.strip())
