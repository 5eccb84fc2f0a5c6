"""Turning a lake's intake off: move every topic's rows to its own table, then
remove the intake (``lakepubsub intake drain``).

A lake keeps its intake once it has one, because the rows not moved yet are
found only there. To stop using it, every server is stopped first (the drain
refuses while a peer's heartbeat is fresh: a server still running would append
behind the drain's back), the drain moves what is left, checks that each topic's
table holds every offset the intake held, and removes the intake table and its
recorded place. Servers restarted with ``LAKEPUBSUB_INTAKE=0`` then commit to
each topic's table, numbering on from its head.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lakepubsub import errors
from lakepubsub._lake import Lake
from lakepubsub._lake.storage import INTAKE_POINTER
from lakepubsub.peering.membership import PEERS_DIR, expiry_s
from lakepubsub.publish.intake import Intake


@dataclass(frozen=True)
class Drained:
    topics: int  # topics whose rows were in the intake's live files
    rows: int  # those rows, all in the topics' tables now
    uri: str  # the intake table that was removed


def live_peers(lake: Lake) -> list[str]:
    """Servers whose heartbeat object is fresh."""
    now = time.time()
    fresh_s = expiry_s(lake.is_s3)
    return [key for key, modified in lake.list_objects(PEERS_DIR) if now - modified <= fresh_s]


def drain(lake: Lake, intake: Intake) -> Drained:
    """Move every topic's intake rows to its table and remove the intake."""
    running = live_peers(lake)
    if running:
        raise errors.FailedPrecondition(
            f"{len(running)} server(s) still run on this lake ({', '.join(running)}): "
            "stop them before the intake is drained"
        )
    intake.move_all()
    left = intake.unmoved()
    if left:
        raise errors.Aborted(
            f"{len(left)} topic(s) still have rows only in the intake "
            f"({', '.join(sorted(left)[:5])}); nothing was removed, run the drain again"
        )
    topics, rows = intake.held()
    intake.close()
    lake.remove_table(intake.uri)
    lake.objects.delete(lake.uri(INTAKE_POINTER))
    return Drained(topics, rows, intake.uri)
