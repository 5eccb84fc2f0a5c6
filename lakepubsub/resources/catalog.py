"""The catalog table: which topics, subscriptions and snapshots exist, and their settings.

Every process reads it whole (it is small) and caches it by table version.
Changes are read-check-write transactions committed as one MERGE with a strict
compare-and-swap on the version, so two processes creating the same name or
deleting a topic while a subscription to it is created serialize cleanly.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import orjson
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable

from lakepubsub import errors, metrics
from lakepubsub._lake import Lake, storage_errors, table_schemas
from lakepubsub.retry import optimistic

T = TypeVar("T")
Key = tuple[str, str, str]  # kind, project, name

TOPIC = "topic"
SUBSCRIPTION = "subscription"
SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class Entry:
    kind: str
    project: str
    name: str
    uid: str
    topic_uid: str | None
    created_us: int
    updated_us: int
    spec: dict[str, Any]

    @property
    def key(self) -> Key:
        return (self.kind, self.project, self.name)

    def parsed(self, parse: Callable[[Entry], T]) -> T:
        """``parse(self)``, made once per entry and parse function. An entry never
        changes, and a REST pull looks its subscription up three times: parsing the
        spec each time cost it about 75 µs (in-process, 564 -> 489 µs a request)."""
        # An entry is frozen; the memo lives beside its fields, as cached_property's do.
        memo: dict[Callable[[Entry], Any], Any] = self.__dict__.setdefault("_parsed", {})
        try:
            return cast("T", memo[parse])
        except KeyError:
            value = memo[parse] = parse(self)
            return value


@dataclass(frozen=True)
class View:
    """An immutable snapshot of the catalog at one table version."""

    version: int
    entries: dict[Key, Entry]
    loaded_at: float = field(default_factory=time.monotonic)

    def get(self, kind: str, project: str, name: str) -> Entry | None:
        return self.entries.get((kind, project, name))

    def of_kind(self, kind: str, project: str | None = None) -> list[Entry]:
        found = [
            e for e in self.entries.values() if e.kind == kind and project in (None, e.project)
        ]
        return sorted(found, key=lambda e: (e.project, e.name))

    def attached_to(self, topic_uid: str) -> list[Entry]:
        """Subscriptions and snapshots of a topic incarnation."""
        found = [e for e in self.entries.values() if e.topic_uid == topic_uid and e.kind != TOPIC]
        return sorted(found, key=lambda e: (e.kind, e.project, e.name))


@dataclass
class Changes:
    """What a catalog transaction writes: entries to upsert and keys to delete."""

    put: list[Entry] = field(default_factory=list)
    delete: list[Key] = field(default_factory=list)


class Catalog:
    def __init__(self, lake: Lake) -> None:
        self._lake = lake
        self._lock = threading.Lock()
        self._table = self._open_or_create()
        self._view = self._read()
        # Called after each commit of this process (the engine tells its peers).
        self.on_commit: Callable[[], None] | None = None

    def _open_or_create(self) -> DeltaTable:
        uri = self._lake.catalog_uri
        for _ in range(3):
            if self._lake.exists(uri):
                return self._lake.open(uri)
            try:
                return self._lake.create(
                    uri, table_schemas.CATALOG, configuration=table_schemas.CATALOG_PROPERTIES
                )
            except errors.Unavailable:  # another process created it at the same moment
                time.sleep(0.05)
        return self._lake.open(uri)

    def _read(self) -> View:
        with storage_errors("catalog"):
            rows = self._table.to_pyarrow_table().to_pylist()
            version = self._table.version()
        entries = {}
        for row in rows:
            entry = Entry(**{**row, "spec": orjson.loads(row["spec"])})
            entries[entry.key] = entry
        return View(version, entries)

    def is_fresh(self, max_staleness_s: float) -> bool:
        """Whether ``view(max_staleness_s=...)`` would answer from memory now."""
        return time.monotonic() - self._view.loaded_at <= max_staleness_s

    def view(self, *, max_staleness_s: float = 0.0) -> View:
        """The catalog, reread from storage if the cached copy is older than allowed."""
        with self._lock:
            if time.monotonic() - self._view.loaded_at > max_staleness_s:
                self._refresh()
            return self._view

    def invalidate(self) -> None:
        """Another process committed: the next ``view`` rereads, whatever its staleness."""
        with self._lock:
            self._view = View(self._view.version, self._view.entries, loaded_at=-math.inf)

    def _refresh(self) -> None:
        with storage_errors("catalog"):
            self._table.update_incremental()
        if self._table.version() != self._view.version:
            self._view = self._read()
        else:
            self._view = View(self._view.version, self._view.entries)

    def transact(self, change: Callable[[View], tuple[Changes, T]]) -> T:
        """Run ``change`` on a fresh view and commit what it returns, atomically.

        ``change`` may raise to refuse (for example ``AlreadyExists``); it is
        called again on a newer view whenever another writer got in first.
        """

        def attempt() -> tuple[T, bool]:
            with self._lock:
                self._refresh()
                changes, result = change(self._view)
                if changes.put or changes.delete:
                    self._commit(changes)
                return result, bool(changes.put or changes.delete)

        result, committed = optimistic(attempt, table="catalog")
        if committed and self.on_commit is not None:
            self.on_commit()
        return result

    def _commit(self, changes: Changes) -> None:
        rows = [_row("put", e) for e in changes.put]
        rows += [{"op": "del", "kind": k, "project": p, "name": n} for k, p, n in changes.delete]
        source = pa.Table.from_pylist(rows, schema=_SOURCE)
        started = time.perf_counter()
        with storage_errors("catalog"):
            merged = (
                self._table.merge(
                    source,
                    predicate=_merge_predicate([*(e.key for e in changes.put), *changes.delete]),
                    source_alias="s",
                    target_alias="t",
                    commit_properties=CommitProperties(max_commit_retries=0),
                )
                .when_matched_delete(predicate="s.op = 'del'")
                .when_matched_update(updates=_UPDATES, predicate="s.op = 'put'")
                .when_not_matched_insert(updates=_UPDATES, predicate="s.op = 'put'")
                .execute()
            )
        metrics.CATALOG_FILES_SCANNED.inc(merged.get("num_target_files_scanned", 0))
        metrics.COMMITS.labels("catalog").inc()
        metrics.COMMIT_SECONDS.labels("catalog").observe(time.perf_counter() - started)
        entries = dict(self._view.entries)
        for key in changes.delete:
            entries.pop(key, None)
        for entry in changes.put:
            entries[entry.key] = entry
        self._view = View(self._table.version(), entries)

    def close(self) -> None:
        """Nothing to flush: every change is committed before ``transact`` returns."""


def _merge_predicate(keys: list[Key]) -> str:
    """The MERGE's match, plus the changed keys as literals on the target: with them
    delta-rs skips, by the files' min/max statistics, every catalog file that cannot
    hold a changed entry. Without them it reads every file, so a create cost a GET per
    live catalog file (on moto S3, 0.28 s at 10 entries, 1.7 s at 150)."""
    literals = " OR ".join(
        f"(t.kind = {_sql(kind)} AND t.project = {_sql(project)} AND t.name = {_sql(name)})"
        for kind, project, name in keys
    )
    return f"t.kind = s.kind AND t.project = s.project AND t.name = s.name AND ({literals})"


def _sql(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


_SOURCE = pa.schema(
    [pa.field("op", pa.string()), *(f.with_nullable(True) for f in table_schemas.CATALOG)]
)
_UPDATES = {f.name: f"s.{f.name}" for f in table_schemas.CATALOG}


def _row(op: str, entry: Entry) -> dict[str, Any]:
    return {
        "op": op,
        "kind": entry.kind,
        "project": entry.project,
        "name": entry.name,
        "uid": entry.uid,
        "topic_uid": entry.topic_uid,
        "created_us": entry.created_us,
        "updated_us": entry.updated_us,
        "spec": orjson.dumps(entry.spec).decode(),
    }
