"""A flow opened under a client-chosen id (``FlowStart.flow_id``): the route keeps it, refuses it twice
(409) and refuses a malformed one (422); the recorder chooses it before anything is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
from flowledger.reasoning.service import FlowService
from flowledger.services import Services

WRITER = {"sub": "agent-researcher", "scope": "reasoning.write", "patient_id": ""}
AGENT = Principal(kind="user", id="agent-researcher", scopes=frozenset({"reasoning.write"}))
ADMIN = Principal(kind="iam", id="arn:aws:iam::1:user/a")
START = {"trigger_type": "user_question", "trigger_ref": "chat/run-1", "trigger_summary": "Question about a lab"}


def _post(load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any, body: Any) -> tuple[int, Any]:
    handler = load_function("reasoning").handler
    response = handler(rest_event("POST", "/api/reasoning/flows", body=body, authorizer=WRITER), lambda_context)
    return response["statusCode"], json.loads(response["body"])


def test_a_chosen_flow_id_is_kept_and_a_second_open_under_it_is_409(
    services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any
) -> None:
    chosen = new_id("fl_")
    status, body = _post(load_function, rest_event, lambda_context, {**START, "flow_id": chosen})
    assert status == 201 and body["flow_id"] == chosen
    status, body = _post(load_function, rest_event, lambda_context, {**START, "flow_id": chosen})
    assert status == 409 and f"flow {chosen} already exists" in body["message"], body


def test_a_malformed_chosen_flow_id_is_422(
    services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any
) -> None:
    status, _ = _post(load_function, rest_event, lambda_context, {**START, "flow_id": "fl_lowercase"})
    assert status == 422


def test_a_deferred_recording_names_its_flow_before_writing_it_under_that_id(services: Services) -> None:
    recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(services), AGENT))
    with recorder.flow("chat_turn", "chat/run-1", "A chat turn", deferred=True) as flow:
        planned = flow.flow_id
        flow.step("routing", "intent_router", "Routed the turn")
    assert planned is not None and flow.flow_id == planned
    assert FlowService(services).admin_flow(ADMIN, planned).flow.flow_state == "completed"
