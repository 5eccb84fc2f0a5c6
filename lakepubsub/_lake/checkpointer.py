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
    requested version by reading the commits since the last checkpoint (on S3 every
    commit file read is a GET), then writes the checkpoint from it. A table whose
    log holds what the replay does not model is checkpointed through a delta-rs
    handle kept the same way instead.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, tuple[int, Mapping[str, str] | None, Objects]] = {}
        self._tables: OrderedDict[str, checkpoints.Replay | DeltaTable] = OrderedDict()
        self._cleaned_at: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._current: str | None = None
        self._stopping = False

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
            self._cond.notify()

    def settle(self, prefix: str = "", *, forget: bool = False) -> None:
        """Wait until no checkpoint of a table under ``prefix`` is pending or being
        written; with ``forget``, drop the pending ones instead of waiting for them
        (the tables are about to be deleted)."""
        deadline = time.monotonic() + constants.CHECKPOINT_EXIT_WAIT_S
        with self._cond:
            if forget:
                for uri in [u for u in self._pending if u.startswith(prefix)]:
                    del self._pending[uri]
                for uri in [u for u in self._tables if u.startswith(prefix)]:
                    del self._tables[uri]
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
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=constants.CHECKPOINT_EXIT_WAIT_S)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                uri = next(iter(self._pending))
                version, options, objects = self._pending.pop(uri)
                self._current = uri
            try:
                self._checkpoint(uri, version, options, objects)
            except Exception as exc:  # the next request tries again; reads stay correct
                self._tables.pop(uri, None)
                log.info("checkpoint of %s skipped: %s", uri, exc)
            finally:
                with self._cond:
                    self._current = None
                    self._cond.notify_all()

    def _checkpoint(
        self, uri: str, version: int, options: Mapping[str, str] | None, objects: Objects
    ) -> None:
        with self._cond:
            kept = self._tables.pop(uri, None)
        if not isinstance(kept, DeltaTable):
            kept = self._replay(kept, uri, version, objects)
        if not isinstance(kept, checkpoints.Replay):
            kept = self._delta_rs_checkpoint(kept, uri, version, options)
        with self._cond:
            self._tables[uri] = kept
            while len(self._tables) > constants.CHECKPOINT_HANDLES:
                self._tables.popitem(last=False)
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
        replay: checkpoints.Replay | None, uri: str, version: int, objects: Objects
    ) -> checkpoints.Replay | None:
        """Bring the kept replay to ``version`` and write its checkpoint; None if the
        log holds what the replay does not model. A kept replay that cannot go on
        (its next commit was cleaned up by another process) starts again from the
        newest checkpoint once."""
        attempts = (replay, None) if replay is not None else (None,)
        for attempt in attempts:
            try:
                current = attempt or checkpoints.Replay(objects, uri)
                current.advance(version)
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


def settle_checkpoints(prefix: str = "", *, forget: bool = False) -> None:
    """Wait for this process's background checkpoints of tables under ``prefix``
    (all by default); ``forget`` drops pending ones first (tables being deleted)."""
    _CHECKPOINTS.settle(prefix, forget=forget)
