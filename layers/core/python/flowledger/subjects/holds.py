"""Legal holds: while one stands on a subject, neither an erasure nor retention touches their data.

A hold is the subject's ``#hold`` item: its reason (free text an operator writes, kept in the subjects
table and never in the ledger, which records only its digest), who placed it and when. A hold cannot be
placed on a subject whose erasure has begun: that erasure goes on to its end.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from pydantic import BaseModel

from flowledger.errors import ConditionFailed, Conflict, NotFound
from flowledger.identity import Principal
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.store import items
from flowledger.subjects import subject_id_of
from flowledger.subjects.keys import HOLD_ITEM, subject_key

if TYPE_CHECKING:
    from flowledger.services import Services


class Hold(BaseModel):
    reason: str
    placed_by: str
    placed_at: str


class LegalHolds:
    """Places, lifts and reads subjects' legal holds, each change audited."""

    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.subject_keys.table

    def hold(self, patient_id: str) -> Hold | None:
        """The hold standing on the patient, if any."""
        return self.held(subject_id_of(patient_id))

    def held(self, subject_id: str) -> Hold | None:
        """The hold standing on the subject, if any (a consistent read)."""
        item = self._db.get_item(
            TableName=self._table, Key=subject_key(subject_id, HOLD_ITEM), ConsistentRead=True
        ).get("Item")
        return Hold.model_validate(items.from_item(item)) if item else None

    def place(self, admin: Principal, patient_id: str, reason: str) -> Hold:
        """Place (or replace) the patient's hold (``admin.subject.hold_placed``); 409 once an erasure has begun."""
        subject_id = subject_id_of(patient_id)
        hold = Hold(reason=reason, placed_by=admin.actor, placed_at=timestamp(self._s.clock()))
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="admin.subject.hold_placed",
                    actor=admin.actor,
                    subject=f"subject:{subject_id}",
                    payload={"reason_sha256": hashlib.sha256(reason.encode()).hexdigest()},
                ),
                [
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": {**subject_key(subject_id, HOLD_ITEM), **items.to_item(hold.model_dump())},
                        }
                    },
                    self._s.subject_keys.fence(subject_id),
                ],
            )
        except ConditionFailed:
            raise Conflict("this subject's erasure has begun: it goes on to its end, and no hold can stop it") from None
        return hold

    def lift(self, admin: Principal, patient_id: str) -> Hold:
        """Lift the patient's hold (``admin.subject.hold_lifted``) and answer it; 404 when none stands."""
        subject_id = subject_id_of(patient_id)
        lifted = self.hold(patient_id)
        if lifted is None:
            raise NotFound("no legal hold stands on this subject")
        try:
            self._s.ledger.append(
                AuditEntry(action="admin.subject.hold_lifted", actor=admin.actor, subject=f"subject:{subject_id}"),
                [
                    {
                        "Delete": {
                            "TableName": self._table,
                            "Key": subject_key(subject_id, HOLD_ITEM),
                            "ConditionExpression": "attribute_exists(sk)",
                        }
                    }
                ],
            )
        except ConditionFailed:
            raise NotFound("no legal hold stands on this subject") from None
        return lifted
