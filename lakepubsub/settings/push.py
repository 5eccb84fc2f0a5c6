"""Push delivery settings (``lakepubsub/push/`` delivers with them)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from lakepubsub import errors

# Seed 003: push back-off pauses delivery for 100 ms to 60 s.
MIN_BACKOFF_S = 0.1
MAX_BACKOFF_S = 60.0
# Pub/Sub's push window starts at a single digit and grows on success (slow start).
INITIAL_WINDOW = 4
# Messages one subscription may have out for push at once, per process.
MAX_OUTSTANDING = 1_000
# Concurrent requests to one endpoint (scheme, host, port), per process, over all
# subscriptions: a safety valve against flooding one server.
ENDPOINT_CONCURRENCY = 100
# Bytes of an endpoint's response body read before the connection is dropped;
# only the status code matters.
MAX_RESPONSE_BYTES = 64 * 1024
# How often a dispatcher rereads the catalog for push subscriptions and config changes.
REFRESH_S = 1.0
# Connecting to an endpoint must succeed within this, whatever the ack deadline.
CONNECT_TIMEOUT_S = 5.0
# Lifetime of an OIDC token minted for an endpoint (Google's are valid for one hour).
TOKEN_LIFETIME_S = 3600
DEFAULT_ISSUER = "lakepubsub"


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


@dataclass(frozen=True)
class PushSettings:
    """How push dispatchers deliver, throttle and protect themselves.

    ``allow_http_hosts``: host names or CIDR blocks that may be pushed to over
    plain ``http://`` (loopback always may, unless ``allow_loopback`` is off).
    ``allow_networks``: CIDR blocks that may be pushed to although they are
    private, link-local or otherwise internal. ``ca_bundle``: a PEM file of
    certificate authorities to trust instead of the bundled ones. ``authorization``: endpoint URL
    prefix -> ``Authorization`` header value, for endpoints that expect a
    static credential instead of an OIDC token.
    """

    enabled: bool = True
    min_backoff_s: float = MIN_BACKOFF_S
    max_backoff_s: float = MAX_BACKOFF_S
    initial_window: int = INITIAL_WINDOW
    max_outstanding: int = MAX_OUTSTANDING
    endpoint_concurrency: int = ENDPOINT_CONCURRENCY
    max_response_bytes: int = MAX_RESPONSE_BYTES
    refresh_s: float = REFRESH_S
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    allow_loopback: bool = True
    allow_http_hosts: tuple[str, ...] = ()
    allow_networks: tuple[str, ...] = ()
    authorization: Mapping[str, str] = field(default_factory=dict)
    ca_bundle: str = ""
    signing_key_pem: str = ""
    issuer: str = DEFAULT_ISSUER
    token_lifetime_s: int = TOKEN_LIFETIME_S

    def __post_init__(self) -> None:
        if not 0 < self.min_backoff_s <= self.max_backoff_s:
            raise errors.InvalidArgument("push back-off bounds must satisfy 0 < min <= max")
        if self.initial_window < 1 or self.max_outstanding < 1 or self.endpoint_concurrency < 1:
            raise errors.InvalidArgument("push windows and limits must be at least 1")
        for block in self.allow_networks:
            try:
                ipaddress.ip_network(block, strict=False)
            except ValueError as exc:
                raise errors.InvalidArgument(f"not a CIDR block: {block!r}") from exc

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PushSettings:
        """Read ``LAKEPUBSUB_PUSH*`` (documented in docs/security.md)."""
        env = os.environ if environ is None else environ
        auth_raw = env.get("LAKEPUBSUB_PUSH_AUTHORIZATION", "").strip()
        try:
            authorization = orjson.loads(auth_raw) if auth_raw else {}
        except orjson.JSONDecodeError as exc:
            raise errors.InvalidArgument("LAKEPUBSUB_PUSH_AUTHORIZATION is not JSON") from exc
        if not isinstance(authorization, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in authorization.items()
        ):
            raise errors.InvalidArgument(
                "LAKEPUBSUB_PUSH_AUTHORIZATION must map endpoint URL prefixes to header values"
            )
        return cls(
            enabled=_flag(env.get("LAKEPUBSUB_PUSH"), True),
            min_backoff_s=float(env.get("LAKEPUBSUB_PUSH_MIN_BACKOFF_S") or MIN_BACKOFF_S),
            max_backoff_s=float(env.get("LAKEPUBSUB_PUSH_MAX_BACKOFF_S") or MAX_BACKOFF_S),
            max_outstanding=int(env.get("LAKEPUBSUB_PUSH_MAX_OUTSTANDING") or MAX_OUTSTANDING),
            endpoint_concurrency=int(
                env.get("LAKEPUBSUB_PUSH_ENDPOINT_CONCURRENCY") or ENDPOINT_CONCURRENCY
            ),
            max_response_bytes=int(
                env.get("LAKEPUBSUB_PUSH_MAX_RESPONSE_BYTES") or MAX_RESPONSE_BYTES
            ),
            refresh_s=float(env.get("LAKEPUBSUB_PUSH_REFRESH_S") or REFRESH_S),
            allow_loopback=_flag(env.get("LAKEPUBSUB_PUSH_ALLOW_LOOPBACK"), True),
            allow_http_hosts=_list(env.get("LAKEPUBSUB_PUSH_ALLOW_HTTP")),
            allow_networks=_list(env.get("LAKEPUBSUB_PUSH_ALLOW_NETWORKS")),
            authorization=authorization,
            ca_bundle=env.get("LAKEPUBSUB_PUSH_CA_BUNDLE", "").strip(),
            signing_key_pem=env.get("LAKEPUBSUB_PUSH_SIGNING_KEY", "").strip(),
            issuer=env.get("LAKEPUBSUB_PUSH_ISSUER", "").strip() or DEFAULT_ISSUER,
        )

    def authorization_for(self, endpoint: str) -> str | None:
        """The configured ``Authorization`` value for an endpoint: longest prefix wins."""
        best = max((p for p in self.authorization if endpoint.startswith(p)), key=len, default="")
        return self.authorization[best] if best else None
