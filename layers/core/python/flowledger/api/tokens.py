"""Client bearer tokens: RS256 JWTs verified against the issuer's JWKS with PyJWT.

The Lambda authorizer (in AWS) and the local gateway (in ``flowledger serve``) both call
:meth:`TokenVerifier.verify` and pass :func:`authorizer_context` on to the functions, so a route
sees the same request context in both places.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jwt

from flowledger.errors import InvalidInput, Unauthenticated

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

SCOPES = frozenset({"reasoning.write", "reasoning.read", "chat", "documents"})
ALGORITHM = "RS256"
MAX_TTL_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class VerifiedToken:
    sub: str
    scopes: frozenset[str]
    patient_id: str | None


class TokenVerifier:
    """Verifies bearer tokens against one issuer's JWKS (fetched over HTTP and cached)."""

    def __init__(self, jwks_url: str, issuer: str, audience: str, leeway_seconds: int = 30) -> None:
        self._jwks = jwt.PyJWKClient(jwks_url, cache_jwk_set=True, lifespan=300, timeout=5)
        self._issuer = issuer
        self._audience = audience
        self._leeway = leeway_seconds

    def verify(self, token: str) -> VerifiedToken:
        """Check signature, issuer, audience and expiry; raise :class:`Unauthenticated` otherwise."""
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iat", "sub", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"invalid bearer token: {exc}") from None
        return _verified(claims)


def _verified(claims: dict[str, Any]) -> VerifiedToken:
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise Unauthenticated("invalid bearer token: empty sub")
    scope = claims.get("scope", "")
    patient_id = claims.get("patient_id")
    return VerifiedToken(
        sub=sub,
        scopes=frozenset(scope.split()) & SCOPES if isinstance(scope, str) else frozenset(),
        patient_id=patient_id if isinstance(patient_id, str) and patient_id else None,
    )


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer ...`` header."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("missing bearer token")
    return token.strip()


def authorizer_context(token: VerifiedToken) -> dict[str, str]:
    """The context an authorizer hands to API Gateway (string values only)."""
    return {"sub": token.sub, "scope": " ".join(sorted(token.scopes)), "patient_id": token.patient_id or ""}


def mint_token(
    *,
    private_key_pem: bytes | RSAPrivateKey,  # a PEM, or a key already loaded
    kid: str,
    issuer: str,
    audience: str,
    sub: str,
    scopes: list[str],
    patient_id: str | None = None,
    ttl_seconds: int = 3600,
    now: float | None = None,
) -> str:
    """Sign a token for the local issuer (``flowledger token``); rejects unknown scopes."""
    unknown = sorted(set(scopes) - SCOPES)
    if unknown:
        raise InvalidInput(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(sorted(SCOPES))}")
    if not sub.strip():
        raise InvalidInput("sub must not be empty")
    if not 0 < ttl_seconds <= MAX_TTL_SECONDS:
        raise InvalidInput(f"ttl must be between 1 and {MAX_TTL_SECONDS} seconds")
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "sub": sub,
        "iat": issued,
        "exp": issued + ttl_seconds,
        "scope": " ".join(sorted(set(scopes))),
    }
    if patient_id:
        claims["patient_id"] = patient_id
    return jwt.encode(claims, private_key_pem, algorithm=ALGORITHM, headers={"kid": kid})
