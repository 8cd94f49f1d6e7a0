"""Core routes: liveness and "who am I" for both kinds of caller."""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import BaseModel, Field

from flowledger.api.access import any_token
from flowledger.api.app import services_of
from flowledger.api.principals import client_principal, iam_principal

router = Router()


class Health(BaseModel):
    status: str
    model: Literal["server", "offline"] = Field(
        description="What answers the chat: a model server, or the offline rule-based model (a trial's default)"
    )


class Me(BaseModel):
    kind: str
    principal: str
    scopes: list[str]
    patient_id: str | None = None


@router.get("/health", summary="Liveness", tags=["core"])
def health() -> Health:
    return Health(status="ok", model=services_of(router).settings.chat_model_kind)


@router.get("/api/me", summary="The bearer token's principal and scopes", tags=["core"], security=any_token())
def me() -> Me:
    principal = client_principal(router.current_event.raw_event)
    return Me(
        kind=principal.kind, principal=principal.id, scopes=sorted(principal.scopes), patient_id=principal.patient_id
    )


@router.get("/admin/v1/me", summary="The calling IAM principal", tags=["admin"])
def admin_me() -> Me:
    principal = iam_principal(router.current_event.raw_event)
    return Me(kind=principal.kind, principal=principal.id, scopes=[])
