"""Helpers for the access-control tests: API keys, servers configured with them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx

P = "/v1/projects/demo"


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_config(keys: dict[str, dict[str, Any]]) -> str:
    """``LAKEPUBSUB_API_KEYS`` for keys named after themselves: the key is ``<name>-key``."""
    return json.dumps(
        {name: {"sha256": sha256(f"{name}-key"), **spec} for name, spec in keys.items()}
    )


def as_key(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {name}-key"}


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def denied(response: httpx.Response, status: int = 403) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    assert error["status"] == {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}[status]
