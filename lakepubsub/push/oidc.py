"""OIDC tokens for push endpoints (``pushConfig.oidcToken``) and the keys that verify them.

Each process signs with one private key: ``LAKEPUBSUB_PUSH_SIGNING_KEY`` (PEM,
RSA or EC) when configured, otherwise a key generated at start-up that never
leaves memory. Every process publishes its *public* key in the lake's catalog
(kind ``push-key``), refreshed while it runs, so the JWKS document any API
server returns verifies tokens from every dispatcher on the lake, including
standalone ``lakepubsub push`` processes and ones that have since exited (until
their last tokens expire).
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from lakepubsub import errors
from lakepubsub.resources import catalog as cat

KEY_KIND = "push-key"
KEY_PROJECT = "_"
# Generated keys: RSA, as Google signs push tokens (RS256 is what verifiers expect).
GENERATED_RSA_BITS = 2048
# A cached token is replaced when less than this much of its life is left.
TOKEN_REFRESH_MARGIN_S = 300
US_PER_S = 1_000_000

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}


def generate_pem() -> str:
    """A new RSA private key in PEM (PKCS#8)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=GENERATED_RSA_BITS)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


class Signer:
    """Mints and caches ID tokens for push endpoints. Thread-safe."""

    def __init__(
        self,
        private_key: PrivateKey,
        *,
        issuer: str,
        lifetime_s: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = private_key
        self.issuer = issuer
        self.lifetime_s = lifetime_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[str, float]] = {}
        if isinstance(private_key, rsa.RSAPrivateKey):
            self.algorithm = "RS256"
            jwk = RSAAlgorithm.to_jwk(private_key.public_key(), as_dict=True)
            required: tuple[str, ...] = ("e", "kty", "n")
        else:
            curve = private_key.curve.name
            if curve not in _EC_ALGORITHMS:
                raise errors.InvalidArgument(f"unsupported EC curve for push tokens: {curve}")
            self.algorithm = _EC_ALGORITHMS[curve]
            jwk = ECAlgorithm.to_jwk(private_key.public_key(), as_dict=True)
            required = ("crv", "kty", "x", "y")
        # RFC 7638 thumbprint: the key id every process derives alike for one key.
        canonical = orjson.dumps({k: jwk[k] for k in required}, option=orjson.OPT_SORT_KEYS)
        self.kid = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).decode()
        self.kid = self.kid.rstrip("=")
        self.public_jwk: dict[str, Any] = {
            **jwk,
            "kid": self.kid,
            "alg": self.algorithm,
            "use": "sig",
        }

    @classmethod
    def from_pem(cls, pem: str, *, issuer: str, lifetime_s: int) -> Signer:
        try:
            key = serialization.load_pem_private_key(pem.encode(), password=None)
        except (ValueError, TypeError) as exc:
            raise errors.InvalidArgument(
                f"LAKEPUBSUB_PUSH_SIGNING_KEY is not a PEM private key: {exc}"
            ) from exc
        if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
            raise errors.InvalidArgument("push signing keys must be RSA or EC")
        return cls(key, issuer=issuer, lifetime_s=lifetime_s)

    def token(self, *, email: str, audience: str) -> str:
        """A signed ID token naming ``email`` for ``audience`` (cached until near expiry)."""
        now = self._clock()
        with self._lock:
            cached = self._cache.get((email, audience))
            if cached is not None and cached[1] - now > TOKEN_REFRESH_MARGIN_S:
                return cached[0]
        issued = int(now)
        claims = {
            "iss": self.issuer,
            "aud": audience,
            "sub": email,
            "email": email,
            "email_verified": True,
            "iat": issued,
            "exp": issued + self.lifetime_s,
        }
        token = jwt.encode(claims, self._key, algorithm=self.algorithm, headers={"kid": self.kid})
        with self._lock:
            self._cache[(email, audience)] = (token, float(issued + self.lifetime_s))
        return token

    # -- publishing the public key ---------------------------------------------------

    def publish(self, catalog: cat.Catalog, now_us: int) -> None:
        """Record (or refresh) this key's public half in the catalog, and drop keys
        that no process has refreshed for long enough that their tokens expired."""
        entry = cat.Entry(
            KEY_KIND,
            KEY_PROJECT,
            self.kid,
            self.kid,
            None,
            now_us,
            now_us,
            {"jwk": self.public_jwk, "issuer": self.issuer, "lifetime_s": self.lifetime_s},
        )

        def change(view: cat.View) -> tuple[cat.Changes, None]:
            current = view.get(KEY_KIND, KEY_PROJECT, self.kid)
            put = [entry if current is None else replace(current, updated_us=now_us)]
            stale = [e.key for e in view.of_kind(KEY_KIND) if not _fresh(e, now_us)]
            return cat.Changes(put=put, delete=[k for k in stale if k != entry.key]), None

        catalog.transact(change)


def published_keys(view: cat.View, now_us: int) -> list[dict[str, Any]]:
    """Public keys (JWKs) of every process whose tokens may still be valid."""
    keys = []
    for entry in view.of_kind(KEY_KIND):
        if _fresh(entry, now_us):
            keys.append(dict(entry.spec["jwk"]))
    return keys


def _fresh(entry: cat.Entry, now_us: int) -> bool:
    # A process refreshes its key every half lifetime; tokens it minted last live
    # one lifetime more. Keep keys for twice the lifetime past their last refresh.
    lifetime_s = int(entry.spec.get("lifetime_s", 3600))
    return now_us - entry.updated_us <= 2 * lifetime_s * US_PER_S
