"""Helpers for the console tests: API keys named after their role, where screenshots go."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# Keys named after their role: the key itself is "<name>-key".
ROLES = {"admin": "roles/pubsub.admin", "viewer": "roles/pubsub.viewer"}
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


def key_config() -> str:
    """``LAKEPUBSUB_API_KEYS`` for the keys of ``ROLES``, each granted on every project."""
    return json.dumps(
        {
            name: {
                "sha256": hashlib.sha256(f"{name}-key".encode()).hexdigest(),
                "roles": {"*": [role]},
            }
            for name, role in ROLES.items()
        }
    )


def as_key(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {name}-key"}
