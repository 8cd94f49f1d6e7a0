"""The core Lambda function, invoked with API Gateway events as in AWS."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def invoke(load_function: Callable[[str], Any], lambda_context: Any) -> Callable[[dict[str, Any]], tuple[int, Any]]:
    handler = load_function("core").handler

    def call(event: dict[str, Any]) -> tuple[int, Any]:
        response = handler(event, lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return call


def test_health_is_public_and_says_the_offline_model_answers_without_a_server(invoke: Any, rest_event: Any) -> None:
    assert invoke(rest_event("GET", "/health")) == (200, {"status": "ok", "model": "offline"})


@pytest.mark.parametrize("kind", ["server", "offline"])
def test_health_says_what_the_deployment_gave_the_chat(
    kind: str, load_function: Callable[[str], Any], lambda_context: Any, rest_event: Any, monkeypatch: Any
) -> None:
    # In AWS only the chat and jobs functions get the model's settings; CDK tells every function which it is.
    from flowledger.services import bootstrap

    monkeypatch.setenv("FLOWLEDGER_DEPLOYED_CHAT_MODEL", kind)
    bootstrap.cache_clear()  # a cold start reads the environment
    try:
        response = load_function("core").handler(rest_event("GET", "/health"), lambda_context)
    finally:
        bootstrap.cache_clear()
    assert json.loads(response["body"]) == {"status": "ok", "model": kind}


def test_me_returns_the_authorizer_principal(invoke: Any, rest_event: Any) -> None:
    status, body = invoke(
        rest_event("GET", "/api/me", authorizer={"sub": "alice", "scope": "chat reasoning.read", "patient_id": "p-9"})
    )
    assert status == 200
    assert body == {"kind": "user", "principal": "alice", "scopes": ["chat", "reasoning.read"], "patient_id": "p-9"}


def test_me_without_authorizer_context_is_401(invoke: Any, rest_event: Any) -> None:
    assert invoke(rest_event("GET", "/api/me"))[0] == 401


def test_admin_me_returns_the_iam_principal(invoke: Any, rest_event: Any) -> None:
    arn = "arn:aws:sts::123456789012:assumed-role/operator/jane"
    status, body = invoke(rest_event("GET", "/admin/v1/me", user_arn=arn))
    assert (status, body["principal"], body["kind"]) == (200, arn, "iam")


def test_admin_me_without_iam_identity_is_403(invoke: Any, rest_event: Any) -> None:
    assert invoke(rest_event("GET", "/admin/v1/me"))[0] == 403


def test_a_bearer_token_does_not_open_admin_routes(invoke: Any, rest_event: Any) -> None:
    event = rest_event("GET", "/admin/v1/me", authorizer={"sub": "alice", "scope": "chat"})
    assert invoke(event)[0] == 403
