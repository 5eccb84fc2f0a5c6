"""Push flow control on a simulated clock, at full scale: seed 003's back-off curve
(100 ms - 60 s, its two examples) and seed 000's AIMD window."""

from __future__ import annotations

import heapq
import itertools
import math
import random
import statistics
from collections.abc import Callable

from lakepubsub.push.flow import Backoff, FlowControl, Outcome, Ticket, Window
from lakepubsub.settings.push import MAX_BACKOFF_S, MIN_BACKOFF_S

Answer = Callable[[int, float], Outcome]  # delivery number, time -> outcome


def flow(seed: int = 7, window: int = 4, maximum: int = 1000) -> FlowControl:
    return FlowControl(
        min_backoff_s=MIN_BACKOFF_S,
        max_backoff_s=MAX_BACKOFF_S,
        initial_window=window,
        max_outstanding=maximum,
        rng=random.Random(seed).random,
    )


def simulate(
    control: FlowControl, answer: Answer, duration_s: float, rtt_s: float = 0.02
) -> list[float]:
    """Dispatch times of an endless backlog pushed through ``control``."""
    now, sent = 0.0, []
    pending: list[tuple[float, int, Ticket, Outcome]] = []  # a heap by completion time
    while now < duration_s:
        while pending and pending[0][0] <= now:
            _, _, ticket, outcome = heapq.heappop(pending)
            control.record(ticket, outcome, now)
        if control.slots(now) > 0:
            order = len(sent)
            ticket = control.dispatch(now)
            heapq.heappush(pending, (now + rtt_s, order, ticket, answer(order, now)))
            sent.append(now)
            continue
        wait = control.wait_s(now)
        candidates = ([pending[0][0]] if pending else []) + ([now + wait] if wait > 0 else [])
        now = max(min(candidates, default=math.inf), now + 1e-9)
    return sent


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_one_nack_in_five_gives_a_delivery_about_every_500_ms() -> None:
    times = simulate(flow(), lambda n, _: Outcome.NACK if n % 5 == 4 else Outcome.ACK, 300.0)
    steady = gaps([t for t in times if t > 30.0])
    assert 0.42 <= statistics.mean(steady) <= 0.58, statistics.mean(steady)
    assert 0.35 <= statistics.median(steady) <= 0.65


def test_all_nacked_backs_off_exponentially_to_30_60_s() -> None:
    times = simulate(flow(), lambda n, _: Outcome.NACK, 1500.0)
    intervals = gaps(times)
    # The first nacks pause for seconds; the pause then doubles with every nack.
    assert all(gap < 10.0 for gap in intervals[:6])
    ramp_s = next(t for t, gap in zip(times, intervals, strict=False) if gap >= 30.0)
    assert ramp_s < 150.0
    steady = [g for t, g in zip(times, intervals, strict=False) if t > ramp_s + 120]
    assert len(steady) >= 10
    assert all(29.9 <= g <= 60.1 for g in steady), steady
    assert 40.0 <= statistics.mean(steady) <= 50.0


def test_an_isolated_nack_in_a_busy_stream_costs_nothing() -> None:
    nack_at = 2000
    times = simulate(
        flow(window=1, maximum=1), lambda n, _: Outcome.NACK if n == nack_at else Outcome.ACK, 60.0
    )
    assert max(gaps(times)[nack_at - 5 :]) < 0.021


def test_two_nacks_in_a_row_pause_100_ms() -> None:
    nacked = (2000, 2001)
    times = simulate(
        flow(window=1, maximum=1), lambda n, _: Outcome.NACK if n in nacked else Outcome.ACK, 60.0
    )
    intervals = gaps(times)
    assert 0.099 <= intervals[2001] <= 0.4
    assert max(intervals[2040:]) < 0.021, "full speed again after a few dozen acks"


def test_recovery_after_a_storm_takes_seconds() -> None:
    healed_at = 400.0

    def answer(_: int, now: float) -> Outcome:
        return Outcome.ACK if now >= healed_at else Outcome.NACK

    times = simulate(flow(window=16, maximum=16), answer, healed_at + 75.0)
    first_ok = next(t for t in times if t >= healed_at)
    assert first_ok <= healed_at + 60.1, "the pause in force ends on its own"
    fast = [t for t in times if first_ok + 5.0 <= t < first_ok + 10.0]
    assert len(fast) > 3000, "full speed (800/s) again within 5 s of the first success"


def test_no_nacks_no_pause() -> None:
    times = simulate(flow(), lambda *_: Outcome.ACK, 2.0)
    assert len(times) > 5000
    assert max(gaps(times)) <= 0.021  # only the round trip, never a back-off pause


def test_rare_nacks_barely_slow_a_busy_subscription() -> None:
    def answer(n: int, _: float) -> Outcome:
        return Outcome.NACK if n % 1000 == 999 else Outcome.ACK

    times = simulate(flow(window=64, maximum=64), answer, 10.0)
    # 64 in flight for 20 ms each: 3,200/s without any nack; one in 1,000 costs < 5%.
    assert len(times) / 10.0 > 3_040


def test_slow_start_then_aimd_on_pushback() -> None:
    window = Window(4, 100)
    for _ in range(40):
        window.grow()
    assert window.limit == 44, "slow start: one more per success"
    window.shrink()
    assert window.limit == 22
    for _ in range(23):
        window.grow()
    assert window.limit == 23, "congestion avoidance: one more per window of successes"
    for _ in range(20):
        window.shrink()
    assert window.limit == 1


def test_a_burst_of_pushbacks_halves_the_window_once() -> None:
    control = flow(window=16, maximum=16)
    tickets = [control.dispatch(0.0) for _ in range(16)]
    for ticket in tickets:
        control.record(ticket, Outcome.PUSHBACK, 0.01)
    assert control.window.limit == 8
    assert control.backoff.consecutive == 1, "one escalation for one burst"
    later = control.dispatch(1.0)
    control.record(later, Outcome.PUSHBACK, 1.01)
    assert control.window.limit == 4
    assert control.backoff.consecutive == 2


def test_backoff_bounds() -> None:
    backoff = Backoff(MIN_BACKOFF_S, MAX_BACKOFF_S, rng=lambda: 0.0)
    assert backoff.pause_s() == 0.0
    backoff.record(True, 0.0)
    backoff.record(True, 0.0)
    assert MIN_BACKOFF_S <= backoff.pause_s() <= 0.5
    for i in range(100):
        backoff.record(True, float(i))
    assert backoff.nominal_s() == MAX_BACKOFF_S
    assert backoff.pause_s() == MAX_BACKOFF_S / 2
