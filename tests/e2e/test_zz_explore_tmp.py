"""The served OpenAPI document as a contract: it is valid 3.1, it lists every route, a client
generated from it works against the server, and the server answers generated requests as it says."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import requests
import schemathesis
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    negative_data_rejection,
)

from flowledger import __version__
from flowledger.api.access import ADMIN_PREFIX, CLIENT_PREFIX
from flowledger.api.chat_app import CHAT_ROUTES
from flowledger.api.openapi import openapi_document
from flowledger.api.registry import rest_routes
from flowledger.api.routes import routes_of

pytestmark = pytest.mark.e2e

SCOPES = "chat,documents,reasoning.read,reasoning.write"
PATIENT = "p-1"
CLIENT_PACKAGE = "flowledger_contract_client"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Bounded and reproducible: one seed, derandomized, no example database, so CI sends the same requests.
SCHEMATHESIS = {
    "seed": 20260611,
    "generation": {"max-examples": 400, "deterministic": True, "database": "none", "with-security-parameters": False},
    "phases": {"stateful": {"enabled": False}},
    "request-timeout": 30,
}


@pytest.fixture(scope="module")
def document(server: Any) -> dict[str, Any]:
    response = httpx.get(f"{server.base_url}/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


@pytest.fixture(scope="module")
def bearer(server: Any) -> str:
    result = server.cli(
        "token",
        "--data-dir",
        str(server.data_dir.path),
        "--sub",
        "contract",
        "--scopes",
        SCOPES,
        "--patient-id",
        PATIENT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


class SigV4HttpxAuth(httpx.Auth):
    """SigV4 for the generated (httpx) client: signs the method, URL, headers and body it sends."""

    requires_request_body = True

    def __init__(self, server: Any) -> None:
        self._signer = _signer(server)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        signed = AWSRequest(method=request.method, url=str(request.url), data=request.content, headers=headers)
        self._signer.add_auth(signed)
        request.headers["Authorization"] = signed.headers["Authorization"]
        request.headers["X-Amz-Date"] = signed.headers["X-Amz-Date"]
        yield request


def _signer(server: Any) -> SigV4Auth:
    credentials = server.data_dir.admin_credentials()
    return SigV4Auth(
        Credentials(credentials.access_key_id, credentials.secret_access_key), "execute-api", credentials.region
    )


# --- schemathesis against the running server --------------------------------------------------------


class GatewayAuth(requests.auth.AuthBase):
    """What a real caller adds: a bearer token on client routes, a SigV4 signature on admin routes.

    It runs on the prepared request, so the signature covers the exact method, URL with its query
    string, headers and body bytes that go on the wire, which is what the server verifies.
    """

    def __init__(self, server: Any, bearer: str) -> None:
        self._bearer = bearer
        self._signer = _signer(server)

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        path = urlsplit(request.url).path
        if path.startswith(ADMIN_PREFIX):
            body = request.body or b""
            signed = AWSRequest(
                method=request.method,
                url=request.url,
                data=body.encode() if isinstance(body, str) else body,
                headers=dict(request.headers),
            )
            self._signer.add_auth(signed)
            request.headers["Authorization"] = signed.headers["Authorization"]
            request.headers["X-Amz-Date"] = signed.headers["X-Amz-Date"]
        elif path.startswith(CLIENT_PREFIX):
            request.headers["Authorization"] = f"Bearer {self._bearer}"
        return request


@pytest.fixture(scope="module")
def gateway_auth(server: Any, bearer: str) -> GatewayAuth:
    return GatewayAuth(server, bearer)


@pytest.fixture(scope="module")
def sse_validators(document: dict[str, Any]) -> dict[str, Draft202012Validator]:
    """One validator per documented SSE event type, from the document's ``x-sse-events``."""
    media = document["paths"]["/api/chat"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    components = document["components"]
    return {
        name: Draft202012Validator({**ref, "components": components}) for name, ref in media["x-sse-events"].items()
    }


def assert_sse_events_documented(text: str, validators: dict[str, Draft202012Validator]) -> None:
    """Every frame is ``event: <type>`` / ``data: <json>`` with a documented type and a matching payload."""
    frames = [frame for frame in text.split("\n\n") if frame.strip()]
    assert frames, "an empty event stream"
    for frame in frames:
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        assert fields.keys() == {"event", "data"}, frame
        assert fields["event"] in validators, f"undocumented event type: {frame}"
        data = json.loads(fields["data"])
        errors = [e.message for e in validators[fields["event"]].iter_errors(data)]
        assert not errors and data["type"] == fields["event"], f"{frame}\n{errors}"


# Built in-process because schemathesis parametrizes at collection, before the server runs (its lazy
# `schemathesis.pytest.from_fixture` breaks on pytest 9.2); the first test above proves it is the served one.
CONTRACT = schemathesis.openapi.from_dict(
    openapi_document(__version__), config=schemathesis.Config.from_dict(SCHEMATHESIS)
)


@CONTRACT.parametrize()
def test_every_operation_answers_as_documented(
    case: schemathesis.Case, server: Any, gateway_auth: GatewayAuth, sse_validators: dict[str, Draft202012Validator]
) -> None:
    response = case.call(base_url=server.base_url, auth=gateway_auth)
    if response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        # The document types the stream as a string and its events in `x-sse-events`; schemathesis reads
        # a 3.1 `schema` as one event's, so the events are checked against `x-sse-events` instead.
        case.validate_response(response, checks=[c for c in CHECKS if c is not response_schema_conformance] + [negative_data_rejection])
        assert_sse_events_documented(response.text, sse_validators)
    else:
        case.validate_response(response, checks=CHECKS + [negative_data_rejection])


@CONTRACT.include(method="POST", path="/api/chat").parametrize()
def test_the_json_chat_variant_answers_as_documented(
    case: schemathesis.Case, server: Any, gateway_auth: GatewayAuth
) -> None:
    case.call_and_validate(
        base_url=server.base_url, auth=gateway_auth, headers={"Accept": "application/json"}, checks=CHECKS + [negative_data_rejection]
    )
