"""Authentication settings: API keys, JWT verification and anonymous access,
read from ``LAKEPUBSUB_API_KEYS``, ``LAKEPUBSUB_JWKS_URL``, ``LAKEPUBSUB_JWT_AUDIENCE``,
``LAKEPUBSUB_JWT_ISSUER`` and ``LAKEPUBSUB_ALLOW_ANONYMOUS`` (docs/security.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from lakepubsub import errors
from lakepubsub.resources.iam import role_name, validate_member

# How stale the catalog (and so the IAM policies) may be when a request is
# checked; the engine's own hot path tolerates the same.
POLICY_MAX_STALENESS_S = 1.0
# Request bodies inspected for a second resource (createSubscription's topic)
# larger than this are refused: a real one is a few hundred bytes.
MAX_INSPECTED_BODY_BYTES = 1024 * 1024
# Verified JWT signing keys are refetched from the JWKS URL this often.
JWKS_CACHE_S = 300
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ApiKey:
    name: str
    principal: str
    grants: Mapping[str, frozenset[str]]  # project or "*" -> roles


@dataclass(frozen=True)
class AuthSettings:
    """``api_keys``: SHA-256 hex of the key -> key. ``anonymous``: "true", "false" or
    "loopback". ``jwks_url``/``jwt_audience``/``jwt_issuer``: accept JWTs."""

    api_keys: Mapping[str, ApiKey] = field(default_factory=dict)
    anonymous: str = "loopback"
    jwks_url: str = ""
    jwt_audience: str = ""
    jwt_issuer: str = ""

    @property
    def identities(self) -> bool:
        """Whether any way to authenticate is configured (else checks are off)."""
        return bool(self.api_keys or self.jwks_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AuthSettings:
        env = os.environ if environ is None else environ
        keys = parse_api_keys(env.get("LAKEPUBSUB_API_KEYS", ""))
        jwks_url = env.get("LAKEPUBSUB_JWKS_URL", "").strip()
        audience = env.get("LAKEPUBSUB_JWT_AUDIENCE", "").strip()
        if jwks_url and not audience:
            raise errors.InvalidArgument("LAKEPUBSUB_JWKS_URL needs LAKEPUBSUB_JWT_AUDIENCE")
        anonymous = env.get("LAKEPUBSUB_ALLOW_ANONYMOUS", "").strip().lower()
        if anonymous in ("1", "yes", "on"):
            anonymous = "true"
        elif anonymous in ("0", "no", "off"):
            anonymous = "false"
        elif not anonymous:
            anonymous = "false" if keys or jwks_url else "loopback"
        if anonymous not in ("true", "false", "loopback"):
            raise errors.InvalidArgument(
                "LAKEPUBSUB_ALLOW_ANONYMOUS must be true, false or loopback"
            )
        return cls(keys, anonymous, jwks_url, audience, env.get("LAKEPUBSUB_JWT_ISSUER", ""))


def parse_api_keys(raw: str) -> dict[str, ApiKey]:
    """``{"name": "<sha256 hex>"}`` or ``{"name": {"sha256": ..., "principal": ...,
    "roles": {"<project>|*": ["roles/pubsub.editor", ...]}}}``."""
    if not raw.strip():
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.InvalidArgument("LAKEPUBSUB_API_KEYS is not JSON") from exc
    if not isinstance(doc, dict):
        raise errors.InvalidArgument("LAKEPUBSUB_API_KEYS must be a JSON object")
    keys: dict[str, ApiKey] = {}
    for name, spec in doc.items():
        entry = {"sha256": spec} if isinstance(spec, str) else spec
        if not isinstance(entry, dict):
            raise errors.InvalidArgument(
                f"LAKEPUBSUB_API_KEYS[{name!r}] must be a string or object"
            )
        digest = str(entry.get("sha256", "")).lower()
        if not _SHA256_HEX.fullmatch(digest):
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}]: sha256 must be 64 hex")
        if digest in keys:
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}] repeats another key")
        principal = str(entry.get("principal") or f"apiKey:{name}")
        validate_member(principal)
        if principal in ("allUsers", "allAuthenticatedUsers"):
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}]: not a principal")
        roles = entry.get("roles") or {}
        if not isinstance(roles, dict):
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}].roles must be an object")
        grants = {
            project.removeprefix("projects/"): frozenset(role_name(r) for r in granted)
            for project, granted in roles.items()
        }
        keys[digest] = ApiKey(name, principal, grants)
    return keys
