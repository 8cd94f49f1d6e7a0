"""The console pool's pre token generation trigger (``functions/token_claims``), invoked with Cognito's V1 events:
the id token gets the scopes of the user's groups and their patient id, and the logs name neither."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from flowledger.api.group_scopes import GROUP_SCOPES
from flowledger.api.tokens import SCOPES
from tests.conftest import load_event

Trigger = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture
def trigger(load_function: Callable[[str], Any], lambda_context: Any) -> Trigger:
    handler = load_function("token_claims").handler
    return lambda event: handler(event, lambda_context)


def cognito_event(
    groups: list[str], *, patient_id: str | None = "p-7001", source: str = "TokenGeneration_Authentication"
) -> dict[str, Any]:
    """Cognito's V1 event for a user in ``groups`` (with or without ``custom:patient_id``)."""
    event = copy.deepcopy(load_event("cognito_pre_token_generation"))
    event["triggerSource"] = source
    event["request"]["groupConfiguration"]["groupsToOverride"] = groups
    if patient_id is None:
        del event["request"]["userAttributes"]["custom:patient_id"]
    else:
        event["request"]["userAttributes"]["custom:patient_id"] = patient_id
    return event


def added(answer: dict[str, Any]) -> dict[str, str]:
    claims: dict[str, str] = answer["response"]["claimsOverrideDetails"]["claimsToAddOrOverride"]
    return claims


def test_a_patient_gets_reasoning_read_and_their_patient_id(trigger: Trigger) -> None:
    answer = trigger(cognito_event(["patients"]))
    assert added(answer) == {"scope": "reasoning.read", "patient_id": "p-7001"}
    # The rest of the event goes back as Cognito sent it.
    assert answer["userName"] == "jane.patient" and answer["request"]["groupConfiguration"]["groupsToOverride"] == [
        "patients"
    ]


def test_a_chat_user_gets_chat_and_documents(trigger: Trigger) -> None:
    assert added(trigger(cognito_event(["chat-users"], patient_id=None))) == {"scope": "chat documents"}


def test_a_user_in_both_groups_gets_every_scope_once(trigger: Trigger) -> None:
    answer = trigger(cognito_event(["chat-users", "patients", "patients"]))
    assert added(answer) == {"scope": "chat documents reasoning.read", "patient_id": "p-7001"}


@pytest.mark.parametrize("groups", [[], ["operators"], ["someone-made-this-up"]])
def test_a_user_in_no_scoped_group_gets_no_scope(trigger: Trigger, groups: list[str]) -> None:
    assert added(trigger(cognito_event(groups, patient_id=None))) == {}


@pytest.mark.parametrize("patient_id", [None, "", "   "])
def test_without_a_patient_id_attribute_there_is_no_patient_id_claim(trigger: Trigger, patient_id: str | None) -> None:
    assert added(trigger(cognito_event(["patients"], patient_id=patient_id))) == {"scope": "reasoning.read"}


def test_a_refreshed_token_gets_the_same_claims(trigger: Trigger) -> None:
    event = cognito_event(["patients"], source="TokenGeneration_RefreshTokens")
    assert added(trigger(event)) == {"scope": "reasoning.read", "patient_id": "p-7001"}


def test_claims_another_step_already_added_are_kept(trigger: Trigger) -> None:
    event = cognito_event(["patients"])
    event["response"]["claimsOverrideDetails"] = {"claimsToAddOrOverride": {"tenant": "t-1"}, "claimsToSuppress": []}
    details = trigger(event)["response"]["claimsOverrideDetails"]
    assert details == {
        "claimsToAddOrOverride": {"tenant": "t-1", "scope": "reasoning.read", "patient_id": "p-7001"},
        "claimsToSuppress": [],
    }


def test_the_log_names_no_person(trigger: Trigger, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        trigger(cognito_event(["patients"]))
    (record,) = [r for r in caplog.records if r.getMessage() == "id token claims added"]
    assert (vars(record)["scope"], vars(record)["has_patient_id"]) == ("reasoning.read", True)
    logged = json.dumps([vars(r) for r in caplog.records], default=str)
    for personal in ("p-7001", "jane", "0b0a57c5"):
        assert personal not in logged


def test_every_mapped_scope_is_one_the_api_knows() -> None:
    # A scope the verifier does not know is dropped from the token: the group would give nothing.
    assert {scope for scopes in GROUP_SCOPES.values() for scope in scopes} <= SCOPES
    assert GROUP_SCOPES["operators"] == ()  # operators sign with IAM


def test_an_event_whose_response_is_null_still_gets_the_claims(trigger: Trigger) -> None:
    event = cognito_event(["patients"])
    event["response"] = None
    assert added(trigger(event)) == {"scope": "reasoning.read", "patient_id": "p-7001"}
