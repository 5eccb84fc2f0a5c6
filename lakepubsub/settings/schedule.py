"""The built-in job schedule's settings (``lakepubsub/scheduler.py`` runs it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Default intervals, as docs/operations.md sizes them for a small lake.
DEFAULT_COMPACT_INTERVAL_S = 600.0
DEFAULT_TRUNCATE_INTERVAL_S = 900.0
DEFAULT_GC_INTERVAL_S = 3600.0


@dataclass(frozen=True)
class ScheduleSettings:
    """Intervals of the built-in jobs, in seconds; 0 disables a job."""

    compact_interval_s: float = DEFAULT_COMPACT_INTERVAL_S
    truncate_interval_s: float = DEFAULT_TRUNCATE_INTERVAL_S
    gc_interval_s: float = DEFAULT_GC_INTERVAL_S

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> ScheduleSettings:
        """``LAKEPUBSUB_COMPACT_INTERVAL_S``, ``…_TRUNCATE_…``, ``…_GC_…``, then ``overrides``."""
        env = os.environ if environ is None else environ
        values = {
            name: float(env[f"LAKEPUBSUB_{name.upper()}"])
            for name in ("compact_interval_s", "truncate_interval_s", "gc_interval_s")
            if env.get(f"LAKEPUBSUB_{name.upper()}")
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def intervals(self) -> dict[str, float]:
        return {
            "compact": self.compact_interval_s,
            "truncate": self.truncate_interval_s,
            "gc": self.gc_interval_s,
        }
