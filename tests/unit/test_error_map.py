"""Every route shares one error shape: {"error": code, "message": ...}."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import BaseModel, Field

from flowledger import errors
from flowledger.api.app import build_resolver
from flowledger.api.principals import require_scope
from flowledger.config import load_settings
from flowledger.services import build_services

router = Router()


class Payload(BaseModel):
    name: str = Field(min_length=1)
    count: int


@router.post("/api/things")
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


@router.get("/api/scoped")
def scoped() -> dict[str, Any]:
    principal = require_scope(router.current_event.raw_event, "reasoning.read")
    return {"sub": principal.id}


@pytest.fixture
def call(rest_event: Callable[..., dict[str, Any]], lambda_context: Any) -> Callable[..., tuple[int, Any]]:
    app = build_resolver([router], APIGatewayRestResolver)
    services = build_services(load_settings(max_body_bytes=200))

    def invoke(method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        app.append_context(services=services)
        response = app.resolve(rest_event(method, path, **kwargs), lambda_context)
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
    assert body["request_id"] == "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
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
    status, body = call("GET", "/api/scoped")
    assert (status, body["error"]) == (401, "unauthorized")
