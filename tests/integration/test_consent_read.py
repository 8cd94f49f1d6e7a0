"""`GET /api/reasoning/consent` through the reasoning function on moto: a patient reads their own choice."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from flowledger.services import Services

PATIENT = {"sub": "u-ann", "scope": "reasoning.read", "patient_id": "p-ann"}
OTHER_PATIENT = {"sub": "u-bob", "scope": "reasoning.read", "patient_id": "p-bob"}
READER_WITHOUT_PATIENT = {"sub": "svc-reader", "scope": "reasoning.read", "patient_id": ""}
WRITER = {"sub": "agent-researcher", "scope": "reasoning.write", "patient_id": ""}
PATIENT_WITHOUT_SCOPE = {"sub": "u-ann", "scope": "chat", "patient_id": "p-ann"}

Call = Callable[..., tuple[int, Any]]


@pytest.fixture
def call(services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Call:
    handler = load_function("reasoning").handler

    def invoke(method: str, who: dict[str, str] | None, body: Any = None) -> tuple[int, Any]:
        event = rest_event(method, "/api/reasoning/consent", body=body, authorizer=who)
        response = handler(event, lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return invoke


def ledger_size(services: Services) -> int:
    return sum(1 for chain in services.ledger.chain_ids() for _ in services.ledger.read_chain(chain))


def test_a_patient_who_never_chose_reads_opted_out(call: Call) -> None:
    assert call("GET", PATIENT) == (200, {"patient_id": "p-ann", "reasoning_read": False, "changed_at": None})


def test_the_read_follows_each_change(call: Call) -> None:
    status, opted_in = call("PUT", PATIENT, {"reasoning_read": True})
    assert status == 200
    assert call("GET", PATIENT) == (200, opted_in)
    assert opted_in["reasoning_read"] is True and opted_in["changed_at"]
    status, opted_out = call("PUT", PATIENT, {"reasoning_read": False})
    assert status == 200
    assert call("GET", PATIENT) == (200, opted_out)
    assert opted_out["reasoning_read"] is False


def test_a_patient_reads_only_their_own_choice(call: Call) -> None:
    assert call("PUT", PATIENT, {"reasoning_read": True})[0] == 200
    assert call("GET", OTHER_PATIENT) == (200, {"patient_id": "p-bob", "reasoning_read": False, "changed_at": None})


@pytest.mark.parametrize(
    "who", [READER_WITHOUT_PATIENT, WRITER, PATIENT_WITHOUT_SCOPE], ids=["no-patient-claim", "writer", "no-scope"]
)
def test_only_a_patient_token_with_the_scope_reads_it(call: Call, who: dict[str, str]) -> None:
    status, body = call("GET", who)
    assert status == 403, body
    assert set(body) == {"error", "message", "request_id"}


def test_no_token_is_401(call: Call) -> None:
    assert call("GET", None)[0] == 401


def test_reading_records_nothing(call: Call, services: Services) -> None:
    assert call("PUT", PATIENT, {"reasoning_read": True})[0] == 200
    before = ledger_size(services)
    for _ in range(3):
        assert call("GET", PATIENT)[0] == 200
    assert ledger_size(services) == before
