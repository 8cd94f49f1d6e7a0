"""Admin reasoning routes (IAM): the full DAG of one flow, and flows by trace."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.reasoning.models import AdminFlowView, FlowPage
from flowledger.reasoning.service import FlowService

router = Router()


@router.get("/admin/v1/reasoning/flows/<flow_id>", summary="A flow's full DAG", tags=["reasoning-admin"])
def admin_flow(flow_id: Annotated[str, Path(pattern=r"^fl_[0-9A-Z]{26}$")]) -> AdminFlowView:
    admin = iam_principal(router.current_event.raw_event)
    return FlowService(services_of(router)).admin_flow(admin, flow_id)


@router.get("/admin/v1/reasoning/flows", summary="Flows of one trace", tags=["reasoning-admin"])
def flows_by_trace(
    trace_id: Annotated[str, Query(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")],
    limit: Annotated[int, Query(ge=1, le=100)] = 25,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> FlowPage:
    iam_principal(router.current_event.raw_event)
    return FlowService(services_of(router)).flows_by_trace(trace_id, limit, cursor)
