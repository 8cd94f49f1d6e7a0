"""The dev server checks admin signatures as API Gateway's IAM auth would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from flowledger.errors import Forbidden
from flowledger.local.datadir import AdminCredentials
from flowledger.local.sigv4 import SigV4Verifier

CREDENTIALS = AdminCredentials("AKIAFLTEST", "secret-key", "us-east-1", "arn:aws:iam::000000000000:user/admin")
URL = "http://127.0.0.1:8000/admin/v1/reasoning/flows?trace_id=t-1&limit=5"


def signed(
    method: str = "POST",
    url: str = URL,
    body: bytes = b'{"a": 1}',
    secret: str = "secret-key",
    region: str = "us-east-1",
    service: str = "execute-api",
) -> dict[str, str]:
    """Headers a stock botocore client sends."""
    request = AWSRequest(method=method, url=url, data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials("AKIAFLTEST", secret), service, region).add_auth(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    headers["host"] = "127.0.0.1:8000"
    return headers


def verify(
    headers: dict[str, str],
    method: str = "POST",
    url: str = URL,
    body: bytes = b'{"a": 1}',
    now: datetime | None = None,
) -> str:
    return SigV4Verifier(CREDENTIALS).verify(method, url, headers, body, now=now)


def test_a_correctly_signed_request_yields_the_principal() -> None:
    assert verify(signed()) == CREDENTIALS.principal_arn


def test_a_signed_get_without_body_is_accepted() -> None:
    assert verify(signed("GET", body=b""), "GET", body=b"") == CREDENTIALS.principal_arn


@pytest.mark.parametrize(
    ("change", "kwargs"),
    [
        ("body", {"body": b'{"a": 2}'}),
        ("method", {"method": "PUT"}),
        ("path", {"url": URL.replace("/flows", "/flowz")}),
        ("query", {"url": URL.replace("limit=5", "limit=6")}),
    ],
)
def test_any_change_after_signing_is_rejected(change: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(Forbidden):
        verify(signed(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "headers",
    [
        signed(secret="wrong-secret"),
        signed(region="eu-west-1"),
        signed(service="s3"),
        {},
        {"authorization": "Bearer abc"},
    ],
)
def test_wrong_key_scope_or_scheme_is_rejected(headers: dict[str, str]) -> None:
    with pytest.raises(Forbidden):
        verify(headers)


def test_an_old_signature_is_rejected() -> None:
    with pytest.raises(Forbidden, match="clock skew"):
        verify(signed(), now=datetime.now(UTC) + timedelta(minutes=6))


def test_a_declared_payload_hash_must_match_the_body() -> None:
    headers = signed()
    headers["x-amz-content-sha256"] = "0" * 64
    with pytest.raises(Forbidden, match="does not match the body"):
        verify(headers)
