"""Service bugs the chaos runs found and that are still open.

A failed check whose every failure matches one of these is reported as
failing because of that bug (``known``), so the short CI form can tell an
open bug from a new one. Each bug has a deterministic reproduction in
``tests.chaos.repro`` and a strict xfail test in ``tests/chaos/test_repros.py``; when a fix
makes the repro pass, delete the entry here and the xfail there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownBug:
    id: str
    summary: str
    pattern: re.Pattern[str]  # matches the failure lines the bug produces


# Empty while every bug the runs found is fixed (their repros stay in
# tests.chaos.repro and tests/chaos/test_repros.py as regression tests).
KNOWN_BUGS: list[KnownBug] = []


def explain(failures: list[str], bugs: list[KnownBug] | None = None) -> list[str]:
    """The ids of the known bugs (``KNOWN_BUGS`` unless given) behind ``failures``;
    empty unless every one is explained."""
    ids = []
    for failure in failures:
        bug = next((b for b in bugs or KNOWN_BUGS if b.pattern.search(failure)), None)
        if bug is None:
            return []
        if bug.id not in ids:
            ids.append(bug.id)
    return ids
