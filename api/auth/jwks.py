"""The keys that verify the OIDC tokens push dispatchers send
(``/.well-known/jwks.json``) and their OIDC discovery document."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from api.auth.settings import POLICY_MAX_STALENESS_S
from api.deps import EngineDep, json_bytes, json_response
from lakepubsub.push.oidc import published_keys
from lakepubsub.settings.push import PushSettings

router = APIRouter(tags=["operations"])


@router.get("/.well-known/jwks.json", name="jwks")
def jwks(request: Request, engine: EngineDep) -> Response:
    """Public keys that verify the OIDC tokens push dispatchers send to endpoints."""
    view = engine.catalog.view(max_staleness_s=POLICY_MAX_STALENESS_S)
    keys = published_keys(view, engine.settings.clock_us())
    service = getattr(request.app.state, "push", None)
    if service is not None and all(k.get("kid") != service.signer.kid for k in keys):
        keys.append(service.signer.public_jwk)
    return Response(
        json_bytes({"keys": keys}),
        media_type="application/json",
        headers={"cache-control": "public, max-age=300"},
    )


@router.get("/.well-known/openid-configuration", name="openid_configuration")
def openid_configuration(request: Request) -> Response:
    """OIDC discovery for push tokens: their issuer and where their keys are."""
    issuer = PushSettings.from_env().issuer
    return json_response(
        {
            "issuer": issuer,
            "jwks_uri": str(request.url_for("jwks")),
            "id_token_signing_alg_values_supported": ["RS256", "ES256", "ES384", "ES512"],
            "subject_types_supported": ["public"],
            "response_types_supported": ["id_token"],
            "claims_supported": ["aud", "email", "email_verified", "exp", "iat", "iss", "sub"],
        }
    )
