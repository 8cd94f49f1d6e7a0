"""Admin reasoning routes (IAM) of the flow page: a flow's steps a page at a time, and one sealed field opened."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.reasoning.steps_page import (
    DEFAULT_STEPS_PAGE,
    MAX_STEPS_PAGE,
    AdminStepPage,
    FlowPageReader,
    SealedFieldValue,
    Side,
)

router = Router()

FLOW_ID = r"^fl_[0-9A-Z]{26}$"
STEP_ID = r"^st_[0-9A-Z]{26}$"


@router.get(
    "/admin/v1/reasoning/flows/<flow_id>/steps",
    summary="A flow's steps in creation order, a page at a time (sealed fields stay sealed)",
    tags=["reasoning-admin"],
)
def flow_steps(
    flow_id: Annotated[str, Path(pattern=FLOW_ID)],
    limit: Annotated[int, Query(ge=1, le=MAX_STEPS_PAGE)] = DEFAULT_STEPS_PAGE,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> AdminStepPage:
    admin = iam_principal(router.current_event.raw_event)
    return FlowPageReader(services_of(router)).steps(admin, flow_id, limit, cursor)


@router.get(
    "/admin/v1/reasoning/flows/<flow_id>/steps/<step_id>/sealed",
    summary="Open one sealed field of a step (an audited read)",
    tags=["reasoning-admin"],
)
def open_sealed_field(
    flow_id: Annotated[str, Path(pattern=FLOW_ID)],
    step_id: Annotated[str, Path(pattern=STEP_ID)],
    side: Annotated[Side, Query()],
    field: Annotated[str, Query(min_length=1, max_length=256)],
) -> SealedFieldValue:
    admin = iam_principal(router.current_event.raw_event)
    return FlowPageReader(services_of(router)).open_sealed(admin, flow_id, step_id, side, field)
