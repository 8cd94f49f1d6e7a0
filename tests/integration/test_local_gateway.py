"""The dev server's gateway: routing, CORS, authentication, the proxy event and the mount slot.

The REST functions are invoked in-process here (the real handlers, one at a time); the worker
processes that ``serve`` uses are exercised by the end-to-end tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest

from flowledger.api.access import Access
from flowledger.api.registry import capability_handler, rest_routes
from flowledger.api.routes import RouteSpec, match_route
from flowledger.api.tokens import TokenVerifier, mint_token
from flowledger.local.datadir import DataDir
from flowledger.local.functions import LocalLambdaContext
from flowledger.local.gateway import LocalGateway
from flowledger.local.sigv4 import SigV4Verifier
from tests.signing import sigv4_headers

pytestmark = [pytest.mark.usefixtures("services"), pytest.mark.anyio]
BASE = "http://gateway.test"
CONSOLE = "http://console.test"
ECHO_ROUTES = [RouteSpec("/api/chat", "POST", Access.JWT, "chat", "echo")]


class InProcessFunctions:
    """Calls the deployed handlers directly, one invocation at a time (as one Lambda environment)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()

    async def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        async with self._lock:
            return capability_handler(function)(event, LocalLambdaContext(function, "req"))  # type: ignore[arg-type]


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
def functions() -> InProcessFunctions:
    return InProcessFunctions()


@pytest.fixture
def gateway(data_dir: DataDir, jwks_url: str, functions: InProcessFunctions) -> LocalGateway:
    gateway = LocalGateway(
        routes=rest_routes(),
        functions=functions,
        tokens=TokenVerifier(jwks_url, "flowledger-local", "flowledger"),
        sigv4=SigV4Verifier(data_dir.admin_credentials()),
        cors_origins=frozenset({CONSOLE}),
        pages={"/openapi.json": lambda: ("application/json", b"{}")},
    )
    gateway.mount("echo", echo_context, ECHO_ROUTES)
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


def signed(data_dir: DataDir, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    return sigv4_headers(data_dir.admin_credentials(), method, f"{BASE}{path}", body)


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
        gateway, "POST", "/api/chat", content=b"{}", headers={"Authorization": bearer, "x-amzn-request-context": forged}
    )
    assert response.json()["context"]["authorizer"]["sub"] == "dana"


async def test_mounted_client_routes_still_need_a_token(gateway: LocalGateway) -> None:
    response = await call(gateway, "POST", "/api/chat", content=b"{}")
    assert (response.status_code, response.json()["error"]) == (401, "unauthorized")
    assert response.json()["request_id"] == response.headers["x-amzn-requestid"]


async def test_rest_routes_read_the_same_context(gateway: LocalGateway, bearer: str) -> None:
    response = await call(gateway, "GET", "/api/me", headers={"Authorization": bearer})
    assert response.json() == {"kind": "user", "principal": "dana", "scopes": ["chat"], "patient_id": None}


async def test_signed_admin_call_reaches_the_route(gateway: LocalGateway, data_dir: DataDir) -> None:
    response = await call(gateway, "GET", "/admin/v1/me", headers=signed(data_dir, "GET", "/admin/v1/me"))
    assert (response.status_code, response.json()["principal"]) == (200, data_dir.admin_credentials().principal_arn)


# Non-ASCII in an admin path: what goes on the wire is UTF-8 percent-encoded (é is %C3%A9), and a SigV4
# client signs that URL, so execute-api's canonical path is it URI-encoded once more (%25C3%25A9):
# botocore's own clients sign that way (its serializer encodes, its signer encodes again).
NON_ASCII_FLOW = "/admin/v1/reasoning/flows/fl_\u00e9t\u00e9"


async def test_an_admin_get_with_non_ascii_in_its_path_signed_by_botocore_gets_through(
    gateway: LocalGateway, data_dir: DataDir
) -> None:
    wire = httpx.URL(f"{BASE}{NON_ASCII_FLOW}")
    assert wire.raw_path == b"/admin/v1/reasoning/flows/fl_%C3%A9t%C3%A9"
    headers = sigv4_headers(data_dir.admin_credentials(), "GET", str(wire))
    response = await call(gateway, "GET", NON_ASCII_FLOW, headers=headers)
    # Past the signature: the route's own validation answers (no flow id has an é in it).
    assert (response.status_code, response.json()["error"]) == (422, "validation_error"), response.text


@pytest.mark.parametrize(
    "signed_url",
    [
        f"{BASE}/admin/v1/reasoning/flows/fl_%C3%A8t%C3%A9",  # è signed, é sent
        f"{BASE}{NON_ASCII_FLOW}",  # the unencoded path: its canonical form is encoded once, AWS's twice
    ],
    ids=["tampered", "signed-unencoded"],
)
async def test_a_non_ascii_admin_path_signed_for_another_canonical_path_is_refused(
    gateway: LocalGateway, data_dir: DataDir, signed_url: str
) -> None:
    headers = sigv4_headers(data_dir.admin_credentials(), "GET", signed_url)
    response = await call(gateway, "GET", NON_ASCII_FLOW, headers=headers)
    assert (response.status_code, response.json()["message"]) == (403, "signature does not match")


async def test_the_function_gets_the_proxy_event_api_gateway_would_send(
    gateway: LocalGateway, data_dir: DataDir, functions: InProcessFunctions
) -> None:
    path = "/admin/v1/reasoning/flows/fl_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    response = await call(gateway, "GET", f"{path}?a=1&a=2&b=", headers=signed(data_dir, "GET", f"{path}?a=1&a=2&b="))
    assert response.status_code == 404  # no such flow: the route ran
    event = functions.events[-1]
    assert event["resource"] == "/admin/v1/reasoning/flows/{flow_id}"
    assert event["pathParameters"] == {"flow_id": "fl_01ARZ3NDEKTSV4RRFFQ69G5FAV"}
    assert event["multiValueQueryStringParameters"] == {"a": ["1", "2"], "b": [""]}
    assert event["queryStringParameters"] == {"a": "2", "b": ""}
    assert event["requestContext"]["identity"]["userArn"] == data_dir.admin_credentials().principal_arn
    assert event["requestContext"]["requestId"] == response.headers["x-amzn-requestid"]


async def test_an_undecodable_body_reaches_the_function_base64_encoded_and_is_a_400(
    gateway: LocalGateway, data_dir: DataDir, functions: InProcessFunctions
) -> None:
    path = "/admin/v1/reasoning/research/backlog/next"
    body = b'{"trigger_type": "\xff\xfe"}'
    headers = {**signed(data_dir, "POST", path, body), "Content-Type": "application/json"}
    response = await call(gateway, "POST", path, content=body, headers=headers)
    assert (response.status_code, response.json()["error"]) == (400, "malformed_body")
    assert functions.events[-1]["isBase64Encoded"] is True


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("TRACE", "/health", "GET"), ("DELETE", "/api/me", "GET"), ("PUT", "/api/chat", "POST")],
)
async def test_a_known_path_with_another_method_is_405_with_allow(
    gateway: LocalGateway, method: str, path: str, allow: str
) -> None:
    response = await call(gateway, method, path)
    assert (response.status_code, response.json()["error"]) == (405, "method_not_allowed")
    assert response.headers["allow"] == allow


async def test_an_unknown_path_is_404_before_authentication(gateway: LocalGateway) -> None:
    response = await call(gateway, "GET", "/api/nowhere")
    assert (response.status_code, response.json()["error"]) == (404, "not_found")


async def test_a_preflight_from_an_allowed_origin_needs_no_credentials(gateway: LocalGateway) -> None:
    response = await call(
        gateway,
        "OPTIONS",
        "/api/reasoning/flows/fl_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        headers={"Origin": CONSOLE, "Access-Control-Request-Method": "PATCH"},
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == CONSOLE
    assert response.headers["access-control-allow-methods"] == "GET, PATCH"
    assert "authorization" in response.headers["access-control-allow-headers"]


async def test_a_preflight_from_another_origin_is_refused(gateway: LocalGateway) -> None:
    response = await call(
        gateway, "OPTIONS", "/api/me", headers={"Origin": "http://evil.test", "Access-Control-Request-Method": "GET"}
    )
    assert response.status_code == 403
    assert "access-control-allow-origin" not in response.headers


async def test_responses_to_an_allowed_origin_carry_cors_headers(gateway: LocalGateway, bearer: str) -> None:
    allowed = await call(gateway, "GET", "/api/me", headers={"Authorization": bearer, "Origin": CONSOLE})
    other = await call(gateway, "GET", "/api/me", headers={"Authorization": bearer, "Origin": "http://evil.test"})
    assert allowed.headers["access-control-allow-origin"] == CONSOLE
    assert "access-control-allow-origin" not in other.headers


async def test_a_body_over_api_gateways_limit_is_413_before_authentication(gateway: LocalGateway) -> None:
    response = await call(gateway, "POST", "/api/reasoning/flows", content=b"x" * (10 * 1024 * 1024 + 1))
    assert (response.status_code, response.json()["error"]) == (413, "payload_too_large")


async def test_each_request_is_logged_once_without_its_query_string(
    gateway: LocalGateway, bearer: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="flowledger.access"):
        await call(gateway, "GET", "/api/me?patient=Jane+Doe", headers={"Authorization": bearer})
    lines = [r.getMessage() for r in caplog.records if r.name == "flowledger.access"]
    assert len(lines) == 1
    method, path, status, milliseconds, unit = lines[0].split()
    assert (method, path, status, unit) == ("GET", "/api/me", "200", "ms")
    assert float(milliseconds) >= 0
    assert "Jane" not in lines[0] and "Bearer" not in lines[0]


async def test_public_pages_are_served_by_the_gateway(gateway: LocalGateway) -> None:
    response = await call(gateway, "GET", "/openapi.json")
    assert (response.status_code, response.json()) == (200, {})


async def test_a_literal_segment_shadows_a_parameter_for_every_method(gateway: LocalGateway, data_dir: DataDir) -> None:
    path = "/admin/v1/reasoning/pathways/compare"
    response = await call(gateway, "GET", path, headers=signed(data_dir, "GET", path))
    assert (response.status_code, response.headers["allow"]) == (405, "POST")


async def test_a_function_that_fails_to_answer_is_a_502_in_the_contract(
    data_dir: DataDir, jwks_url: str, bearer: str
) -> None:
    class DeadWorker:
        async def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError("worker exited")

    gateway = LocalGateway(
        routes=rest_routes(),
        functions=DeadWorker(),
        tokens=TokenVerifier(jwks_url, "flowledger-local", "flowledger"),
        sigv4=SigV4Verifier(data_dir.admin_credentials()),
    )
    response = await call(gateway, "GET", "/api/me", headers={"Authorization": bearer})
    assert (response.status_code, response.json()["error"]) == (502, "bad_gateway")
    assert response.json()["request_id"] == response.headers["x-amzn-requestid"]


async def test_the_mounted_app_gets_exactly_one_request_context_header(gateway: LocalGateway, bearer: str) -> None:
    """Starlette's ``headers.get`` returns the FIRST value of a repeated header: a client-sent copy left in
    front of the gateway's own would be the principal the chat app reads."""
    seen: list[bytes] = []

    async def capture(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.extend(v for k, v in scope["headers"] if k.lower() == b"x-amzn-request-context")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    gateway.mount("capture", capture, [RouteSpec("/api/capture", "GET", Access.JWT, "chat", "capture")])
    forged = json.dumps({"authorizer": {"sub": "root", "scope": "chat documents"}})
    response = await call(
        gateway, "GET", "/api/capture", headers={"Authorization": bearer, "x-amzn-request-context": forged}
    )
    assert response.status_code == 204
    assert len(seen) == 1
    assert json.loads(seen[0])["authorizer"]["sub"] == "dana"


async def test_a_literal_segment_wins_over_a_path_parameter(
    gateway: LocalGateway, data_dir: DataDir, functions: InProcessFunctions
) -> None:
    path = "/admin/v1/reasoning/pathways/stats"
    response = await call(gateway, "GET", path, headers=signed(data_dir, "GET", path))
    assert response.status_code == 200, response.text
    event = functions.events[-1]
    assert event["resource"] == path  # not /admin/v1/reasoning/pathways/{pathway_id}
    assert event["pathParameters"] is None
    assert event["requestContext"]["resourcePath"] == path


def test_match_route_prefers_the_literal_segment_whatever_the_table_order() -> None:
    parameter = RouteSpec("/api/things/{thing_id}", "GET", Access.JWT, function="param")
    literal = RouteSpec("/api/things/stats", "GET", Access.JWT, function="literal")
    for table in ([parameter, literal], [literal, parameter]):
        route, allowed = match_route(table, "GET", "/api/things/stats")
        assert route is literal
        assert allowed == ["GET"]  # the literal resource's methods only
    assert match_route([parameter, literal], "GET", "/api/things/t1")[0] is parameter


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/api/nowhere?name=Jane+Doe", {}, "404"),
        ("GET", "/api/me?name=Jane+Doe", {}, "401"),
        ("DELETE", "/api/me?name=Jane+Doe", {}, "405"),
    ],
)
async def test_refused_requests_are_logged_once_too(
    gateway: LocalGateway,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    headers: dict[str, str],
    status: str,
) -> None:
    with caplog.at_level(logging.INFO, logger="flowledger.access"):
        response = await call(gateway, method, path, headers=headers)
    assert str(response.status_code) == status
    lines = [r.getMessage() for r in caplog.records if r.name == "flowledger.access"]
    assert len(lines) == 1
    assert lines[0].split()[:3] == [method, path.split("?")[0], status]
    assert "Jane" not in lines[0]
