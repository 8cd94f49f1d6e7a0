"""A pending request's place in the research backlog's queue: the number an operator compares with the
backlog's pending count, so it can never be more than that count.

A row's ticket is its enqueue order over the backlog's whole life (``tickets.py``), not its place: with
five requests already served, the next one holds ticket 6 while it is the only one pending. Its place
is the number of pending rows still holding a ticket that is not taken yet, up to and including its own;
rows parked for another strategy hold none (they are served after the queue runs dry).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from flowledger.research.models import BacklogRow, BacklogStatus
from flowledger.research.tickets import TicketQueue
from flowledger.services import Services


class QueuedRequest(BacklogRow):
    """A backlog row as the deeper-request route answers it: with its place in the queue."""

    place_in_queue: int | None = Field(
        None, description="1 for the next request served; null once it is not waiting in the queue"
    )


def place_in_queue(services: Services, row: BacklogRow) -> int | None:
    """Where ``row`` waits (1: served next), or None when it is not waiting for a ticket pull."""
    if row.status is not BacklogStatus.PENDING or row.ticket is None:
        return None
    _, taken = TicketQueue(services.aws.dynamodb, services.aws.table_name("backlog_tickets")).counter()
    if row.ticket <= taken:
        return None  # its ticket was taken: a consumer holds it (or the stale sweep will requeue it)
    request: dict[str, Any] = {
        "TableName": services.aws.table_name("backlog"),
        "IndexName": "by_status",
        "KeyConditionExpression": "#s = :pending",
        "FilterExpression": "ticket > :taken AND ticket <= :mine",
        "ExpressionAttributeNames": {"#s": "status"},
        "ExpressionAttributeValues": {
            ":pending": {"S": BacklogStatus.PENDING.value},
            ":taken": {"N": str(taken)},
            ":mine": {"N": str(row.ticket)},
        },
        "Select": "COUNT",
    }
    place = 0
    while True:
        response = services.aws.dynamodb.query(**request)
        place += int(response.get("Count", 0))
        if "LastEvaluatedKey" not in response:
            return max(place, 1)  # the index may lag the row just written: it is there, so at least 1
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def queued(services: Services, row: BacklogRow) -> QueuedRequest:
    """``row`` with its place in the queue."""
    return QueuedRequest(**row.model_dump(), place_in_queue=place_in_queue(services, row))
