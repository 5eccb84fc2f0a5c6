"""What the maintenance jobs did, as the lake records it, for the lake page.

- A messages table's last compaction and last delete of old messages: the
  compaction job commits ``OPTIMIZE`` (every action ``dataChange=false``) and
  the truncation job ``DELETE`` with the predicate ``offset < N`` (it kept
  offset N on), each with a ``commitInfo`` (``lakepubsub/publish/messages_table.py``).
  Both remove files, so only commits after which the table's log had files
  removed are read; a table first seen is looked back through, newest commit
  first, a bounded number of commit files per sample.
- Each job's last run: the JSON object ``jobs/runs.py`` replaces at the end of
  every run of ``compact``, ``truncate`` and ``gc``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

from api.console.tables import Reads
from lakepubsub import errors
from lakepubsub._lake import Lake, TableLog, storage_errors

# Commits of one table looked back through at most, when the console first sees it.
LOOKBACK_COMMITS = 1000
# The jobs whose last run jobs/runs.py keeps (at Lake.job_run_uri).
JOBS = ("compact", "truncate", "gc")
_OPTIMIZE = "OPTIMIZE"
_DELETE = "DELETE"


@dataclass(frozen=True, slots=True)
class JobCommit:
    """One job's commit on a table, from its commitInfo."""

    version: int
    time_ms: int
    operation: str
    files_removed: int
    files_added: int
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Seen:
    """A messages table's newest compaction and delete found so far, and how far
    back its log was read (``complete``: every kept commit was, or the limit hit)."""

    compaction: JobCommit | None = None
    delete: JobCommit | None = None
    looked_back: int = 0
    complete: bool = False


class JobCommits:
    """Follows one messages table's log for the jobs' commits. One thread (the sampler's)."""

    def __init__(self, lake: Lake, log: TableLog) -> None:
        self._lake = lake
        self._log = log
        self._newest = log.version  # commits up to this were accounted for
        self._generation = log.generation
        self._back = log.version  # the next commit to look back at; -1 when done
        self.seen = Seen()

    def advance(self, reads: Reads) -> None:
        """Account for the commits since the last call, then look back within ``reads``."""
        log = self._log
        seen = self.seen
        if log.version > self._newest and log.generation != self._generation:
            # Files were removed since: one of these commits may be a job's.
            lowest = max(self._newest + 1, log.version - LOOKBACK_COMMITS + 1)
            compaction, delete, _, _ = self._scan(range(log.version, lowest - 1, -1), None)
            seen = replace(
                seen, compaction=compaction or seen.compaction, delete=delete or seen.delete
            )
        self._newest, self._generation = log.version, log.generation
        if not seen.complete and (seen.compaction is None or seen.delete is None):
            stop = max(-1, self._back - min(reads.left, LOOKBACK_COMMITS - seen.looked_back))
            compaction, delete, back, read = self._scan(range(self._back, stop, -1), reads)
            looked = seen.looked_back + read
            self._back = back
            seen = Seen(
                seen.compaction or compaction,
                seen.delete or delete,
                looked,
                back < 0 or looked >= LOOKBACK_COMMITS,
            )
        self.seen = seen

    def _scan(
        self, versions: range, reads: Reads | None
    ) -> tuple[JobCommit | None, JobCommit | None, int, int]:
        """The newest OPTIMIZE and DELETE among ``versions`` (newest first), the next
        version to read (-1: none left, or a commit file gone to log cleanup) and
        how many commits were read."""
        compaction = delete = None
        read = 0
        for version in versions:
            if (compaction is not None and delete is not None) or (
                reads is not None and reads.left <= 0
            ):
                return compaction, delete, version, read
            if reads is not None:
                reads.left -= 1
            uri = self._log.path_of(f"_delta_log/{version:020d}.json")
            with storage_errors(self._log.uri):
                body = self._lake.objects.read(uri)
            if body is None:
                return compaction, delete, -1, read
            read += 1
            found = _job_commit(version, body)
            if found is not None and found.operation == _OPTIMIZE and compaction is None:
                compaction = found
            elif found is not None and found.operation == _DELETE and delete is None:
                delete = found
        return compaction, delete, max(versions.stop, -1), read


def _job_commit(version: int, body: bytes) -> JobCommit | None:
    info: dict[str, Any] = {}
    removed = added = 0
    for line in body.splitlines():
        if line.startswith(b'{"add"'):
            added += 1
        elif line.startswith(b'{"remove"'):
            removed += 1
        elif b'"commitInfo"' in line:
            info = orjson.loads(line).get("commitInfo") or {}
    operation = str(info.get("operation", ""))
    if operation not in (_OPTIMIZE, _DELETE) or not removed:
        return None
    return JobCommit(
        version,
        int(info.get("timestamp", 0)),
        operation,
        removed,
        added,
        dict(info.get("operationParameters") or {}),
    )


def kept_from(delete: JobCommit) -> int | None:
    """The lowest offset a ``DELETE`` of the truncation job kept (``offset < N``)."""
    predicate = str(delete.parameters.get("predicate", ""))
    head, _, bound = predicate.partition("<")
    return int(bound) if head.strip() == "offset" and bound.strip().isdigit() else None


def read_runs(lake: Lake) -> dict[str, dict[str, Any]]:
    """Each job's last run as ``jobs/runs.py`` recorded it (a job that never ran: absent)."""
    found = {}
    for job in JOBS:
        uri = lake.job_run_uri(job)
        with storage_errors(uri):
            body = lake.objects.read(uri)
        if body is None:
            continue
        try:
            found[job] = dict(orjson.loads(body))
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            raise errors.Internal(f"{uri}: not a job run record: {exc}") from exc
    return found
