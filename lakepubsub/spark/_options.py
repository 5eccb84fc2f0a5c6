"""Options of the ``lakedelta`` writer, parsed once from Spark's option map.

Spark lower-cases option keys, so every key here is compared lower-case. Keys the
source does not know are storage options for delta-rs (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``…); they are upper-cased back, as delta-rs documents them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from lakepubsub import errors

PATH = "path"
# Delta Lake's own names for idempotent writes, so jobs written for delta-spark carry over.
TXN_APP_ID = "txnappid"
TXN_VERSION = "txnversion"
PARTITION_BY = "partitionby"
USER_METADATA = "usermetadata"

_SOURCE_KEYS = frozenset({PATH, TXN_APP_ID, TXN_VERSION, PARTITION_BY, USER_METADATA})


@dataclass(frozen=True)
class SourceOptions:
    """What one write of a Delta table asks for."""

    path: str
    storage_options: dict[str, str] = field(default_factory=dict)
    txn_app_id: str | None = None
    txn_version: int | None = None
    partition_by: tuple[str, ...] = ()
    user_metadata: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's options; ``InvalidArgument`` names the bad one."""
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        path = opts.get(PATH)
        if not path:
            raise errors.InvalidArgument("lakedelta: the 'path' option is required")
        app_id = opts.get(TXN_APP_ID) or None
        txn_version = _int_option(TXN_VERSION, opts.get(TXN_VERSION))
        if (app_id is None) != (txn_version is None):
            raise errors.InvalidArgument("lakedelta: txnAppId and txnVersion go together")
        return cls(
            path=normalize_path(path),
            storage_options={k.upper(): v for k, v in opts.items() if k not in _SOURCE_KEYS},
            txn_app_id=app_id,
            txn_version=txn_version,
            partition_by=_column_list(opts.get(PARTITION_BY, "")),
            user_metadata=opts.get(USER_METADATA),
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


def _column_list(text: str) -> tuple[str, ...]:
    """``partitionBy`` as Spark passes it (a JSON list) or as a comma-separated list."""
    text = text.strip()
    if not text:
        return ()
    if text.startswith("["):
        return tuple(str(c) for c in json.loads(text))
    return tuple(c.strip() for c in text.split(",") if c.strip())
