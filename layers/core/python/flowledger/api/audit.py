"""Admin reads of the audit ledger: events (paginated) and the latest checkpoint."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel

from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal
from flowledger.errors import InvalidInput, NotFound
from flowledger.ledger.audit import checkpoints_of
from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.events import AuditEvent, shard_for, timestamp

router = Router()


class EventsPage(BaseModel):
    events: list[AuditEvent]
    next_cursor: str | None


def _encode_cursor(chain_index: int, after_seq: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([chain_index, after_seq]).encode()).decode()


def _decode_cursor(cursor: str | None, chains: int) -> tuple[int, int]:
    if cursor is None:
        return 0, 0
    try:
        chain_index, after_seq = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError, binascii.Error):
        raise InvalidInput("cursor is not one this API returned") from None
    if not (
        isinstance(chain_index, int) and isinstance(after_seq, int) and 0 <= chain_index < chains and after_seq >= 0
    ):
        raise InvalidInput("cursor is not one this API returned")
    return chain_index, after_seq


@router.get("/admin/v1/audit/events", summary="Audit events, filtered and paginated", tags=["audit"])
def list_events(
    subject: Annotated[str | None, Query(max_length=128, description="primary subject, e.g. flow:ID")] = None,
    action: Annotated[str | None, Query(max_length=96)] = None,
    since: Annotated[datetime | None, Query(description="ISO 8601; events at or after it")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> EventsPage:
    iam_principal(router.current_event.raw_event)
    ledger = services_of(router).ledger
    # A subject lives on one chain; without one, every chain is read in order.
    chains = [shard_for(subject, ledger.shards)] if subject else ledger.chain_ids()
    filters = {name: value for name, value in (("subject", subject), ("action", action)) if value}
    since_text = timestamp(since) if since else None
    chain_index, after_seq = _decode_cursor(cursor, len(chains))
    events: list[AuditEvent] = []
    while chain_index < len(chains):
        page, resume_after = ledger.query_page(chains[chain_index], after_seq, limit - len(events), filters, since_text)
        events += page
        if resume_after is not None:
            return EventsPage(events=events, next_cursor=_encode_cursor(chain_index, resume_after))
        chain_index, after_seq = chain_index + 1, 0
    return EventsPage(events=events, next_cursor=None)


@router.get("/admin/v1/audit/checkpoints/latest", summary="The latest Merkle checkpoint", tags=["audit"])
def latest_checkpoint() -> Checkpoint:
    iam_principal(router.current_event.raw_event)
    checkpoint = checkpoints_of(services_of(router)).latest()
    if checkpoint is None:
        raise NotFound("no checkpoint has been taken yet")
    return checkpoint
