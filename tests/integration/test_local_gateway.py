"""The dev server's gateway: authentication per path prefix, and the mount slot for ASGI apps."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from flowledger.api.app import build_resolver
from flowledger.api.core import router as core_router
from flowledger.api.tokens import TokenVerifier, mint_token
from flowledger.config import load_settings
from flowledger.local.datadir import DataDir
from flowledger.local.gateway import GatewayResolver, LocalGateway
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.services import build_services

pytestmark = [pytest.mark.usefixtures("clean_environment"), pytest.mark.anyio]
BASE = "http://gateway.test"


async def echo_context(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A stand-in for the chat ASGI app: returns the request context it was handed."""
    message = await receive()
    headers = dict(scope["headers"])
    body = json.dumps(
        {
            "path": scope["path"],
            "body": message["body"].decode(),
            "context": json.loads(headers[b"x-amzn-request-context"]),
        }
    ).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(data_dir: DataDir, jwks_url: str) -> LocalGateway:
    rest = build_resolver([core_router], GatewayResolver)
    rest.append_context(services=build_services(load_settings()))
    gateway = LocalGateway(
        rest, TokenVerifier(jwks_url, "flowledger-local", "flowledger"), SigV4Verifier(data_dir.admin_credentials())
    )
    gateway.mount("/api/chat", echo_context)
    return gateway


@pytest.fixture
def bearer(data_dir: DataDir) -> str:
    token = mint_token(
        private_key_pem=data_dir.private_key_pem(),
        kid=data_dir.key_id(),
        issuer="flowledger-local",
        audience="flowledger",
        sub="dana",
        scopes=["chat"],
    )
    return f"Bearer {token}"


async def call(gateway: LocalGateway, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url=BASE) as client:
        return await client.request(method, path, **kwargs)


async def test_mounted_app_gets_the_verified_principal_in_the_lwa_header(gateway: LocalGateway, bearer: str) -> None:
    response = await call(gateway, "POST", "/api/chat", content=b'{"q": 1}', headers={"Authorization": bearer})
    assert response.status_code == 200
    payload = response.json()
    assert payload["body"] == '{"q": 1}'
    assert payload["context"]["authorizer"]["sub"] == "dana"
    assert payload["context"]["authorizer"]["scope"] == "chat"


async def test_a_forged_request_context_header_is_replaced(gateway: LocalGateway, bearer: str) -> None:
    forged = json.dumps({"authorizer": {"sub": "root", "scope": "chat documents"}})
    response = await call(
        gateway,
        "POST",
        "/api/chat/x",
        content=b"{}",
        headers={"Authorization": bearer, "x-amzn-request-context": forged},
    )
    assert response.json()["context"]["authorizer"]["sub"] == "dana"


async def test_mounted_client_routes_still_need_a_token(gateway: LocalGateway) -> None:
    response = await call(gateway, "POST", "/api/chat", content=b"{}")
    assert (response.status_code, response.json()["error"]) == (401, "unauthorized")


async def test_rest_routes_read_the_same_context(gateway: LocalGateway, bearer: str) -> None:
    response = await call(gateway, "GET", "/api/me", headers={"Authorization": bearer})
    assert response.json() == {"kind": "user", "principal": "dana", "scopes": ["chat"], "patient_id": None}


async def test_signed_admin_call_reaches_the_route(gateway: LocalGateway, data_dir: DataDir) -> None:
    credentials = data_dir.admin_credentials()
    request = AWSRequest(method="GET", url=f"{BASE}/admin/v1/me")
    SigV4Auth(
        Credentials(credentials.access_key_id, credentials.secret_access_key), "execute-api", credentials.region
    ).add_auth(request)
    response = await call(gateway, "GET", "/admin/v1/me", headers=dict(request.headers))
    assert (response.status_code, response.json()["principal"]) == (200, credentials.principal_arn)
