"""Authentication settings: API keys, JWT verification and anonymous access.

``lakepubsub/settings/doors.py`` reads them from the environment (docs/security.md);
this module checks each key's principal and roles against IAM's names and keeps
the keys by digest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lakepubsub import errors
from lakepubsub.resources.iam import role_name, validate_member
from lakepubsub.settings.doors import DoorSettings, KeySpec
from lakepubsub.settings.doors import parse_api_keys as parse_key_specs

# How stale the catalog (and so the IAM policies) may be when a request is
# checked; the engine's own hot path tolerates the same.
POLICY_MAX_STALENESS_S = 1.0
# Request bodies inspected for a second resource (createSubscription's topic)
# larger than this are refused: a real one is a few hundred bytes.
MAX_INSPECTED_BODY_BYTES = 1024 * 1024
# Verified JWT signing keys are refetched from the JWKS URL this often.
JWKS_CACHE_S = 300


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
        return cls.of(DoorSettings.from_env(environ))

    @classmethod
    def of(cls, doors: DoorSettings) -> AuthSettings:
        return cls(
            {spec.sha256: api_key(spec) for spec in doors.api_keys},
            doors.anonymous,
            doors.jwks_url,
            doors.jwt_audience,
            doors.jwt_issuer,
        )


def api_key(spec: KeySpec) -> ApiKey:
    """A configured key, its principal and roles checked against IAM's names."""
    principal = spec.principal or f"apiKey:{spec.name}"
    validate_member(principal)
    if principal in ("allUsers", "allAuthenticatedUsers"):
        raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{spec.name!r}]: not a principal")
    grants = {
        project.removeprefix("projects/"): frozenset(role_name(r) for r in granted)
        for project, granted in spec.roles.items()
    }
    return ApiKey(spec.name, principal, grants)


def parse_api_keys(raw: str) -> dict[str, ApiKey]:
    """``LAKEPUBSUB_API_KEYS``'s value as keys by digest (see ``parse_key_specs``)."""
    return {spec.sha256: api_key(spec) for spec in parse_key_specs(raw)}
