"""Claim triage: rejected claims waiting for a curator, resolved or dismissed exactly once."""

from __future__ import annotations

import heapq
import itertools
from datetime import timedelta
from typing import Any

from flowledger.errors import ConditionFailed, Conflict, NotFound
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.research.models import ClaimEntry, ClaimMark, ClaimQueue, ClaimResolution
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.paging import query_items

RECENT_WINDOW = timedelta(hours=24)
RECENT_SHOWN = 10  # the seed's "recently resolved": the last 10 terminal entries of the past 24 hours
TERMINAL = ("resolved", "dismissed")
MAX_LISTED = 200


class ClaimTriage:
    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name("claims_review")

    def mark(self, actor: str, body: ClaimMark) -> tuple[ClaimEntry, bool]:
        """Queue a claim for review; marking it again returns the first entry (False)."""
        entry = ClaimEntry(
            status="pending", created_at=timestamp(self._s.clock()), marked_by=actor, **body.model_dump()
        )
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="reasoning.claims_pending_review.marked",
                    actor=actor,
                    subject=f"claim:{body.claim_id}",
                    payload={"reason": body.reason.value},
                ),
                [
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": items.to_item(entry.model_dump()),
                            "ConditionExpression": "attribute_not_exists(claim_id)",
                        }
                    }
                ],
            )
        except ConditionFailed:
            existing = self.get(body.claim_id)
            if existing is None:  # the condition failed, yet no claim is there: a 409, not an assertion's 500
                raise
            return existing, False
        return entry, True

    def resolve(self, actor: str, claim_id: str, body: ClaimResolution) -> ClaimEntry:
        """Resolve or dismiss a pending claim; 409 when it is already terminal."""
        values: dict[str, Any] = {
            ":status": body.resolution,
            ":now": timestamp(self._s.clock()),
            ":actor": actor,
            ":pending": "pending",
        }
        update = "SET #s = :status, resolved_at = :now, resolved_by = :actor"
        if body.note:
            update += ", note = :note"
            values[":note"] = body.note
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="reasoning.claims_pending_review.resolved",
                    actor=actor,
                    subject=f"claim:{claim_id}",
                    payload={"resolution": body.resolution},
                ),
                [
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": {"claim_id": {"S": claim_id}},
                            "UpdateExpression": update,
                            "ConditionExpression": "#s = :pending",
                            "ExpressionAttributeNames": {"#s": "status"},
                            "ExpressionAttributeValues": items.to_item(values),
                        }
                    }
                ],
            )
        except ConditionFailed:
            existing = self.get(claim_id)
            if existing is None:
                raise NotFound(f"no claim {claim_id} pending review") from None
            raise Conflict(f"claim {claim_id} is already {existing.status}") from None
        resolved = self.get(claim_id)
        assert resolved is not None
        return resolved

    def queue(self, actor: str) -> ClaimQueue:
        """Pending entries and the recent resolutions (``admin...claims_pending_review.listed``).

        Recent resolutions are the last ``RECENT_SHOWN`` terminal entries resolved in the past 24 hours,
        newest first: one bounded query per terminal status on ``by_resolved``, never a read of them all.
        """
        since = timestamp(self._s.clock() - RECENT_WINDOW)
        pending = self._by_status("pending")
        recent = self.recent_resolutions(since)
        self._s.ledger.append(
            AuditEntry(
                action="admin.reasoning.claims_pending_review.listed",
                actor=actor,
                subject="claims:pending_review",
                payload={"pending": len(pending), "recent": len(recent)},
            )
        )
        return ClaimQueue(pending=pending, recent_resolutions=recent)

    def recent_resolutions(self, since: str) -> list[ClaimEntry]:
        """The last ``RECENT_SHOWN`` entries resolved or dismissed at or after ``since``, newest first."""
        latest: list[ClaimEntry] = []
        for status in TERMINAL:
            response = self._db.query(
                TableName=self._table,
                IndexName="by_resolved",
                KeyConditionExpression="#s = :s AND resolved_at >= :since",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":s": {"S": status}, ":since": {"S": since}},
                ScanIndexForward=False,
                Limit=RECENT_SHOWN,
            )
            latest += [ClaimEntry.model_validate(items.from_item(i)) for i in response.get("Items", [])]
        return heapq.nlargest(RECENT_SHOWN, latest, key=lambda e: (e.resolved_at or "", e.claim_id))

    def get(self, claim_id: str) -> ClaimEntry | None:
        item = self._db.get_item(TableName=self._table, Key={"claim_id": {"S": claim_id}}, ConsistentRead=True).get(
            "Item"
        )
        return ClaimEntry.model_validate(items.from_item(item)) if item else None

    def _by_status(self, status: str) -> list[ClaimEntry]:
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_status",
            "KeyConditionExpression": "#s = :s",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {":s": {"S": status}},
        }
        return [
            ClaimEntry.model_validate(items.from_item(i))
            for i in itertools.islice(query_items(self._db, request), MAX_LISTED)
        ]
