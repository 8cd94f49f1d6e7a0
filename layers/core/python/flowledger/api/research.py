"""Admin routes of the self-improvement loop (IAM): backlog and claim triage."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.params import Path

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.research.backlog import Backlog
from flowledger.research.claims import ClaimTriage
from flowledger.research.models import (
    BacklogRow,
    BacklogView,
    ClaimEntry,
    ClaimMark,
    ClaimQueue,
    ClaimResolution,
    Completion,
    DeeperRequest,
    Pulled,
    PullRequest,
)
from flowledger.research.queue_place import QueuedRequest, queued

router = Router()
RequestId = Annotated[str, Path(pattern=r"^rq_[0-9a-f]{26}$")]
ClaimId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


def _actor() -> str:
    return iam_principal(router.current_event.raw_event).actor


def _json(status: int, body: Any) -> Response[str]:
    return Response(status, content_types.APPLICATION_JSON, body.model_dump_json())


@router.post(
    "/admin/v1/reasoning/research/deeper-request",
    summary="Enqueue deeper research",
    tags=["research"],
    responses={
        201: {"description": "queued", "content": {"application/json": {"model": QueuedRequest}}},
        200: {"description": "already queued with this key", "content": {"application/json": {"model": QueuedRequest}}},
    },
)
def enqueue(body: DeeperRequest) -> Response[str]:
    actor = _actor()
    services = services_of(router)
    row, created = Backlog(services).request_deeper(actor, body)
    return _json(201 if created else 200, queued(services, row))


@router.post("/admin/v1/reasoning/research/backlog/next", summary="Atomic FIFO pull", tags=["research"])
def pull_next(body: PullRequest) -> Pulled:
    return Pulled(request=Backlog(services_of(router)).pull_next(_actor(), body.trigger_type))


@router.post(
    "/admin/v1/reasoning/research/backlog/<request_id>/complete",
    summary="Close a dispatched request",
    tags=["research"],
)
def complete(request_id: RequestId, body: Completion) -> BacklogRow:
    return Backlog(services_of(router)).complete(_actor(), request_id, body)


@router.get("/admin/v1/reasoning/research/backlog", summary="Backlog observability and loop health", tags=["research"])
def backlog_view() -> BacklogView:
    return Backlog(services_of(router)).read_view(_actor())


@router.post(
    "/admin/v1/reasoning/claims-pending-review",
    summary="Mark a claim for human triage",
    tags=["research"],
    responses={
        201: {"description": "marked", "content": {"application/json": {"model": ClaimEntry}}},
        200: {"description": "already marked", "content": {"application/json": {"model": ClaimEntry}}},
    },
)
def mark_claim(body: ClaimMark) -> Response[str]:
    entry, created = ClaimTriage(services_of(router)).mark(_actor(), body)
    return _json(201 if created else 200, entry)


@router.get("/admin/v1/reasoning/claims-pending-review", summary="Claims pending review", tags=["research"])
def claims_queue() -> ClaimQueue:
    return ClaimTriage(services_of(router)).queue(_actor())


@router.patch(
    "/admin/v1/reasoning/claims-pending-review/<claim_id>", summary="Resolve or dismiss a claim", tags=["research"]
)
def resolve_claim(claim_id: ClaimId, body: ClaimResolution) -> ClaimEntry:
    return ClaimTriage(services_of(router)).resolve(_actor(), claim_id, body)
