"""Admin routes of the pathway library (IAM): match, hit, stats, compare, extract, one pathway."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.pathways.library import PathwayLibrary
from flowledger.pathways.models import (
    CompareRequest,
    Comparison,
    Extraction,
    ExtractRequest,
    MatchResult,
    PathwayView,
    Stats,
)
from flowledger.reasoning.service import FlowService

router = Router()
PathwayId = Annotated[str, Path(pattern=r"^pw_[0-9a-f]{26}$")]


def _actor() -> str:
    return iam_principal(router.current_event.raw_event).actor


@router.get("/admin/v1/reasoning/pathways/match", summary="Rank pathways for a trigger (read-only)", tags=["pathways"])
def match(
    trigger_type: Annotated[str, Query(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")],
    trigger_ref: Annotated[str, Query(min_length=1, max_length=256)],
    limit: Annotated[int, Query(ge=1, le=50)] = 10,
) -> MatchResult:
    return PathwayLibrary(services_of(router)).match(_actor(), trigger_type, trigger_ref, limit)


@router.get("/admin/v1/reasoning/pathways/stats", summary="Library totals and maturity", tags=["pathways"])
def stats() -> Stats:
    return PathwayLibrary(services_of(router)).read_stats(_actor())


@router.post("/admin/v1/reasoning/pathways/compare", summary="Compare two pathways' radars", tags=["pathways"])
def compare(body: CompareRequest) -> Comparison:
    first, second = body.pathway_ids
    return PathwayLibrary(services_of(router)).compare(_actor(), first, second)


@router.post(
    "/admin/v1/reasoning/pathways/extract",
    summary="Extract a closed flow's pathway (idempotent)",
    tags=["pathways"],
    responses={
        201: {"description": "created", "content": {"application/json": {"model": Extraction}}},
        200: {
            "description": "already extracted, or not qualified",
            "content": {"application/json": {"model": Extraction}},
        },
    },
)
def extract(body: ExtractRequest) -> Response[str]:
    actor = _actor()
    services = services_of(router)
    flow, steps = FlowService(services).flow_with_steps(body.flow_id)
    result: Extraction = PathwayExtractor(services).extract(flow, steps, actor)
    return _json(201 if result.created else 200, result)


@router.post("/admin/v1/reasoning/pathways/<pathway_id>/hit", summary="Record a reuse", tags=["pathways"])
def hit(pathway_id: PathwayId) -> PathwayView:
    return PathwayLibrary(services_of(router)).hit(_actor(), pathway_id)


@router.get("/admin/v1/reasoning/pathways/<pathway_id>", summary="One pathway with its radar", tags=["pathways"])
def one(pathway_id: PathwayId) -> PathwayView:
    _actor()
    return PathwayLibrary(services_of(router)).view(pathway_id)


def _json(status: int, body: Any) -> Response[str]:
    return Response(status, content_types.APPLICATION_JSON, body.model_dump_json())
