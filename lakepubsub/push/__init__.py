"""Push delivery (seeds 000, 002, 003): POST each message to the subscription's endpoint.

``PushService`` runs inside ``lakepubsub serve`` and as ``lakepubsub push``;
see ``dispatcher.py`` for what it guarantees and docs/security.md for the
endpoint rules and the OIDC tokens.
"""

from __future__ import annotations

import signal
import threading

from lakepubsub import Engine
from lakepubsub.push.dispatcher import PushService
from lakepubsub.push.oidc import Signer
from lakepubsub.settings.push import PushSettings

__all__ = ["PushService", "PushSettings", "Signer", "run_forever", "start_from_env"]


def start_from_env(engine: Engine) -> PushService | None:
    """Start push delivery for ``engine``'s lake unless ``LAKEPUBSUB_PUSH`` turns it off."""
    settings = PushSettings.from_env()
    if not settings.enabled:
        return None
    service = PushService(engine, settings)
    service.start()
    return service


def run_forever(engine: Engine) -> None:
    """Push delivery as its own process (``lakepubsub push``) until SIGTERM or SIGINT.

    Any number of these (and of API servers) may serve one lake: they share the
    work through the same leases as pull clients.
    """
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    service = PushService(engine, PushSettings.from_env())
    service.start()
    try:
        while not done.wait(1.0):
            pass
    finally:
        service.stop()
        engine.close()
