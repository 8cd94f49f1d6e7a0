"""Admin subject routes (IAM): what is held about a patient, legal holds, and erasure (its own function and role)."""

from __future__ import annotations

import time
from typing import Annotated

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.params import Path
from pydantic import BaseModel, ConfigDict, Field

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.subjects import PATIENT_ID_PATTERN
from flowledger.subjects.erasure import ErasureView, SubjectErasure
from flowledger.subjects.holdings import SubjectView, subject_view
from flowledger.subjects.holds import Hold, LegalHolds

router = Router()
PatientId = Annotated[str, Path(pattern=PATIENT_ID_PATTERN)]
# What one request spends erasing before it answers 202 (the rest: the next request, or subject_erasure_resume):
# well inside API Gateway's 29 seconds.
REQUEST_BUDGET_SECONDS = 20.0


class ErasureRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Recorded in the ledger, so a code, not prose: "gdpr_art17_request", "ticket:INC-2211".
    reason: str = Field(pattern=r"^[A-Za-z0-9_.:/@+=-]{1,128}$")


class HoldRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=500)  # shown in the 409 an erasure meets; the ledger keeps its digest


@router.get(
    "/admin/v1/subjects/<patient_id>",
    summary="What is held about a patient: by data class and since when, any legal hold, any erasure",
    tags=["subjects"],
)
def subject(patient_id: PatientId) -> SubjectView:
    iam_principal(router.current_event.raw_event)
    return subject_view(services_of(router), patient_id)


@router.post(
    "/admin/v1/subjects/<patient_id>/erasure",
    summary="Erase a patient's data (idempotent: a retry resumes or repeats the receipt)",
    description=(
        "Destroys the patient's data key, deletes their flows' steps, waiting spans and pathways, leaves "
        "tombstones, deletes their consent, and records the receipt `admin.subject.erased`. 409 while a legal "
        "hold stands. 202 when the request's time ran out first: send it again, or the subject_erasure_resume job "
        "finishes it within minutes."
    ),
    tags=["subjects"],
    responses={
        200: {"description": "erased", "content": {"application/json": {"model": ErasureView}}},
        202: {"description": "still running: send it again", "content": {"application/json": {"model": ErasureView}}},
    },
)
def erase(patient_id: PatientId, body: ErasureRequest) -> Response[str]:
    admin = iam_principal(router.current_event.raw_event)
    deadline = time.monotonic() + REQUEST_BUDGET_SECONDS
    view = SubjectErasure(services_of(router)).erase(admin, patient_id, body.reason, deadline)
    status = 200 if view.phase == "completed" else 202
    return Response(status, content_types.APPLICATION_JSON, view.model_dump_json())


@router.put("/admin/v1/subjects/<patient_id>/hold", summary="Place a legal hold on a patient", tags=["subjects"])
def place_hold(patient_id: PatientId, body: HoldRequest) -> Hold:
    admin = iam_principal(router.current_event.raw_event)
    return LegalHolds(services_of(router)).place(admin, patient_id, body.reason)


@router.delete("/admin/v1/subjects/<patient_id>/hold", summary="Lift a patient's legal hold", tags=["subjects"])
def lift_hold(patient_id: PatientId) -> Hold:
    admin = iam_principal(router.current_event.raw_event)
    return LegalHolds(services_of(router)).lift(admin, patient_id)
