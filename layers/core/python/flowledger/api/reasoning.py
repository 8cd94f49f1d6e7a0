"""Reasoning routes: agents write flows (reasoning.write); patients read their own (reasoning.read)."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from flowledger.api.access import needs_scope
from flowledger.api.app import services_of
from flowledger.api.principals import require_scope
from flowledger.reasoning.listing import FlowListing, PatientFlowPage
from flowledger.reasoning.models import (
    Consent,
    ConsentChange,
    FlowClose,
    FlowStart,
    FlowView,
    InProgress,
    Narrative,
    StepBatch,
    StepBatchResult,
    StepCreate,
    StepView,
)
from flowledger.reasoning.service import FlowService

router = Router()
FlowId = Annotated[str, Path(pattern=r"^fl_[0-9A-Z]{26}$")]


def _service() -> FlowService:
    return FlowService(services_of(router))


def _json(status: int, body: Any) -> Response[str]:
    return Response(status, content_types.APPLICATION_JSON, body.model_dump_json())


@router.post(
    "/api/reasoning/flows",
    summary="Open a reasoning flow",
    tags=["reasoning"],
    security=needs_scope("reasoning.write"),
    responses={201: {"description": "the new flow", "content": {"application/json": {"model": FlowView}}}},
)
def start_flow(body: FlowStart) -> Response[str]:
    principal = require_scope(router.current_event.raw_event, "reasoning.write")
    return _json(201, _service().start_flow(principal, body))


@router.post(
    "/api/reasoning/flows/<flow_id>/steps",
    summary="Record a step",
    tags=["reasoning"],
    security=needs_scope("reasoning.write"),
    responses={201: {"description": "the recorded step", "content": {"application/json": {"model": StepView}}}},
)
def add_step(flow_id: FlowId, body: StepCreate) -> Response[str]:
    principal = require_scope(router.current_event.raw_event, "reasoning.write")
    step: StepView = _service().add_step(principal, flow_id, body)
    return _json(201, step)


@router.post(
    "/api/reasoning/flows/<flow_id>/steps:batch",
    summary="Record several steps at once (all or nothing)",
    description=(
        "Up to 49 steps (one DynamoDB transaction: the flow check, then each step with its audit event), "
        "each under the rules of a single step; a parent may be an earlier step of the batch. A retry is "
        "safe: steps an earlier attempt recorded with the same content are listed in `already_recorded` "
        "and not written again; a step id recorded with other content is a 409."
    ),
    tags=["reasoning"],
    security=needs_scope("reasoning.write"),
    responses={
        201: {"description": "steps were recorded", "content": {"application/json": {"model": StepBatchResult}}},
        200: {
            "description": "every step was already recorded by an earlier attempt",
            "content": {"application/json": {"model": StepBatchResult}},
        },
    },
)
def add_steps(flow_id: FlowId, body: StepBatch) -> Response[str]:
    principal = require_scope(router.current_event.raw_event, "reasoning.write")
    result: StepBatchResult = _service().add_steps(principal, flow_id, body.steps)
    return _json(201 if result.recorded else 200, result)


@router.patch(
    "/api/reasoning/flows/<flow_id>",
    summary="Close a flow (once)",
    tags=["reasoning"],
    security=needs_scope("reasoning.write"),
)
def close_flow(flow_id: FlowId, body: FlowClose) -> FlowView:
    principal = require_scope(router.current_event.raw_event, "reasoning.write")
    return _service().close_flow(principal, flow_id, body)


@router.get(
    "/api/reasoning/flows",
    summary="Your own flows, newest first",
    description=(
        "A patient's token only, once opted in (else 403 `consent_required`), at the narrative's rate. Each "
        "flow says what it was about only when its explanation can be read (closed, and its summaries passed "
        "the guard). Pass `next_cursor` back as `cursor` for older ones."
    ),
    tags=["reasoning"],
    security=needs_scope("reasoning.read"),
)
def my_flows(
    limit: Annotated[int, Query(ge=1, le=50)] = 20,
    cursor: Annotated[str | None, Query(max_length=600)] = None,
) -> PatientFlowPage:
    principal = require_scope(router.current_event.raw_event, "reasoning.read")
    return FlowListing(services_of(router)).patient_flows(principal, limit, cursor)


@router.get(
    "/api/reasoning/flows/<flow_id>",
    summary="A patient's narrative of their flow",
    tags=["reasoning"],
    security=needs_scope("reasoning.read"),
    responses={
        200: {"description": "the narrative", "content": {"application/json": {"model": Narrative}}},
        202: {"description": "still in progress", "content": {"application/json": {"model": InProgress}}},
    },
)
def patient_narrative(flow_id: FlowId) -> Response[str]:
    principal = require_scope(router.current_event.raw_event, "reasoning.read")
    view: Narrative | InProgress = _service().patient_narrative(principal, flow_id)
    return _json(202 if isinstance(view, InProgress) else 200, view)


@router.get(
    "/api/reasoning/consent",
    summary="Your current choice about reading your flows",
    description="Opted out (`reasoning_read: false`, `changed_at: null`) until you opt in. A patient's token only.",
    tags=["reasoning"],
    security=needs_scope("reasoning.read"),
)
def read_consent() -> Consent:
    principal = require_scope(router.current_event.raw_event, "reasoning.read")
    return _service().read_consent(principal)


@router.put(
    "/api/reasoning/consent",
    summary="Opt in or out of reading your flows",
    tags=["reasoning"],
    security=needs_scope("reasoning.read"),
)
def set_consent(body: ConsentChange) -> Consent:
    principal = require_scope(router.current_event.raw_event, "reasoning.read")
    return _service().set_consent(principal, body)
