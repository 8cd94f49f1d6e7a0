"""An id token from the console's Cognito pool, shaped by its pre token generation trigger, is accepted by the
API's authorizer Lambda (``flowledger:tokenIssuer=console-pool``): RS256, its ``kid`` in the pool's JWKS
(served on loopback), ``iss`` the pool, ``aud`` the app client, Cognito's own claims beside ours."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from flowledger.api.authorizer import Unauthorized
from flowledger.api.token_claims import add_token_claims
from flowledger.services import bootstrap
from tests.conftest import load_event
from tests.jwks import jwks_served

POOL = "eu-west-1_EXAMPLE"
ISSUER = f"https://cognito-idp.eu-west-1.amazonaws.com/{POOL}"
CLIENT_ID = "1example23456789abcdefghij"
KID = "abcdEXAMPLEkid1234567890+/=="  # Cognito's kids are base64, padding and all


@pytest.fixture(scope="module")
def pool_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def pool_jwks_url(pool_key: rsa.RSAPrivateKey) -> Iterator[str]:
    """The pool's JWKS as Cognito publishes it: two keys (id and access tokens), each with kid, alg, use."""
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    keys = []
    for kid, key in ((KID, pool_key), ("other-kid", other)):
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        keys.append({**jwk, "kid": kid, "alg": "RS256", "use": "sig"})
    with jwks_served({"keys": keys}) as url:
        yield url


@pytest.fixture
def authorizer(
    pool_jwks_url: str, load_function: Callable[[str], Any], lambda_context: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], dict[str, Any]]]:
    """The authorizer function as the stack deploys it in console-pool mode, called with a bearer header."""
    monkeypatch.setenv("FLOWLEDGER_JWKS_URL", pool_jwks_url)
    monkeypatch.setenv("FLOWLEDGER_JWT_ISSUER", ISSUER)
    monkeypatch.setenv("FLOWLEDGER_JWT_AUDIENCE", CLIENT_ID)
    bootstrap.cache_clear()
    handler = load_function("authorizer").handler

    def call(authorization: str) -> dict[str, Any]:
        event = copy.deepcopy(load_event("token_authorizer"))
        event["authorizationToken"] = authorization
        answer: dict[str, Any] = handler(event, lambda_context)
        return answer

    yield call
    bootstrap.cache_clear()


def cognito_id_token(key: rsa.RSAPrivateKey, groups: list[str], patient_id: str | None, **overrides: Any) -> str:
    """An id token as the pool issues it: Cognito's claims, plus those the trigger adds for this user."""
    event = copy.deepcopy(load_event("cognito_pre_token_generation"))
    event["request"]["groupConfiguration"]["groupsToOverride"] = groups
    attributes = event["request"]["userAttributes"]
    if patient_id is None:
        del attributes["custom:patient_id"]
    else:
        attributes["custom:patient_id"] = patient_id
    added = add_token_claims(event)["response"]["claimsOverrideDetails"]["claimsToAddOrOverride"]
    now = int(time.time())
    claims = {
        "sub": attributes["sub"],
        "cognito:groups": groups,
        "email_verified": True,
        "iss": ISSUER,
        "cognito:username": "jane.patient",
        "origin_jti": str(uuid.uuid4()),
        "aud": CLIENT_ID,
        "event_id": str(uuid.uuid4()),
        "token_use": "id",
        "auth_time": now,
        "exp": now + 3600,
        "iat": now,
        "jti": str(uuid.uuid4()),
        "email": attributes["email"],
        **({"custom:patient_id": patient_id} if patient_id else {}),
        **added,
        **overrides,
    }
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return jwt.encode(claims, pem, algorithm="RS256", headers={"kid": KID})


def test_a_patients_pool_token_is_allowed_with_their_patient_id_and_scope(
    authorizer: Callable[[str], dict[str, Any]], pool_key: rsa.RSAPrivateKey
) -> None:
    policy = authorizer(f"Bearer {cognito_id_token(pool_key, ['patients'], 'p-7001')}")
    assert policy["principalId"] == "0b0a57c5-f013-426a-81a1-f8da8bexample"
    assert policy["context"] == {
        "sub": "0b0a57c5-f013-426a-81a1-f8da8bexample",
        "scope": "reasoning.read",
        "patient_id": "p-7001",
    }
    (statement,) = policy["policyDocument"]["Statement"]
    assert statement["Effect"] == "Allow"


def test_a_chat_user_and_patient_gets_every_scope(
    authorizer: Callable[[str], dict[str, Any]], pool_key: rsa.RSAPrivateKey
) -> None:
    policy = authorizer(f"Bearer {cognito_id_token(pool_key, ['patients', 'chat-users'], 'p-7001')}")
    assert policy["context"]["scope"] == "chat documents reasoning.read"


def test_an_operators_pool_token_carries_no_scope(
    authorizer: Callable[[str], dict[str, Any]], pool_key: rsa.RSAPrivateKey
) -> None:
    policy = authorizer(f"Bearer {cognito_id_token(pool_key, ['operators'], None)}")
    assert policy["context"]["scope"] == "" and policy["context"]["patient_id"] == ""


@pytest.mark.parametrize(
    "overrides",
    [
        {"aud": "another-app-client"},
        {"iss": "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_OTHERPOOL"},
        {"exp": int(time.time()) - 3600},
    ],
)
def test_a_token_of_another_client_or_pool_or_expired_is_unauthorized(
    authorizer: Callable[[str], dict[str, Any]], pool_key: rsa.RSAPrivateKey, overrides: dict[str, Any]
) -> None:
    with pytest.raises(Unauthorized, match=r"^Unauthorized$"):
        authorizer(f"Bearer {cognito_id_token(pool_key, ['patients'], 'p-7001', **overrides)}")


def test_a_token_signed_by_a_key_not_in_the_pools_jwks_is_unauthorized(
    authorizer: Callable[[str], dict[str, Any]],
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(Unauthorized, match=r"^Unauthorized$"):
        authorizer(f"Bearer {cognito_id_token(stranger, ['patients'], 'p-7001')}")


def test_the_pools_access_token_is_unauthorized(
    authorizer: Callable[[str], dict[str, Any]], pool_key: rsa.RSAPrivateKey
) -> None:
    # Cognito's access token names the client in client_id and has no aud: only the id token is a bearer here.
    access = cognito_id_token(pool_key, ["patients"], "p-7001", token_use="access", client_id=CLIENT_ID)
    claims = jwt.decode(access, options={"verify_signature": False})
    del claims["aud"]
    pem = pool_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(Unauthorized, match=r"^Unauthorized$"):
        authorizer(f"Bearer {jwt.encode(claims, pem, algorithm='RS256', headers={'kid': KID})}")
