"""Push flow control: seed 003's nack-driven back-off and seed 000's AIMD window.

Two mechanisms, one per seed:

- ``Backoff`` (seed 003): negative acknowledgements pause delivery for 100 ms
  to 60 s. The pause is the larger of an exponential term, doubling with each
  consecutive nack (100 ms, 200 ms, ... 60 s: an endpoint that nacks everything
  ends up receiving one message every 30-60 s), and a term set by the recent
  nack fraction (an endpoint nacking one message in five receives one about
  every 500 ms). While a pause is in force, deliveries go out one at a time.
- ``Window`` (seed 000): the number of concurrent push requests. It grows on
  every success (slow start, then additively by one per window of successes)
  and halves on a push-back (HTTP 503 or 429: seed 000's UNAVAILABLE).

Several requests in flight fail together when an endpoint breaks; a failure
escalates the back-off or shrinks the window only if its request was sent
after the previous escalation, so one burst counts once (as TCP reacts once
per round trip).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass

# Half-life of the nack-fraction estimate: long enough to average a few dozen
# outcomes at the rates the back-off allows, short enough that a 60 s pause
# forgets the failures that caused it (recovery then takes seconds, not minutes).
NACK_HALF_LIFE_S = 10.0
# The fraction is taken over at least this many outcomes, so the first nack of
# an idle subscription reads as 10%, not 100%.
MIN_OUTCOMES = 10.0
# Below this nack fraction the fraction term does not pause delivery at all.
MIN_NACK_FRACTION = 0.02
# Exponent of the fraction term: pause = min_backoff * 2 ** (K * fraction).
# Calibrated (see tests/push/test_push_flow.py) so that one nack in five
# gives a nominal 0.67 s pause, 0.5 s on average after jitter (seed 003's example).
FRACTION_EXPONENT = 13.7
# A pause is drawn uniformly from [JITTER_LOW * nominal, nominal]: all-nack
# endpoints then see a delivery every 30-60 s, as seed 003 says.
JITTER_LOW = 0.5


class Outcome(enum.Enum):
    ACK = "ack"  # 102, 200, 201, 202, 204
    NACK = "nack"  # any other status, a timeout, a connection error
    PUSHBACK = "pushback"  # 503 / 429: a nack that also asks for less concurrency


class Backoff:
    """The nack-driven pause between deliveries (seed 003)."""

    def __init__(
        self,
        min_s: float,
        max_s: float,
        *,
        half_life_s: float = NACK_HALF_LIFE_S,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.min_s = min_s
        self.max_s = max_s
        self._half_life_s = half_life_s
        self._rng = rng
        self._nacks = 0.0  # time-decayed counts
        self._outcomes = 0.0
        self._updated = 0.0
        self.consecutive = 0

    def record(self, nacked: bool, now: float, *, escalate: bool = True) -> None:
        """Count an outcome. ``escalate`` False: a nack from a burst already counted."""
        decay = 0.5 ** (max(0.0, now - self._updated) / self._half_life_s)
        self._nacks *= decay
        self._outcomes *= decay
        self._updated = now
        self._outcomes += 1.0
        if nacked:
            self._nacks += 1.0
            if escalate or self.consecutive == 0:
                self.consecutive += 1
        else:
            self.consecutive = 0

    @property
    def nack_fraction(self) -> float:
        return self._nacks / max(self._outcomes, MIN_OUTCOMES)

    def nominal_s(self) -> float:
        """The pause before the next delivery, before jitter; 0 when not backing off."""
        exponential = 0.0
        if self.consecutive:
            exponential = min(self.max_s, self.min_s * 2.0 ** min(64, self.consecutive - 1))
        fraction = self.nack_fraction
        proportional = 0.0
        if fraction >= MIN_NACK_FRACTION:
            proportional = min(self.max_s, self.min_s * 2.0 ** (FRACTION_EXPONENT * fraction))
        return max(exponential, proportional)

    def pause_s(self) -> float:
        """A jittered pause; 0 when not backing off, never below ``min_s`` otherwise."""
        nominal = self.nominal_s()
        if nominal <= 0.0:
            return 0.0
        return max(self.min_s, nominal * (JITTER_LOW + (1.0 - JITTER_LOW) * self._rng()))


class Window:
    """The concurrent-request window (seed 000's AIMD on UNAVAILABLE)."""

    def __init__(self, initial: int, maximum: int) -> None:
        self.maximum = float(maximum)
        self.size = float(min(initial, maximum))
        self._threshold = self.maximum  # slow start below it

    def grow(self) -> None:
        step = 1.0 if self.size < self._threshold else 1.0 / self.size
        self.size = min(self.maximum, self.size + step)

    def shrink(self) -> None:
        self.size = max(1.0, self.size / 2.0)
        self._threshold = self.size

    @property
    def limit(self) -> int:
        return max(1, int(self.size))


@dataclass
class Ticket:
    """One dispatched delivery: its sequence number and send time."""

    seq: int
    sent_at: float


class FlowControl:
    """Decides how many deliveries may go out now; fed every delivery's outcome.

    Not thread-safe: one subscription's push loop owns it.
    """

    def __init__(
        self,
        *,
        min_backoff_s: float,
        max_backoff_s: float,
        initial_window: int,
        max_outstanding: int,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.backoff = Backoff(min_backoff_s, max_backoff_s, rng=rng)
        self.window = Window(initial_window, max_outstanding)
        self.in_flight = 0
        self._seq = 0
        self._backoff_epoch = 0  # failures of tickets at or before this were counted
        self._window_epoch = 0
        self._not_before = 0.0

    @property
    def backing_off(self) -> bool:
        return self.backoff.nominal_s() > 0.0

    def slots(self, now: float) -> int:
        """Deliveries that may be dispatched now."""
        if now < self._not_before:
            return 0
        limit = 1 if self.backing_off else self.window.limit
        return max(0, limit - self.in_flight)

    def wait_s(self, now: float) -> float:
        """How long until the current pause ends (0 if none)."""
        return max(0.0, self._not_before - now)

    def dispatch(self, now: float) -> Ticket:
        self._seq += 1
        self.in_flight += 1
        return Ticket(self._seq, now)

    def cancel(self, ticket: Ticket) -> None:
        """A dispatched delivery that never reached the endpoint (nothing learned)."""
        self.in_flight = max(0, self.in_flight - 1)

    def record(self, ticket: Ticket, outcome: Outcome, now: float) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        failed = outcome is not Outcome.ACK
        escalate = ticket.seq > self._backoff_epoch
        self.backoff.record(failed, now, escalate=escalate)
        if failed and escalate:
            self._backoff_epoch = self._seq
        if outcome is Outcome.ACK:
            self.window.grow()
        elif outcome is Outcome.PUSHBACK and ticket.seq > self._window_epoch:
            self.window.shrink()
            self._window_epoch = self._seq
        pause = self.backoff.pause_s()
        if pause > 0.0:
            self._not_before = max(self._not_before, ticket.sent_at + pause)
