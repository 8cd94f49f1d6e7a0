"""Admin route listing the pathway library's pathways (IAM): filtered, a page at a time, with their radars."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.pathways.listing import PathwayFilters, PathwayListing, PathwayPage, PathwayStatus

router = Router()


@router.get(
    "/admin/v1/pathways",
    summary="The library's pathways with their radars, filtered, a page at a time",
    description=(
        "Narrowed by any of `trigger_type` (one family, most recently changed first), `status` (`active` or "
        "`demoted`) and `ref_prefix` (the start of the trigger ref). A filtered page can be short, even empty, "
        "and still carry `next_cursor`: the list goes on after it."
    ),
    tags=["pathways"],
)
def list_pathways(
    trigger_type: Annotated[str | None, Query(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")] = None,
    status: Annotated[PathwayStatus | None, Query()] = None,
    ref_prefix: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=600)] = None,
) -> PathwayPage:
    iam_principal(router.current_event.raw_event)
    filters = PathwayFilters(trigger_type=trigger_type, status=status, ref_prefix=ref_prefix)
    return PathwayListing(services_of(router)).page(filters, limit, cursor)
