"""The doors' settings: who may call (API keys, JWTs, anonymous callers), how
often the console samples the lake, and the gRPC door's own listening address.

Read here with the rest of the environment; ``api/auth/`` turns the keys into
principals and grants (it checks the IAM names, which this package does not
know), and ``api/console/`` samples at ``console_sample_s``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from lakepubsub import errors

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
ANONYMOUS_MODES = ("true", "false", "loopback")


@dataclass(frozen=True)
class KeySpec:
    """One entry of ``LAKEPUBSUB_API_KEYS``, as written (names not yet checked)."""

    name: str
    sha256: str  # lower-case hex
    principal: str  # "" when the entry names none
    roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # project or "*"


@dataclass(frozen=True)
class DoorSettings:
    """``api_keys``: ``LAKEPUBSUB_API_KEYS``. ``anonymous``: "true", "false" or
    "loopback" (``LAKEPUBSUB_ALLOW_ANONYMOUS``; by default loopback callers only, and
    none once keys or JWTs are configured). ``jwks_url``/``jwt_audience``/
    ``jwt_issuer``: accept JWTs. ``console_sample_s``: None for the console's own."""

    api_keys: tuple[KeySpec, ...] = ()
    anonymous: str = "loopback"
    jwks_url: str = ""
    jwt_audience: str = ""
    jwt_issuer: str = ""
    console_sample_s: float | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DoorSettings:
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
        if anonymous not in ANONYMOUS_MODES:
            raise errors.InvalidArgument(
                "LAKEPUBSUB_ALLOW_ANONYMOUS must be true, false or loopback"
            )
        sample = env.get("LAKEPUBSUB_CONSOLE_SAMPLE_S", "").strip()
        try:
            sample_s = float(sample) if sample else None
        except ValueError as exc:
            raise errors.InvalidArgument("LAKEPUBSUB_CONSOLE_SAMPLE_S is not a number") from exc
        if sample_s is not None and sample_s <= 0:
            raise errors.InvalidArgument("LAKEPUBSUB_CONSOLE_SAMPLE_S must be positive")
        return cls(
            keys,
            anonymous,
            jwks_url,
            audience,
            env.get("LAKEPUBSUB_JWT_ISSUER", ""),
            sample_s,
        )


def parse_api_keys(raw: str) -> tuple[KeySpec, ...]:
    """``{"name": "<sha256 hex>"}`` or ``{"name": {"sha256": ..., "principal": ...,
    "roles": {"<project>|*": ["roles/pubsub.editor", ...]}}}``."""
    if not raw.strip():
        return ()
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.InvalidArgument("LAKEPUBSUB_API_KEYS is not JSON") from exc
    if not isinstance(doc, dict):
        raise errors.InvalidArgument("LAKEPUBSUB_API_KEYS must be a JSON object")
    specs: list[KeySpec] = []
    seen: set[str] = set()
    for name, spec in doc.items():
        entry = {"sha256": spec} if isinstance(spec, str) else spec
        if not isinstance(entry, dict):
            raise errors.InvalidArgument(
                f"LAKEPUBSUB_API_KEYS[{name!r}] must be a string or object"
            )
        digest = str(entry.get("sha256", "")).lower()
        if not _SHA256_HEX.fullmatch(digest):
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}]: sha256 must be 64 hex")
        if digest in seen:
            raise errors.InvalidArgument(f"LAKEPUBSUB_API_KEYS[{name!r}] repeats another key")
        seen.add(digest)
        roles = entry.get("roles") or {}
        if not isinstance(roles, dict) or not all(
            isinstance(granted, list) and all(isinstance(r, str) for r in granted)
            for granted in roles.values()
        ):
            raise errors.InvalidArgument(
                f"LAKEPUBSUB_API_KEYS[{name!r}].roles must map projects to lists of roles"
            )
        specs.append(
            KeySpec(
                name,
                digest,
                str(entry.get("principal") or ""),
                {str(p): tuple(granted) for p, granted in roles.items()},
            )
        )
    return tuple(specs)


@dataclass(frozen=True)
class GrpcListen:
    """Where the gRPC door also listens by itself (``LAKEPUBSUB_GRPC_ADDRESS``,
    ``host:port``; ``serve --grpc-port`` sets it), beside the one port it shares
    with REST; empty: only there. With ``tls_cert`` and ``tls_key`` (PEM files,
    ``LAKEPUBSUB_GRPC_TLS_CERT``/``_KEY``, which ``serve --tls-cert``/``--tls-key``
    set) it serves TLS."""

    address: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GrpcListen:
        env = os.environ if environ is None else environ
        address = env.get("LAKEPUBSUB_GRPC_ADDRESS", "").strip()
        host, _, port = address.rpartition(":")
        if address and not (host and port.isdigit() and int(port) < 2**16):
            raise errors.InvalidArgument("LAKEPUBSUB_GRPC_ADDRESS must be host:port")
        cert = env.get("LAKEPUBSUB_GRPC_TLS_CERT", "").strip()
        key = env.get("LAKEPUBSUB_GRPC_TLS_KEY", "").strip()
        if bool(cert) != bool(key):
            raise errors.InvalidArgument(
                "LAKEPUBSUB_GRPC_TLS_CERT and LAKEPUBSUB_GRPC_TLS_KEY go together"
            )
        return cls(address, cert, key)
