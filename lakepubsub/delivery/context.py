"""What the parts of the delivery room share in one process: ``Deliveries``, each
subscription's ``Dispatcher`` and its ``CycleTables``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lakepubsub._lake import Lake
from lakepubsub.delivery.planning import DeadLetterSink
from lakepubsub.settings import Settings


def _alone() -> bool:
    return False


@dataclass(frozen=True)
class DeliveryContext:
    """The lake and the settings, where dead letters go, and whether this process
    serves the lake with the others (peering: ``Engine._peered``)."""

    lake: Lake
    settings: Settings
    dead_letter: DeadLetterSink
    peered: Callable[[], bool] = _alone
