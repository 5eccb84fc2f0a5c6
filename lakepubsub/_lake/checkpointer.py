"""The background checkpoints of the tables this process commits directly
(``deltalog.TableLog`` requests them): one thread per process, off the hot path."""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from lakepubsub import constants
from lakepubsub._lake import checkpoints
from lakepubsub._lake.objects import Objects
from lakepubsub._lake.storage import log_race

log = logging.getLogger(__name__)


class _Checkpointer:
    """One background thread per process writing checkpoints of the tables committed
    here, and removing expired log files after them.

    It keeps each table's log state (``checkpoints.Replay``) and brings it to the
    requested version, then writes the checkpoint from it. The commits this process
    made are handed to it as they land (``committed``: the bytes it wrote, so no
    read, and on S3 no GET), and between checkpoints it applies them a slice at a
    time (``constants.CHECKPOINT_APPLY_S``, ``CHECKPOINT_SLICE``); it reads only
    the commits of other writers. (On S3 ``Objects.written`` holds the same bytes;
    on a local lake, reading them back from their files instead measured worse:
    callback p99 7.5 against 6.2 ms, bench/results/ab-ckpt-versions.md.) A table
    whose log holds what the replay does not model is checkpointed through a
    delta-rs handle kept the same way instead.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, tuple[int, Mapping[str, str] | None, Objects]] = {}
        self._tables: OrderedDict[str, checkpoints.Replay | DeltaTable] = OrderedDict()
        self._cleaned_at: dict[str, float] = {}
        # Commit files this process wrote, by table and version, not yet applied.
        self._known: OrderedDict[str, dict[int, bytes]] = OrderedDict()
        self._forgets = 0  # bumped when tables are forgotten (being deleted)
        self._apply_due = 0.0
        self._thread: threading.Thread | None = None
        self._current: str | None = None
        self._stopping = False

    def committed(self, uri: str, version: int, body: bytes) -> None:
        """This process wrote ``body`` as ``uri``'s commit ``version``. Kept for the
        replay without its leading commitInfo (the replay skips it; it may carry a
        whole data file). The thread is woken only when none were waiting: it takes
        them on its own schedule."""
        if body.startswith(b'{"commitInfo"'):
            body = body.partition(b"\n")[2]
        with self._cond:
            if isinstance(self._tables.get(uri), DeltaTable):
                return  # checkpointed through delta-rs: it reads the log itself
            known = self._known.get(uri)
            if known is None:
                known = self._known[uri] = {}
                while len(self._known) > constants.CHECKPOINT_HANDLES:
                    self._known.popitem(last=False)  # the table least recently begun
            if len(known) >= constants.CHECKPOINT_KNOWN_MAX:
                known.clear()  # not checkpointed for long: the replay reads them
            if not known:
                self._cond.notify_all()  # at most once per CHECKPOINT_APPLY_S while busy
            known[version] = body

    def request(
        self,
        uri: str,
        version: int,
        storage_options: Mapping[str, str] | None,
        objects: Objects,
    ) -> None:
        """Checkpoint ``uri`` at ``version`` (or a later version requested meanwhile)."""
        with self._cond:
            if self._stopping:
                return
            earlier = self._pending.get(uri, (-1, None, objects))[0]
            self._pending[uri] = (max(version, earlier), storage_options, objects)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="checkpoints", daemon=True)
                self._thread.start()
                atexit.register(self.stop)
            self._cond.notify_all()

    def settle(self, prefix: str = "", *, forget: bool = False) -> None:
        """Wait until no checkpoint of a table under ``prefix`` is pending or being
        written; with ``forget``, drop the pending ones instead of waiting for them
        (the tables are about to be deleted)."""
        deadline = time.monotonic() + constants.CHECKPOINT_EXIT_WAIT_S
        with self._cond:
            if forget:
                self._forgets += 1
                for kept in (self._pending, self._tables, self._known):
                    for uri in [u for u in kept if u.startswith(prefix)]:
                        del kept[uri]
            while (remaining := deadline - time.monotonic()) > 0 and (
                any(u.startswith(prefix) for u in self._pending)
                or (self._current is not None and self._current.startswith(prefix))
            ):
                self._cond.wait(timeout=remaining)

    def stop(self) -> None:
        """Let a checkpoint in progress finish (a thread killed inside delta-rs at
        interpreter exit can crash the process); pending ones are dropped."""
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=constants.CHECKPOINT_EXIT_WAIT_S)

    def _run(self) -> None:
        while True:
            with self._cond:
                job = self._next_job()
                if job is None:
                    return
                uri, request = job
                self._current = uri
            try:
                if request is None:
                    self._apply_known(uri)
                else:
                    self._checkpoint(uri, *request)
            except Exception as exc:  # the next request tries again; reads stay correct
                with self._cond:
                    self._tables.pop(uri, None)
                log.info("checkpoint of %s skipped: %s", uri, exc)
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()

    def _next_job(self) -> tuple[str, tuple[int, Mapping[str, str] | None, Objects] | None] | None:
        """Under the lock, wait for the next job: a requested checkpoint (uri and
        request), else, once ``CHECKPOINT_APPLY_S`` passed, a table whose own
        commits wait for its kept replay (uri and None); None when stopping."""
        while not self._stopping:
            if self._pending:
                uri = next(iter(self._pending))
                return uri, self._pending.pop(uri)
            now = time.monotonic()
            ready = self._applicable()
            if ready is not None and now >= self._apply_due:
                return ready, None
            if ready is None:
                self._cond.wait()
            else:
                self._cond.wait(timeout=self._apply_due - now)
        return None

    def _applicable(self) -> str | None:
        """A table with a kept replay and own commits waiting for it (under the lock)."""
        for uri, known in self._known.items():
            if known and isinstance(self._tables.get(uri), checkpoints.Replay):
                return uri
        return None

    def _apply_known(self, uri: str) -> None:
        """Apply this process's commits of ``uri`` to its kept replay, between
        checkpoints, ``CHECKPOINT_SLICE`` at a time with a pause between slices:
        the interpreter lock is held for a millisecond or so at a time."""
        with self._cond:
            kept, forgets = self._tables.pop(uri, None), self._forgets
        if not isinstance(kept, checkpoints.Replay):
            return
        while True:
            with self._cond:
                known = self._known.get(uri, {})
                for stale in [v for v in known if v <= kept.state.version]:
                    del known[stale]
                if not known or self._stopping:
                    break
                target = min(max(known), kept.state.version + constants.CHECKPOINT_SLICE)
                batch = {v: known.pop(v, None) for v in range(kept.state.version + 1, target + 1)}
            # Versions missing from the batch are another writer's: read from storage.
            kept.advance(target, {v: b for v, b in batch.items() if b is not None})
            kept.state.adds.fold(constants.CHECKPOINT_SLICE * 8)
            kept.state.removes.fold(constants.CHECKPOINT_SLICE * 8)
            time.sleep(constants.CHECKPOINT_PAUSE_S)
        with self._cond:
            self._apply_due = time.monotonic() + constants.CHECKPOINT_APPLY_S
        self._keep(uri, kept, forgets)

    def _keep(self, uri: str, kept: checkpoints.Replay | DeltaTable, forgets: int) -> None:
        with self._cond:
            if forgets != self._forgets:
                return  # tables were forgotten meanwhile; maybe this one
            self._tables[uri] = kept
            while len(self._tables) > constants.CHECKPOINT_HANDLES:
                evicted, _ = self._tables.popitem(last=False)
                self._known.pop(evicted, None)

    def _checkpoint(
        self, uri: str, version: int, options: Mapping[str, str] | None, objects: Objects
    ) -> None:
        with self._cond:
            kept, forgets = self._tables.pop(uri, None), self._forgets
            known = dict(self._known.get(uri, {}))
        if not isinstance(kept, DeltaTable):
            kept = self._replay(kept, uri, version, objects, known)
        if not isinstance(kept, checkpoints.Replay):
            kept = self._delta_rs_checkpoint(kept, uri, version, options)
        with self._cond:
            known = self._known.get(uri, {})
            for applied in [v for v in known if v <= version]:
                del known[applied]
        self._keep(uri, kept, forgets)
        now = time.monotonic()
        spacing_s = (
            constants.S3_LOG_CLEANUP_SPACING_S if objects.is_s3 else constants.LOG_CLEANUP_SPACING_S
        )
        if uri not in self._cleaned_at or now - self._cleaned_at[uri] >= spacing_s:
            self._cleaned_at[uri] = now
            if isinstance(kept, checkpoints.Replay):
                # Opens from the checkpoint just written, with no commits to replay.
                kept = DeltaTable(
                    uri, version=version, storage_options=dict(options) if options else None
                )
            kept.cleanup_metadata()

    @staticmethod
    def _replay(
        replay: checkpoints.Replay | None,
        uri: str,
        version: int,
        objects: Objects,
        known: Mapping[int, bytes],
    ) -> checkpoints.Replay | None:
        """Bring the kept replay to ``version`` and write its checkpoint; None if the
        log holds what the replay does not model. A kept replay that cannot go on
        (its next commit was cleaned up by another process) starts again from the
        newest checkpoint once."""
        attempts = (replay, None) if replay is not None else (None,)
        for attempt in attempts:
            try:
                current = attempt or checkpoints.Replay(objects, uri)
                current.advance(version, known)
                current.write()
                return current
            except checkpoints.Unsupported as exc:
                if attempt is None:
                    log.info("checkpoints of %s go through delta-rs: %s", uri, exc)
        return None

    @staticmethod
    def _delta_rs_checkpoint(
        table: DeltaTable | None, uri: str, version: int, options: Mapping[str, str] | None
    ) -> DeltaTable:
        # A pinned version: delta-rs refuses a local log listed while it grows
        # (storage.log_race) only past the version it is asked to load.
        if table is None:
            table = DeltaTable(
                uri, version=version, storage_options=dict(options) if options else None
            )
        elif table.version() < version:
            try:  # reads only the commits since the handle's version
                table.update_incremental()
            except DeltaError as exc:
                if not log_race(exc):
                    raise
                table.load_as_version(version)
        table.create_checkpoint()
        return table


_CHECKPOINTS = _Checkpointer()


def request(
    uri: str, version: int, storage_options: Mapping[str, str] | None, objects: Objects
) -> None:
    """Checkpoint ``uri`` at ``version`` in the background (``_Checkpointer.request``)."""
    _CHECKPOINTS.request(uri, version, storage_options, objects)


def committed(uri: str, version: int, body: bytes) -> None:
    """This process wrote ``body`` as ``uri``'s commit ``version`` (``_Checkpointer.committed``)."""
    _CHECKPOINTS.committed(uri, version, body)


def settle_checkpoints(prefix: str = "", *, forget: bool = False) -> None:
    """Wait for this process's background checkpoints of tables under ``prefix``
    (all by default); ``forget`` drops pending ones first (tables being deleted)."""
    _CHECKPOINTS.settle(prefix, forget=forget)
