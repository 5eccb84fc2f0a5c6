"""Authentication: who sent a request (an API key, a verified JWT, or anonymous)."""

from __future__ import annotations

import functools
import hashlib
import ipaddress

import jwt
from starlette.concurrency import run_in_threadpool
from starlette.types import Scope

from api.auth.settings import JWKS_CACHE_S, AuthSettings
from lakepubsub import errors
from lakepubsub.resources.iam import Principal

# A JWT is header.payload.signature; an API key has no dots.
_JWT_DOTS = 2
_IN_PROCESS_CLIENTS = ("testclient",)  # Starlette's TestClient (the CLI's --direct mode)


class Authenticator:
    def __init__(self, settings: AuthSettings) -> None:
        self.settings = settings
        self._jwks = (
            jwt.PyJWKClient(settings.jwks_url, cache_keys=True, lifespan=JWKS_CACHE_S)
            if settings.jwks_url
            else None
        )

    @property
    def reads_headers(self) -> bool:
        """Whether ``principal`` looks at the request's headers (only to check a
        credential against the identities configured)."""
        return self.settings.identities

    async def principal(self, scope: Scope) -> Principal:
        """Who sent the request; ``Unauthenticated`` if nobody acceptable."""
        headers = dict(scope.get("headers") or [])
        token = _bearer(headers.get(b"authorization", b"").decode("latin-1"))
        token = token or headers.get(b"x-goog-api-key", b"").decode("latin-1").strip()
        if not self.settings.identities:
            # Nothing to check a credential against: open to whoever is admitted.
            if self._anonymous_allowed(scope):
                return Principal(unrestricted=True)
            raise errors.Unauthenticated("anonymous access is disabled")
        if not token:
            if self._anonymous_allowed(scope):
                return Principal()
            raise errors.Unauthenticated(
                "Request is missing required authentication credential: an API key or a JWT "
                "as a bearer token."
            )
        key = self.settings.api_keys.get(hashlib.sha256(token.encode()).hexdigest())
        if key is not None:
            return Principal(key.principal, key.grants)
        if self._jwks is not None and token.count(".") == _JWT_DOTS:
            return await run_in_threadpool(self._verify_jwt, token)
        raise errors.Unauthenticated("Request had invalid authentication credentials.")

    def _anonymous_allowed(self, scope: Scope) -> bool:
        mode = self.settings.anonymous
        return mode == "true" or (mode == "loopback" and _is_local(scope))

    def _verify_jwt(self, token: str) -> Principal:
        assert self._jwks is not None
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "EdDSA"],
                audience=self.settings.jwt_audience,
                issuer=self.settings.jwt_issuer or None,
                options={"require": ["exp", "aud"]},
            )
        except (jwt.PyJWTError, jwt.PyJWKClientError) as exc:
            raise errors.Unauthenticated(f"invalid JWT: {exc}") from exc
        email = claims.get("email")
        if isinstance(email, str) and email:
            kind = "serviceAccount" if email.endswith(".gserviceaccount.com") else "user"
            return Principal(f"{kind}:{email}")
        return Principal(f"principal:{claims.get('iss', '')}/{claims.get('sub', '')}")


def _bearer(value: str) -> str:
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _is_local(scope: Scope) -> bool:
    client = scope.get("client")
    if client is None:  # a unix socket, or an in-process call
        return True
    return _loopback(str(client[0]))


@functools.lru_cache(maxsize=1024)
def _loopback(host: str) -> bool:
    """Whether a client address is this machine (cached: parsing it took a few
    percent of the event loop's time per single-message publish)."""
    if host in _IN_PROCESS_CLIENTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
