"""The optimistic-concurrency loop: read, compute, commit; on conflict, back off and redo."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from deltalake.exceptions import CommitFailedError

from lakepubsub import constants, errors, metrics

log = logging.getLogger(__name__)
T = TypeVar("T")


def backoff_s(attempt: int) -> float:
    """Full-jitter exponential back-off for the given zero-based attempt."""
    cap = min(constants.COMMIT_BACKOFF_MAX_S, constants.COMMIT_BACKOFF_BASE_S * 2**attempt)
    return random.uniform(0, cap)


def optimistic(
    attempt: Callable[[], T],
    *,
    table: str,
    attempts: int = constants.COMMIT_ATTEMPTS,
) -> T:
    """Run ``attempt`` until its commit wins, at most ``attempts`` times.

    ``attempt`` must read the state it depends on afresh each time, compute its
    change from that, and commit with a strict compare-and-swap, so a lost race
    raises ``CommitFailedError`` and leaves nothing behind.
    """
    for n in range(attempts):
        try:
            return attempt()
        except CommitFailedError:
            metrics.COMMIT_CONFLICTS.labels(table).inc()
            if n + 1 == attempts:
                break
            time.sleep(backoff_s(n))
    raise errors.Aborted(f"{table}: gave up after {attempts} conflicting commits; retry")
