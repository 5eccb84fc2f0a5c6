"""Where this process's peer server listens (``lakepubsub/peering/`` runs it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class PeerSettings:
    """``LAKEPUBSUB_PEERING=false`` turns peering off; ``LAKEPUBSUB_PEER_HOST`` (bind,
    default 127.0.0.1), ``LAKEPUBSUB_PEER_ADVERTISE`` and ``LAKEPUBSUB_PEER_PORT``
    (default: any free port; else the first free one of the peering's port range from
    it) place the peer server."""

    enabled: bool = True
    bind_host: str = "127.0.0.1"
    advertise_host: str | None = None
    port: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PeerSettings:
        env = os.environ if environ is None else environ
        return cls(
            enabled=env.get("LAKEPUBSUB_PEERING", "true").lower()
            not in ("0", "false", "no", "off"),
            bind_host=env.get("LAKEPUBSUB_PEER_HOST", "127.0.0.1"),
            advertise_host=env.get("LAKEPUBSUB_PEER_ADVERTISE") or None,
            port=int(env.get("LAKEPUBSUB_PEER_PORT", "0")),
        )
