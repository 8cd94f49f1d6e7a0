"""Bearer tokens are verified against the issuer's JWKS over HTTP, as the authorizer does in AWS."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerTokenEvent,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from flowledger.api.authorizer import Unauthorized, authorize
from flowledger.api.tokens import TokenVerifier, mint_token
from flowledger.errors import Unauthenticated
from flowledger.local.datadir import DataDir

ISSUER = "flowledger-local"
AUDIENCE = "flowledger"
AUTHORIZER_EVENT = json.loads((Path(__file__).parents[1] / "fixtures/events/token_authorizer.json").read_text())


@pytest.fixture
def verifier(jwks_url: str) -> TokenVerifier:
    return TokenVerifier(jwks_url, ISSUER, AUDIENCE)


@pytest.fixture
def token(data_dir: DataDir) -> Callable[..., str]:
    def make(**overrides: Any) -> str:
        arguments: dict[str, Any] = {
            "private_key_pem": data_dir.private_key_pem(),
            "kid": data_dir.key_id(),
            "issuer": ISSUER,
            "audience": AUDIENCE,
            "sub": "alice",
            "scopes": ["chat", "reasoning.read"],
            "patient_id": "p-1",
        }
        return mint_token(**{**arguments, **overrides})

    return make


def test_a_valid_token_yields_sub_scopes_and_patient(verifier: TokenVerifier, token: Callable[..., str]) -> None:
    verified = verifier.verify(token())
    assert (verified.sub, verified.scopes, verified.patient_id) == ("alice", {"chat", "reasoning.read"}, "p-1")


def test_unknown_scopes_in_a_foreign_token_are_dropped(verifier: TokenVerifier, data_dir: DataDir) -> None:
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "bob",
        "iat": int(time.time()),
        "exp": int(time.time()) + 60,
        "scope": "chat admin:all",
    }
    raw = jwt.encode(claims, data_dir.private_key_pem(), algorithm="RS256", headers={"kid": data_dir.key_id()})
    assert verifier.verify(raw).scopes == {"chat"}


@pytest.mark.parametrize(
    "overrides",
    [
        {"issuer": "someone-else"},
        {"audience": "another-api"},
        {"now": time.time() - 7200},  # expired an hour ago
    ],
)
def test_wrong_issuer_audience_or_expiry_is_rejected(
    verifier: TokenVerifier, token: Callable[..., str], overrides: dict[str, Any]
) -> None:
    with pytest.raises(Unauthenticated):
        verifier.verify(token(**overrides))


def test_a_token_signed_by_another_key_is_rejected(verifier: TokenVerifier, token: Callable[..., str]) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(Unauthenticated):
        verifier.verify(token(private_key_pem=other))


def test_a_tampered_payload_is_rejected(verifier: TokenVerifier, token: Callable[..., str]) -> None:
    header, payload, signature = token().split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["scope"] = "chat reasoning.read reasoning.write documents"
    forged = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    with pytest.raises(Unauthenticated):
        verifier.verify(f"{header}.{forged}.{signature}")


def test_an_unsigned_token_is_rejected(verifier: TokenVerifier, data_dir: DataDir) -> None:
    unsigned = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "sub": "eve", "iat": int(time.time()), "exp": int(time.time()) + 60},
        key=None,
        algorithm="none",
        headers={"kid": data_dir.key_id()},
    )
    with pytest.raises(Unauthenticated):
        verifier.verify(unsigned)


def test_authorizer_allows_with_the_callers_context(verifier: TokenVerifier, token: Callable[..., str]) -> None:
    event = copy.deepcopy(AUTHORIZER_EVENT)
    event["authorizationToken"] = f"Bearer {token()}"
    policy = authorize(APIGatewayAuthorizerTokenEvent(event), verifier)
    assert policy["principalId"] == "alice"
    assert policy["context"] == {"sub": "alice", "scope": "chat reasoning.read", "patient_id": "p-1"}
    statement = policy["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow"
    assert statement["Resource"] == ["arn:aws:execute-api:us-east-1:123456789012:abc123/v1/*/*"]


@pytest.mark.parametrize("header", ["", "Bearer not-a-jwt", "Basic YWxpY2U6cHc="])
def test_authorizer_answers_unauthorized_for_bad_tokens(verifier: TokenVerifier, header: str) -> None:
    event = copy.deepcopy(AUTHORIZER_EVENT)
    event["authorizationToken"] = header
    with pytest.raises(Unauthorized, match=r"^Unauthorized$"):
        authorize(APIGatewayAuthorizerTokenEvent(event), verifier)
