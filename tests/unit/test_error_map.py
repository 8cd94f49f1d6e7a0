"""Every route shares one error shape, and every request is screened before its schema is checked.

The handler is the real Lambda entrypoint (``rest_handler``), so screening and the error map run
exactly as deployed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import BaseModel, Field

from flowledger import errors
from flowledger.api.access import needs_scope
from flowledger.api.app import rest_handler
from flowledger.api.principals import require_scope
from flowledger.config import load_settings
from flowledger.services import build_services

router = Router()


class Payload(BaseModel):
    name: str = Field(min_length=1)
    count: int


@router.post("/api/things", security=needs_scope("documents"))
def create_thing(payload: Payload) -> dict[str, Any]:
    return {"name": payload.name}


@router.get("/api/raise/<kind>")
def raise_error(kind: str) -> dict[str, Any]:
    raise {
        "invalid": errors.InvalidInput("bad thing"),
        "notfound": errors.NotFound("no thing"),
        "conflict": errors.Conflict("thing closed"),
        "forbidden": errors.Forbidden("not yours"),
    }[kind]


@router.get("/api/crash")
def crash() -> dict[str, Any]:
    raise RuntimeError("secret internals: patient 123-45-6789")


@router.get("/api/scoped", security=needs_scope("reasoning.read"))
def scoped() -> dict[str, Any]:
    principal = require_scope(router.current_event.raw_event, "reasoning.read")
    return {"sub": principal.id}


CALLER = {"sub": "u1", "scope": "documents", "patient_id": ""}
REQUEST_ID = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"  # the fixture event's requestContext.requestId


@pytest.fixture
def call(rest_event: Callable[..., dict[str, Any]], lambda_context: Any) -> Callable[..., tuple[int, Any]]:
    services = build_services(load_settings(max_body_bytes=200))
    handler = rest_handler(router, service="errors", services=lambda: services)

    def invoke(method: str, path: str, raw: dict[str, Any] | None = None, **kwargs: Any) -> tuple[int, Any]:
        kwargs.setdefault("authorizer", CALLER)
        event = rest_event(method, path, **kwargs)
        event.update(raw or {})
        response = handler(event, lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return invoke


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("invalid", 422, "invalid_input"),
        ("notfound", 404, "not_found"),
        ("conflict", 409, "conflict"),
        ("forbidden", 403, "forbidden"),
    ],
)
def test_domain_errors_map_to_status_and_code(call: Any, kind: str, status: int, code: str) -> None:
    assert call("GET", f"/api/raise/{kind}") == (
        status,
        {
            "error": code,
            "message": {
                "invalid": "bad thing",
                "notfound": "no thing",
                "conflict": "thing closed",
                "forbidden": "not yours",
            }[kind],
            "request_id": REQUEST_ID,
        },
    )


def test_schema_violations_are_422_with_field_locations(call: Any) -> None:
    status, body = call("POST", "/api/things", body={"name": "", "count": "many"})
    assert status == 422
    assert body["error"] == "validation_error"
    locations = {tuple(field["loc"]) for field in body["fields"]}
    assert ("body", "name") in locations and ("body", "count") in locations
    assert "many" not in json.dumps(body)  # the input is never echoed back


def test_body_over_the_limit_is_413_before_parsing(call: Any) -> None:
    status, body = call("POST", "/api/things", body={"name": "x" * 500, "count": 1})
    assert (status, body["error"]) == (413, "payload_too_large")


def test_unexpected_errors_are_500_with_request_id_and_no_internals(call: Any) -> None:
    status, body = call("GET", "/api/crash")
    assert status == 500
    assert body["error"] == "internal_error"
    assert body["request_id"] == REQUEST_ID
    assert "secret" not in json.dumps(body) and "123-45-6789" not in json.dumps(body)


def test_unknown_route_is_404_in_the_same_shape(call: Any) -> None:
    status, body = call("GET", "/api/nowhere")
    assert (status, body["error"]) == (404, "not_found")


def test_scoped_route_needs_its_scope(call: Any) -> None:
    without = call("GET", "/api/scoped", authorizer={"sub": "u1", "scope": "chat", "patient_id": ""})
    with_scope = call("GET", "/api/scoped", authorizer={"sub": "u1", "scope": "chat reasoning.read"})
    assert without[0] == 403 and without[1]["error"] == "forbidden"
    assert with_scope == (200, {"sub": "u1"})


def test_scoped_route_without_a_principal_is_401(call: Any) -> None:
    status, body = call("GET", "/api/scoped", authorizer={})
    assert (status, body["error"]) == (401, "unauthorized")


def test_a_wrong_scope_is_refused_before_the_body_is_validated(call: Any) -> None:
    status, body = call("POST", "/api/things", body={"name": 7}, authorizer={"sub": "u1", "scope": "chat"})
    assert (status, body["error"]) == (403, "forbidden")
    assert "fields" not in body  # the caller learns nothing of the schema


def test_an_over_limit_body_is_413_even_when_it_is_not_json(call: Any) -> None:
    status, body = call("POST", "/api/things", body="[" * 300)
    assert (status, body["error"], body["request_id"]) == (413, "payload_too_large", REQUEST_ID)


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        ({"body": "gP/+", "isBase64Encoded": True}, 400, "malformed_body"),  # not UTF-8
        ({"body": "[" * 40 + "]" * 40}, 400, "malformed_body"),  # deeper than the limit
        ({"body": '{"name": '}, 400, "malformed_body"),  # not JSON
        ({"body": '{"name": "a", "count": 1}', "headers": {"Content-Type": "multipart/form-data"}}, 415, None),
        ({"body": '{"name": "a", "count": 1}', "headers": {"Content-Type": "text/plain"}}, 415, None),
    ],
)
def test_bodies_that_are_not_json_are_client_errors(
    call: Any, raw: dict[str, Any], status: int, code: str | None
) -> None:
    got, body = call("POST", "/api/things", raw=raw, headers={"Content-Type": "application/json"})
    assert got == status
    assert body["error"] == (code or "unsupported_media_type") and body["request_id"] == REQUEST_ID


def test_a_json_body_with_a_charset_is_accepted(call: Any) -> None:
    raw = {"body": '{"name": "a", "count": 1}', "headers": {"Content-Type": "application/json; charset=utf-8"}}
    assert call("POST", "/api/things", raw=raw) == (200, {"name": "a"})


def test_functions_answer_allowed_origins_with_cors_headers(
    rest_event: Callable[..., dict[str, Any]], lambda_context: Any
) -> None:
    services = build_services(load_settings(cors_origins="https://console.test,https://other.test"))
    handler = rest_handler(router, service="errors", services=lambda: services)

    def origin_header(origin: str) -> str | None:
        event = rest_event("GET", "/api/scoped", authorizer={"sub": "u1", "scope": "reasoning.read"})
        event["headers"]["Origin"] = origin
        response = handler(event, lambda_context)
        headers = {**response.get("headers", {}), **{k: v[0] for k, v in response.get("multiValueHeaders", {}).items()}}
        return headers.get("Access-Control-Allow-Origin")

    assert origin_header("https://other.test") == "https://other.test"
    assert origin_header("https://evil.test") is None
