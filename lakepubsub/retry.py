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


def backoff_s(attempt: int, attempt_s: float = 0.0) -> float:
    """Full-jitter exponential back-off for the given zero-based attempt.

    The base is the duration of the attempt that lost: contenders whose read-
    compute-commit takes 400 ms on S3 must spread out over that scale, not 2 ms.
    """
    base = max(constants.COMMIT_BACKOFF_BASE_S, attempt_s)
    return random.uniform(0, min(constants.COMMIT_BACKOFF_MAX_S, base * 2**attempt))


def contender_backoff_s(attempt_s: float) -> float:
    """A pause of at most one attempt's duration, at random, not growing with attempts.

    For writers that contend all the time rather than in bursts, such as several
    processes publishing to one topic: a winner commits again at once, so a loser
    whose pauses grow exponentially falls further behind with every loss. Measured
    on a local lake (bench/scaleout_bench.py, 2 processes on one topic, 8 clients):
    exponential back-off left one process 0-1 % of the messages at 0.57x the
    throughput of one process; this pause shared them 48 / 52 % at 0.77x
    (bench/results/scaleout.md). On S3 the loser still starves: it must first read
    the winner's commits.
    """
    return random.uniform(0, max(constants.COMMIT_BACKOFF_BASE_S, attempt_s))


class Budget:
    """How long an optimistic loop keeps trying: at least ``attempts`` tries, and
    more while fewer than ``seconds`` have passed (contention is bursty)."""

    def __init__(self, attempts: int, seconds: float) -> None:
        self.attempts = attempts
        self.seconds = seconds
        self.started = time.monotonic()
        self.tries = 0

    def another(self) -> bool:
        self.tries += 1
        return self.tries < self.attempts or time.monotonic() - self.started < self.seconds


def optimistic(
    attempt: Callable[[], T],
    *,
    table: str,
    attempts: int = constants.COMMIT_ATTEMPTS,
    budget_s: float = constants.COMMIT_BUDGET_S,
    on_conflict: Callable[[], None] | None = None,
) -> T:
    """Run ``attempt`` until its commit wins or the retry budget is spent.

    ``attempt`` must read the state it depends on afresh each time, compute its
    change from that, and commit with a strict compare-and-swap, so a lost race
    raises ``CommitFailedError`` and leaves nothing behind.
    """
    budget = Budget(attempts, budget_s)
    while True:
        started = time.monotonic()
        try:
            return attempt()
        except CommitFailedError:
            metrics.COMMIT_CONFLICTS.labels(table).inc()
            if on_conflict is not None:
                on_conflict()
            if not budget.another():
                break
            time.sleep(backoff_s(budget.tries - 1, time.monotonic() - started))
    raise errors.Aborted(
        f"{table}: gave up after {budget.tries} conflicting commits in "
        f"{time.monotonic() - budget.started:.1f} s; retry"
    )
