"""Bad input over real HTTP: every refusal is a 4xx in the error contract, decided before any schema or stream."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowledger.api.access import Access
from flowledger.api.openapi import openapi_document
from flowledger.api.routes import routes_of
from flowledger.otlp.decode import MAX_BODY_BYTES as MAX_OTLP_BODY_BYTES
from tests.signing import sigv4_headers

pytestmark = pytest.mark.e2e
LIMIT = 256 * 1024  # FLOWLEDGER_MAX_BODY_BYTES' default
SAMPLE_IDS = {
    "flow_id": "fl_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "pathway_id": "pw_" + "0" * 32,
    "request_id": "rq_" + "0" * 26,
    "claim_id": "claim-1",
    "run_id": "run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "session_id": "ses_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "workspace_id": "ws_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "document_id": "dc_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "user_id": "erin",
    "patient_id": "p-sample",
    "version": "1",
}
BODY_ROUTES = [
    r
    for r in routes_of(openapi_document("test")["paths"])
    if r.method in ("POST", "PUT", "PATCH")
    and "requestBody" in openapi_document("test")["paths"][r.path][r.method.lower()]
]


def route_id(route: Any) -> str:
    return f"{route.method} {route.path}"


@pytest.fixture(scope="module")
def bearer(server: Any) -> str:
    result = server.cli(
        "token", "--data-dir", str(server.data_dir.path), "--sub", "mallory", "--scopes",
        "chat,documents,reasoning.read,reasoning.write", "--patient-id", "p-mallory",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return f"Bearer {result.stdout.strip()}"


def send(server: Any, bearer: str, route: Any, body: bytes, content_type: str = "application/json") -> httpx.Response:
    """The route called by an authorised caller (signed for admin routes), with ``body`` as it is."""
    path = route.path.format(**SAMPLE_IDS)
    headers = {"Content-Type": content_type}
    if route.access is Access.IAM:
        url = f"{server.base_url}{path}"
        headers = sigv4_headers(server.data_dir.admin_credentials(), route.method, url, body, headers=headers)
    else:
        headers["Authorization"] = bearer
    return httpx.request(route.method, f"{server.base_url}{path}", content=body, headers=headers, timeout=30)


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == code
    assert body["request_id"] == response.headers["x-amzn-requestid"]
    return body


def test_every_body_route_is_covered() -> None:
    assert len(BODY_ROUTES) >= 10  # the routes of the "9 of 10", and chat


def limit_of(route: Any) -> int:
    """The body limit of a route: the API's, or the OTLP receiver's own for a route that reads its body itself."""
    return MAX_OTLP_BODY_BYTES if route.raw_body else LIMIT


@pytest.mark.parametrize("route", BODY_ROUTES, ids=route_id)
def test_one_byte_over_the_limit_is_413_before_parsing(server: Any, bearer: str, route: Any) -> None:
    limit = limit_of(route)
    body = b'{"pad": "' + b"x" * (limit - 10) + b'"}'
    assert len(body) == limit + 1
    assert_error(send(server, bearer, route, body), 413, "payload_too_large")


@pytest.mark.parametrize("route", BODY_ROUTES, ids=route_id)
@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (b'{"query": "\xff\xfe"}', "application/json", 400, "malformed_body"),
        (b"[" * 1000 + b"]" * 1000, "application/json", 400, "malformed_body"),
        (b"{", "application/json", 400, "malformed_body"),
        (b"--x\r\n", "multipart/form-data", 415, "unsupported_media_type"),
        (b"query=hi", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ],
    ids=["not-utf8", "1000-deep", "not-json", "multipart-no-boundary", "form"],
)
def test_bodies_that_are_not_json_are_4xx(
    server: Any, bearer: str, route: Any, body: bytes, content_type: str, status: int, code: str
) -> None:
    assert_error(send(server, bearer, route, body, content_type), status, code)


def test_health_with_an_undecodable_body_answers_in_the_contract(server: Any) -> None:
    response = httpx.request(
        "GET", f"{server.base_url}/health", content=b"\xff\xfe", headers={"Content-Type": "application/json"}
    )
    assert_error(response, 400, "malformed_body")


def test_a_wrong_scope_with_a_bad_body_learns_nothing_of_the_schema(server: Any) -> None:
    result = server.cli("token", "--data-dir", str(server.data_dir.path), "--sub", "eve", "--scopes", "chat")
    headers = {"Authorization": f"Bearer {result.stdout.strip()}", "Content-Type": "application/json"}
    response = httpx.post(f"{server.base_url}/api/reasoning/flows", content=b'{"trigger_type": 7}', headers=headers)
    assert "fields" not in assert_error(response, 403, "forbidden")


@pytest.mark.parametrize("method", ["TRACE", "DELETE", "PUT"])
def test_unknown_methods_are_405_with_allow(server: Any, method: str) -> None:
    response = httpx.request(method, f"{server.base_url}/health")
    assert_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "GET"


def test_strict_types_refuse_lax_values(server: Any, bearer: str) -> None:
    headers = {"Authorization": bearer}
    response = httpx.put(f"{server.base_url}/api/reasoning/consent", json={"reasoning_read": 0}, headers=headers)
    assert [f["loc"] for f in assert_error(response, 422, "validation_error")["fields"]] == [["body", "reasoning_read"]]


def test_a_chat_on_another_users_session_is_403_before_any_stream(server: Any, bearer: str) -> None:
    owner = server.cli("token", "--data-dir", str(server.data_dir.path), "--sub", "olive", "--scopes", "chat")
    started = httpx.post(
        f"{server.base_url}/api/chat",
        json={"query": "hello"},
        headers={"Authorization": f"Bearer {owner.stdout.strip()}", "Accept": "application/json"},
        timeout=60,
    )
    session = started.json()["session_id"]
    for accept in ("text/event-stream", "application/json"):
        with httpx.stream(
            "POST",
            f"{server.base_url}/api/chat",
            json={"query": "what did olive ask?", "session_id": session},
            headers={"Authorization": bearer, "Accept": accept},
            timeout=60,
        ) as response:
            response.read()
        assert response.headers["content-type"].startswith("application/json"), accept
        assert_error(response, 403, "forbidden")
    runs = httpx.get(f"{server.base_url}/api/chat/sessions/{session}/runs", headers={"Authorization": bearer})
    assert_error(runs, 404, "not_found")


def test_a_chat_without_the_chat_scope_is_403_before_any_stream(server: Any) -> None:
    reader = server.cli("token", "--data-dir", str(server.data_dir.path), "--sub", "rita", "--scopes", "documents")
    response = httpx.post(
        f"{server.base_url}/api/chat",
        content=json.dumps({"query": 5}).encode(),
        headers={"Authorization": f"Bearer {reader.stdout.strip()}", "Content-Type": "application/json"},
    )
    assert "fields" not in assert_error(response, 403, "forbidden")


@pytest.mark.parametrize("path", ["/api/me", "/api/chat"])
def test_the_servers_own_origin_gets_one_cors_header_and_a_credential_free_preflight(
    server: Any, bearer: str, path: str
) -> None:
    origin = server.base_url
    preflight = httpx.options(
        f"{server.base_url}{path}",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    method = "GET" if path == "/api/me" else "POST"
    response = httpx.request(
        method,
        f"{server.base_url}{path}",
        json=None if method == "GET" else {"query": "hello"},
        headers={"Authorization": bearer, "Origin": origin, "Accept": "application/json"},
        timeout=60,
    )
    assert response.status_code == 200
    assert response.headers.get_list("access-control-allow-origin") == [origin]


@pytest.mark.parametrize("route", BODY_ROUTES, ids=route_id)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"], ids=["not-json", "not-json-media-type"])
def test_an_oversized_body_is_413_whatever_else_is_wrong_with_it(
    server: Any, bearer: str, route: Any, content_type: str
) -> None:
    # Size is checked first: an 8 MiB body of garbage is never decoded, parsed or typed.
    body = b"x" * (limit_of(route) + 1)
    assert_error(send(server, bearer, route, body, content_type), 413, "payload_too_large")


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/json;charset=UTF-8"])
def test_json_with_a_charset_parameter_is_accepted(server: Any, bearer: str, content_type: str) -> None:
    body = json.dumps({"trigger_type": "user_question", "trigger_ref": "charset/1", "trigger_summary": "A question"})
    response = httpx.post(
        f"{server.base_url}/api/reasoning/flows",
        content=body.encode(),
        headers={"Authorization": bearer, "Content-Type": content_type},
    )
    assert response.status_code == 201, response.text


def test_brackets_inside_strings_are_not_nesting(server: Any, bearer: str) -> None:
    # 40 brackets in a string value: deeper than MAX_JSON_DEPTH if strings were counted, depth 1 in fact.
    body = {"trigger_type": "user_question", "trigger_ref": "[" * 20 + "{" * 20, "trigger_summary": "A question"}
    response = httpx.post(f"{server.base_url}/api/reasoning/flows", json=body, headers={"Authorization": bearer})
    assert response.status_code == 201, response.text


def test_a_client_sent_request_context_cannot_borrow_another_users_session(server: Any, bearer: str) -> None:
    owner = server.cli("token", "--data-dir", str(server.data_dir.path), "--sub", "oscar", "--scopes", "chat")
    started = httpx.post(
        f"{server.base_url}/api/chat",
        json={"query": "hello"},
        headers={"Authorization": f"Bearer {owner.stdout.strip()}", "Accept": "application/json"},
        timeout=60,
    )
    session = started.json()["session_id"]
    forged = json.dumps({"requestId": "forged", "authorizer": {"sub": "oscar", "scope": "chat", "patient_id": ""}})
    runs = httpx.get(
        f"{server.base_url}/api/chat/sessions/{session}/runs",
        headers={"Authorization": bearer, "x-amzn-request-context": forged},
    )
    assert_error(runs, 404, "not_found")  # mallory's own view: oscar's session does not exist for her


def test_the_server_log_has_the_gateway_line_and_never_the_query_string(server: Any) -> None:
    path, secret = f"/api/nowhere-{uuid.uuid4().hex[:8]}", f"Jane-{uuid.uuid4().hex[:8]}"
    assert httpx.get(f"{server.base_url}{path}?patient={secret}").status_code == 404
    deadline = time.monotonic() + 5
    while f"GET {path} 404" not in server.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    output = server.output()
    assert re.search(rf"GET {re.escape(path)} 404 \d+\.\d ms", output), output[-2000:]
    assert secret not in output


def test_a_closed_terminal_stops_the_server_and_saves_the_store(tmp_path: Path, launch: Callable[..., Any]) -> None:
    running = launch(tmp_path / "data")
    assert running.stop(signal.SIGHUP) == 0
    assert "flowledger: stopped; state saved" in running.output()
    assert running.data_dir.state_file.exists()


@pytest.mark.parametrize("path", ["/api/reasoning/flows", "/api/chat"])
def test_media_types_are_case_insensitive_on_rest_and_chat_routes(server: Any, bearer: str, path: str) -> None:
    body = (
        {"trigger_type": "user_question", "trigger_ref": "case/1", "trigger_summary": "A question"}
        if path == "/api/reasoning/flows"
        else {"query": "hello"}
    )
    response = httpx.post(
        f"{server.base_url}{path}",
        content=json.dumps(body).encode(),
        headers={"Authorization": bearer, "Content-Type": "Application/JSON", "Accept": "application/json"},
        timeout=60,
    )
    assert response.status_code in (200, 201), response.text
