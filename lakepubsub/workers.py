"""This process's workers, one per topic or subscription uid, made on first use: the
topics' publishers (``publish/publishers.py``) and the subscriptions' dispatchers
(``delivery/deliveries.py``) are kept so."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from lakepubsub import errors

W = TypeVar("W")


def _always(_worker: object) -> bool:
    return True


class Workers(Generic[W]):
    """Workers by uid. Thread-safe; once `shut`, it makes no more (``Unavailable``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[str, W] = {}
        self.closed = False

    def get(self, uid: str, make: Callable[[], W], *, usable: Callable[[W], bool] = _always) -> W:
        """``uid``'s worker; ``make`` makes one when it has none or the one it has is not
        ``usable``."""
        with self._lock:
            if self.closed:
                raise errors.Unavailable("the engine is shutting down")
            worker = self._workers.get(uid)
            if worker is None or not usable(worker):
                worker = make()
                self._workers[uid] = worker
            return worker

    def find(self, uid: str) -> W | None:
        """``uid``'s worker, if it has one; makes none."""
        with self._lock:
            return self._workers.get(uid)

    def all(self) -> list[W]:
        with self._lock:
            return list(self._workers.values())

    def remove(self, uid: str, worker: W | None = None) -> W | None:
        """Take ``uid``'s worker out (only if it is ``worker``, when that is given); the
        one taken, for the caller to stop."""
        with self._lock:
            found = self._workers.get(uid)
            if found is None or (worker is not None and found is not worker):
                return None
            del self._workers[uid]
            return found

    def shut(self) -> list[W]:
        """Make no more; every worker, taken out, for the caller to stop."""
        with self._lock:
            self.closed = True
            workers = list(self._workers.values())
            self._workers.clear()
        return workers
