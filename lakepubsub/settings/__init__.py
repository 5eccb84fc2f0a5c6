"""Settings: every ``LAKEPUBSUB_*`` variable is read in this package.

This module holds the lake's and the engine's; the push dispatchers', the peer
server's and the job schedule's are beside it (``push``, ``peering``,
``schedule``), each a frozen value its room is given.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from lakepubsub import constants

_T = TypeVar("_T")

DEFAULT_LAKE = "./.lake"
S3_TIERS = ("standard", "express")

# Environment variables handed to delta-rs (object_store) and boto3 when the lake is on S3.
_AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
    "AWS_PROFILE",
    # delta-rs's switch for S3 Express One Zone directory buckets (session auth).
    "AWS_S3_EXPRESS",
)


GRPC_LOOPS = ("uvloop", "asyncio")


def grpc_loop(environ: Mapping[str, str] | None = None) -> str:
    """The event loop grpc.aio runs on (``lakepubsub/aio_loop.py``):
    ``LAKEPUBSUB_GRPC_LOOP``, "uvloop" or "asyncio"; unset, uvloop where it is
    installed. A process reads it once, when its loop starts."""
    env = os.environ if environ is None else environ
    value = env.get("LAKEPUBSUB_GRPC_LOOP", "").strip().lower()
    installed = importlib.util.find_spec("uvloop") is not None
    if not value:
        return "uvloop" if installed else "asyncio"
    if value not in GRPC_LOOPS:
        raise ValueError(
            f"LAKEPUBSUB_GRPC_LOOP must be one of {', '.join(GRPC_LOOPS)}, got {value!r}"
        )
    if value == "uvloop" and not installed:
        raise ValueError("LAKEPUBSUB_GRPC_LOOP=uvloop, but uvloop is not installed")
    return value


def wall_clock_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True)
class Settings:
    """Everything configurable about one process's view of a lake.

    ``lake`` is a local directory or ``s3://bucket/prefix``; ``storage_options``
    are object_store options for S3 (endpoint, credentials, region).
    """

    lake: str = DEFAULT_LAKE
    storage_options: Mapping[str, str] = field(default_factory=dict)
    # None: by storage kind (1 s on a local lake; the change check on S3, where
    # catalog commits are told to the peers).
    catalog_max_staleness_s: float | None = None
    pull_wait_s: float = constants.PULL_WAIT_S
    pull_poll_interval_s: float = constants.PULL_POLL_INTERVAL_S
    # None: by storage kind (constants.LOCAL_CHANGE_CHECK_S, S3_CHANGE_CHECK_S).
    change_check_s: float | None = None
    # The flush window: a topic's publishes and a subscription's lease changes
    # commit at most once per window. None: by storage kind (constants.*_FLUSH_MS).
    flush_ms: float | None = None
    # The S3 storage class of the lake's bucket, which sets the defaults above:
    # "standard" or "express" (S3 Express One Zone). None: "express" for a
    # directory bucket (its name ends in --x-s3), else "standard".
    s3_tier: str | None = None
    # A subscription that is not exactly-once writes deliveries, acks and deadline
    # changes at most this often (a crash redelivers what changed since). None: by
    # storage kind (constants.*_LEASE_FLUSH_MS).
    lease_flush_ms: float | None = None
    # Publishes of every topic this process commits go through the intake table,
    # one commit per flush window (docs/architecture.md, "intake"). None: on S3.
    intake: bool | None = None
    # Where the intake table lives, when not under the lake root: another
    # s3://bucket/prefix, such as an S3 Express One Zone directory bucket, so the
    # commit a publish waits for is fast while the history stays on Standard.
    # Recorded in the lake on first use (Lake.intake_uri); None: the lake root.
    intake_lake: str | None = None
    # Intake rows of a topic move to its messages table once the oldest is this
    # old (or they reach constants.INTAKE_MOVE_BYTES). None: by storage kind.
    intake_move_s: float | None = None
    # A local lake's large data files are written and read past the page cache (O_DIRECT,
    # lakepubsub/_lake/direct.py) where the filesystem allows it.
    direct_writes: bool = True
    commit_attempts: int = constants.COMMIT_ATTEMPTS
    worker_idle_exit_s: float = constants.WORKER_IDLE_EXIT_S
    max_inflight_requests: int = constants.MAX_INFLIGHT_REQUESTS
    max_inflight_body_bytes: int = constants.MAX_INFLIGHT_BODY_BYTES
    # A server's young-generation GC threshold (lakepubsub.gc_tuning); 0: CPython's.
    gc_young_threshold: int = constants.GC_YOUNG_THRESHOLD
    # The clock lease deadlines are measured against (tests drive it by hand).
    clock_us: Callable[[], int] = field(default=wall_clock_us, compare=False, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read ``LAKEPUBSUB_*`` and the standard AWS variables."""
        env = os.environ if environ is None else environ
        options = {name: env[name] for name in _AWS_VARIABLES if env.get(name)}
        endpoint = env.get("LAKEPUBSUB_S3_ENDPOINT")
        if endpoint:
            options["AWS_ENDPOINT_URL"] = endpoint
        if options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
            options.setdefault("AWS_ALLOW_HTTP", "true")
        if "AWS_REGION" not in options and "AWS_DEFAULT_REGION" in options:
            options["AWS_REGION"] = options["AWS_DEFAULT_REGION"]
        options.pop("AWS_DEFAULT_REGION", None)
        settings = cls(
            lake=env.get("LAKEPUBSUB_LAKE", DEFAULT_LAKE),
            storage_options=options,
            catalog_max_staleness_s=_optional(env, "LAKEPUBSUB_CATALOG_MAX_STALENESS_S", float),
            pull_wait_s=float(env.get("LAKEPUBSUB_PULL_WAIT_S", constants.PULL_WAIT_S)),
            change_check_s=_optional(env, "LAKEPUBSUB_CHANGE_CHECK_S", float),
            flush_ms=_optional(env, "LAKEPUBSUB_FLUSH_MS", float),
            s3_tier=env.get("LAKEPUBSUB_S3_TIER") or None,
            lease_flush_ms=_optional(env, "LAKEPUBSUB_LEASE_FLUSH_MS", float),
            intake=_optional(env, "LAKEPUBSUB_INTAKE", _flag),
            intake_lake=env.get("LAKEPUBSUB_INTAKE_LAKE") or None,
            intake_move_s=_optional(env, "LAKEPUBSUB_INTAKE_MOVE_S", float),
            direct_writes=_flag(env.get("LAKEPUBSUB_DIRECT_WRITES", "1")),
            max_inflight_requests=int(
                env.get("LAKEPUBSUB_MAX_INFLIGHT_REQUESTS", constants.MAX_INFLIGHT_REQUESTS)
            ),
            max_inflight_body_bytes=int(
                env.get("LAKEPUBSUB_MAX_INFLIGHT_BODY_BYTES", constants.MAX_INFLIGHT_BODY_BYTES)
            ),
            gc_young_threshold=int(
                env.get("LAKEPUBSUB_GC_YOUNG_THRESHOLD", constants.GC_YOUNG_THRESHOLD)
            ),
        )
        return replace(settings, **overrides)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if self.s3_tier not in (None, *S3_TIERS):
            raise ValueError(
                f"LAKEPUBSUB_S3_TIER must be one of {', '.join(S3_TIERS)}, got {self.s3_tier!r}"
            )
        if self.intake_lake is not None and _is_s3(self.intake_lake) != self.on_s3:
            raise ValueError(
                "LAKEPUBSUB_INTAKE_LAKE must be on the same kind of storage as the lake "
                f"({self.intake_lake!r} for {self.lake!r})"
            )

    @property
    def on_s3(self) -> bool:
        return _is_s3(self.lake)

    def on_s3_express(self, uri: str | None = None) -> bool:
        """Whether ``uri`` (default: the lake) is on S3 Express One Zone: a directory
        bucket's name, or, for the lake's own bucket, ``s3_tier``."""
        where = self.lake if uri is None else uri
        if not _is_s3(where):
            return False
        if self.s3_tier is not None and _bucket(where) == _bucket(self.lake):
            return self.s3_tier == "express"
        return _bucket(where).endswith(constants.S3_EXPRESS_BUCKET_SUFFIX)

    def change_check(self, peered: bool = True) -> float:
        """Seconds between looks for commits this process was not told of. Rare only
        on S3 for a peered process (one not peered is told of nothing)."""
        if self.change_check_s is not None:
            return self.change_check_s
        if self.on_s3 and peered:
            return constants.S3_CHANGE_CHECK_S
        return constants.LOCAL_CHANGE_CHECK_S

    def catalog_staleness(self, peered: bool = True) -> float:
        """How old a cached catalog may be for lookups of names it holds."""
        if self.catalog_max_staleness_s is not None:
            return self.catalog_max_staleness_s
        if self.on_s3 and peered:
            return self.change_check()
        return constants.CATALOG_MAX_STALENESS_S

    def flush_s(self, uri: str | None = None) -> float:
        """The flush window in seconds for commits to ``uri``'s storage (default: the
        lake's; 0: commit as soon as the last commit is done)."""
        ms = self.flush_ms
        if ms is None:
            if self.on_s3_express(uri):
                ms = constants.S3_EXPRESS_FLUSH_MS
            elif _is_s3(self.lake if uri is None else uri):
                ms = constants.S3_FLUSH_MS
            else:
                ms = constants.LOCAL_FLUSH_MS
        return ms / 1000

    def lease_flush_s(self, peered: bool = True) -> float:
        """How long a subscription that is not exactly-once may hold lease changes
        in memory (0: every cycle commits). Only a peered process holds them by
        default: processes that are not peered may all dispatch one subscription,
        and each must see the others' leases."""
        ms = self.lease_flush_ms
        if ms is None:
            if not peered:
                return 0.0
            ms = constants.S3_LEASE_FLUSH_MS if self.on_s3 else constants.LOCAL_LEASE_FLUSH_MS
        return ms / 1000

    def lease_commit_spacing_s(self, peered: bool = True) -> float:
        """How far apart a process's deferred lease commits are, over all its
        subscriptions (0: not spaced, when nothing is deferred)."""
        return self.lease_flush_s(peered) / constants.LEASE_COMMITS_PER_WINDOW

    def uses_intake(self) -> bool:
        """Whether publishes commit through the intake table (None: on S3, where a
        commit costs requests; a local commit costs about a millisecond)."""
        return self.on_s3 if self.intake is None else self.intake

    def move_after_s(self) -> float:
        """How long a topic's rows may stay in the intake before they move."""
        if self.intake_move_s is not None:
            return self.intake_move_s
        return constants.S3_INTAKE_MOVE_S if self.on_s3 else constants.LOCAL_INTAKE_MOVE_S


def _is_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def _bucket(uri: str) -> str:
    return uri.split("://", 1)[1].split("/", 1)[0]


def _optional(env: Mapping[str, str], name: str, parse: Callable[[str], _T]) -> _T | None:
    """``parse`` of the variable ``name``, or None when it is unset or empty."""
    value = env.get(name)
    return parse(value) if value else None


def _flag(value: str) -> bool:
    """An on/off environment variable: 1/true/yes/on or 0/false/no/off."""
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected on or off, got {value!r}")
