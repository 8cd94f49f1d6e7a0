"""Admin reasoning routes (IAM): one flow's overview (with its first page of steps when asked), and the flows list
(or a trace's flows)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.errors import InvalidInput
from flowledger.reasoning.listing import FlowFilters, FlowListing, window_bound
from flowledger.reasoning.models import FlowPage
from flowledger.reasoning.service import FlowService
from flowledger.reasoning.steps_page import MAX_STEPS_PAGE, AdminFlowOverview, FlowPageReader

router = Router()


@router.get(
    "/admin/v1/reasoning/flows/<flow_id>",
    summary="A flow and its radar, and with steps=N its first page of steps (the rest: .../steps)",
    tags=["reasoning-admin"],
)
def admin_flow(
    flow_id: Annotated[str, Path(pattern=r"^fl_[0-9A-Z]{26}$")],
    steps: Annotated[int, Query(ge=0, le=MAX_STEPS_PAGE)] = 0,
) -> AdminFlowOverview:
    admin = iam_principal(router.current_event.raw_event)
    return FlowPageReader(services_of(router)).overview(admin, flow_id, steps)


_NAME = r"^[a-z][a-z0-9_.-]{0,63}$"
_OUTCOMES = r"^(claim_created|recommendation_delivered|no_action|insufficient_evidence|error|timeout)$"
_WHEN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9:.]+(Z|[+-][0-9]{2}:?[0-9]{2}))?$"


@router.get(
    "/admin/v1/reasoning/flows",
    summary="Flows, newest first, filtered; or the flows of one trace",
    description=(
        "Without `trace_id`: every flow, newest first, narrowed by any of `state`, `trigger_type`, `outcome` "
        "(type), `agent` (an agent that recorded a step), `patient_id` and a `created_at` window (`from`, `to`: "
        "a date, a `to` date taking in its whole day, or an ISO date-time with a zone). Read from indexes; a "
        "filtered page can be short, even empty, and still carry `next_cursor`: the list goes on after it. "
        "With `trace_id` (no other filter): that trace's flows, oldest first."
    ),
    tags=["reasoning-admin"],
)
def list_flows(
    trace_id: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")] = None,
    state: Annotated[str | None, Query(pattern=r"^(active|completed|aborted)$")] = None,
    trigger_type: Annotated[str | None, Query(pattern=_NAME)] = None,
    outcome: Annotated[str | None, Query(pattern=_OUTCOMES)] = None,
    agent: Annotated[str | None, Query(pattern=_NAME)] = None,
    patient_id: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")] = None,
    created_from: Annotated[str | None, Query(alias="from", pattern=_WHEN)] = None,
    created_to: Annotated[str | None, Query(alias="to", pattern=_WHEN)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 25,
    cursor: Annotated[str | None, Query(max_length=600)] = None,
) -> FlowPage:
    iam_principal(router.current_event.raw_event)
    services = services_of(router)
    filters = FlowFilters(
        state=state,
        trigger_type=trigger_type,
        outcome=outcome,
        agent=agent,
        patient_id=patient_id,
        created_from=window_bound(created_from, end=False),
        created_to=window_bound(created_to, end=True),
    )
    if trace_id:
        if filters != FlowFilters():
            raise InvalidInput("trace_id lists one trace's flows; it takes no other filter")
        return FlowService(services).flows_by_trace(trace_id, limit, cursor)
    return FlowListing(services).list_flows(filters, limit, cursor)
