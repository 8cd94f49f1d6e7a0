from __future__ import annotations

import pytest

from flowledger.api.tokens import SCOPES, VerifiedToken, authorizer_context, bearer_token, mint_token
from flowledger.errors import InvalidInput, Unauthenticated


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   ", "Basic abc", "token-only"])
def test_missing_or_malformed_bearer_header_is_unauthenticated(header: str | None) -> None:
    with pytest.raises(Unauthenticated):
        bearer_token(header)


def test_bearer_scheme_is_case_insensitive() -> None:
    assert bearer_token("bearer abc.def.ghi") == "abc.def.ghi"


def test_authorizer_context_holds_strings_only() -> None:
    context = authorizer_context(VerifiedToken("u1", frozenset({"chat", "documents"}), None))
    assert context == {"sub": "u1", "scope": "chat documents", "patient_id": ""}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scopes": ["chat", "root"]}, "unknown scope"),
        ({"sub": " "}, "sub"),
        ({"ttl_seconds": 0}, "ttl"),
        ({"ttl_seconds": 10**9}, "ttl"),
    ],
)
def test_minting_rejects_bad_input(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "private_key_pem": b"unused",
        "kid": "k",
        "issuer": "i",
        "audience": "a",
        "sub": "u",
        "scopes": sorted(SCOPES),
    }
    with pytest.raises(InvalidInput, match=message):
        mint_token(**{**arguments, **kwargs})  # type: ignore[arg-type]
