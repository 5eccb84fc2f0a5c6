"""Push flow control: seed 003's nack-driven back-off and seed 000's AIMD window.

Two mechanisms, one per seed:

- ``Backoff`` (seed 003): negative acknowledgements pause delivery for 100 ms
  to 60 s. The pause is the larger of two terms: one exponential in the run of
  consecutive nacks (100 ms at the second, doubling up to 60 s: an endpoint
  that nacks everything ends up receiving one message every 30-60 s), and one
  set by the recent nack fraction, a moving average over the last outcomes
  that fades with time (an endpoint nacking one message in five receives one
  about every 500 ms). While a pause is in force, deliveries go out one at a
  time; an isolated nack in a busy stream does not pause it.
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

# The nack fraction is a moving average over about this many outcomes ...
NACK_MEMORY_OUTCOMES = 20
# ... that also fades with time (half-life), so that a long pause forgets the
# failures that caused it: recovery then takes seconds, not minutes.
NACK_HALF_LIFE_S = 30.0
# The fraction term starts pausing delivery when the nack fraction reaches
# ENGAGE and stops when it falls below RELEASE: an isolated nack in a busy
# stream (one in 20 recent outcomes) costs nothing, and a steady nack rate is
# not forgotten during a lucky run of acks.
ENGAGE_NACK_FRACTION = 0.06
RELEASE_NACK_FRACTION = 0.02
# The exponential term starts at the second nack in a row (100 ms, then doubling).
MIN_CONSECUTIVE = 2
# Exponent of the fraction term: pause = min_backoff * 2 ** (K * fraction).
# Calibrated (tests/push/test_push_flow.py) so that one nack in five gives a
# delivery every 0.5 s on average, jitter included (seed 003's example).
FRACTION_EXPONENT = 16.5
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
        self._fraction = 0.0
        self._updated = 0.0
        self._engaged = False
        self.consecutive = 0

    def record(self, nacked: bool, now: float, *, escalate: bool = True) -> None:
        """Count an outcome. ``escalate`` False: a nack from a burst already counted."""
        self._fraction = self.nack_fraction_at(now)
        self._updated = now
        weight = 1.0 / NACK_MEMORY_OUTCOMES
        self._fraction = (1.0 - weight) * self._fraction + (weight if nacked else 0.0)
        if self._fraction >= ENGAGE_NACK_FRACTION:
            self._engaged = True
        elif self._fraction < RELEASE_NACK_FRACTION:
            self._engaged = False
        if nacked:
            if escalate or self.consecutive == 0:
                self.consecutive += 1
        else:
            self.consecutive = 0

    def nack_fraction_at(self, now: float) -> float:
        fade: float = 0.5 ** (max(0.0, now - self._updated) / self._half_life_s)
        return self._fraction * fade

    @property
    def nack_fraction(self) -> float:
        return self._fraction

    def nominal_s(self) -> float:
        """The pause before the next delivery, before jitter; 0 when not backing off."""
        exponential = 0.0
        if self.consecutive >= MIN_CONSECUTIVE:
            steps = min(64, self.consecutive - MIN_CONSECUTIVE)
            exponential = min(self.max_s, self.min_s * 2.0**steps)
        proportional = 0.0
        if self._engaged:
            exponent = FRACTION_EXPONENT * self.nack_fraction
            proportional = min(self.max_s, self.min_s * 2.0**exponent)
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
