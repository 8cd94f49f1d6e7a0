"""Retention: each class of a patient's data is erased a set number of days after it was made.

The daily ``subject_retention`` job erases, through the same steps as a subject's erasure (fence, delete,
tombstone, audit), the patients' flows older than ``FLOWLEDGER_RETENTION_FLOWS_DAYS``, their chat sessions
begun before ``FLOWLEDGER_RETENTION_CONVERSATIONS_DAYS`` and their uploads older than
``FLOWLEDGER_RETENTION_UPLOADS_DAYS``. A class left unset is kept (the default: retention is off). A subject
under a legal hold keeps everything. Each item erased is audited on its own (``admin.subject.flow_erased``
for a flow, as an erasure records it), and the run as a whole (``subjects.retention.applied``, its counts);
an item that fails is counted, left for the next run, and raises the ``subjects.retention.failed`` metric,
which an alarm watches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.store.paging import query_items, scan_items
from flowledger.subjects import subject_id_of
from flowledger.subjects.erasure import SubjectErasure
from flowledger.subjects.holds import LegalHolds
from flowledger.subjects.keys import KEY_ITEM
from flowledger.workspaces.erasure import erase_document

if TYPE_CHECKING:
    from flowledger.services import Services

logger = logging.getLogger(__name__)

RETENTION_JOB = "subject_retention"
FAILED_METRIC = "subjects.retention.failed"
ACTOR = Principal(kind="iam", id=f"system:{RETENTION_JOB}")
# The flows list's first year (reasoning/listing.py, by_listing): retention walks the years from it.
FIRST_YEAR = 2024


@dataclass(frozen=True)
class RetentionPolicy:
    """Days each class is kept; None keeps it until its subject is erased."""

    flows_days: int | None = None
    conversations_days: int | None = None
    uploads_days: int | None = None

    @classmethod
    def of(cls, services: Services) -> RetentionPolicy:
        settings = services.settings
        return cls(
            settings.retention_flows_days, settings.retention_conversations_days, settings.retention_uploads_days
        )

    @property
    def off(self) -> bool:
        return self.flows_days is None and self.conversations_days is None and self.uploads_days is None


class Retention:
    """One run of the retention policy over every subject."""

    def __init__(self, services: Services, policy: RetentionPolicy) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._policy = policy
        self._erasure = SubjectErasure(services)
        self._held: dict[str, bool] = {}
        self.run_id = new_id("rt_")
        self.counts = {"flows": 0, "sessions": 0, "documents": 0, "held": 0, "failed": 0}

    def run(self) -> dict[str, int]:
        """Erase what the policy says is due now; counts of what was erased, skipped for a hold, and failed."""
        now = self._s.clock()
        if self._policy.flows_days is not None:
            for flow_id, patient_id in self._patient_flows_before(_cutoff(now, self._policy.flows_days)):
                self._one("flows", subject_id_of(patient_id), lambda s, f=flow_id: self._flow(s, f))
        if self._policy.conversations_days is not None or self._policy.uploads_days is not None:
            for subject_id in self._subjects():
                self._subject(subject_id, now)
        self._s.ledger.append(
            AuditEntry(
                action="subjects.retention.applied",
                actor=ACTOR.actor,
                subject=f"job:{RETENTION_JOB}",
                refs={"retention": self.run_id},
                payload={
                    **self.counts,
                    "flows_days": self._policy.flows_days,
                    "conversations_days": self._policy.conversations_days,
                    "uploads_days": self._policy.uploads_days,
                },
            )
        )
        self._s.metrics.emit(FAILED_METRIC, self.counts["failed"], "Count", {"service": "jobs"})
        return dict(self.counts)

    def _subject(self, subject_id: str, now: datetime) -> None:
        policy = self._policy
        if policy.conversations_days is not None:
            for session_id in self._before(
                "runs", "session_subject", subject_id, _cutoff(now, policy.conversations_days)
            ):
                self._one("sessions", subject_id, lambda s, i=session_id: self._session(s, i))
        if policy.uploads_days is not None:
            for document_id in self._before("documents", "subject_id", subject_id, _cutoff(now, policy.uploads_days)):
                self._one("documents", subject_id, lambda s, d=document_id: erase_document(self._s, d).items > 0)

    def _one(self, kind: str, subject_id: str, erase: Any) -> None:
        if self._on_hold(subject_id):
            self.counts["held"] += 1
            return
        try:
            if erase(subject_id):
                self.counts[kind] += 1
        except Exception:  # one item's failure must not stop the rest: counted, alarmed, retried next run
            logger.exception("retention could not erase an item", extra={"kind": kind})
            self.counts["failed"] += 1

    def _flow(self, subject_id: str, flow_id: str) -> bool:
        return self._erasure.erase_flow(ACTOR, subject_id, flow_id, {"retention": self.run_id}, tally=False) > 0

    def _session(self, subject_id: str, session_id: str) -> bool:
        return (
            self._erasure.erase_session(ACTOR, subject_id, session_id, {"retention": self.run_id}, tally=False)[0] > 0
        )

    def _on_hold(self, subject_id: str) -> bool:
        if subject_id not in self._held:
            self._held[subject_id] = LegalHolds(self._s).held(subject_id) is not None
        return self._held[subject_id]

    def _patient_flows_before(self, cutoff: str) -> Iterator[tuple[str, str]]:
        """Flows naming a patient made before ``cutoff``, year partition by year partition (by_listing)."""
        for year in range(FIRST_YEAR, int(cutoff[:4]) + 1):
            request = {
                "TableName": self._s.aws.table_name("flows"),
                "IndexName": "by_listing",
                "KeyConditionExpression": "listing_year = :y AND created_at < :c",
                "FilterExpression": "attribute_exists(patient_id)",
                "ExpressionAttributeValues": {":y": {"S": str(year)}, ":c": {"S": cutoff}},
                "ProjectionExpression": "flow_id, patient_id",
            }
            for item in query_items(self._db, request):
                yield item["flow_id"]["S"], item["patient_id"]["S"]

    def _subjects(self) -> Iterator[str]:
        """Every subject with a live key: the subjects table read once a day (one small item per patient)."""
        request = {
            "TableName": self._s.subject_keys.table,
            "FilterExpression": "sk = :k",
            "ExpressionAttributeValues": {":k": {"S": KEY_ITEM}},
            "ProjectionExpression": "subject_id",
        }
        for item in scan_items(self._db, request):
            yield item["subject_id"]["S"]

    def _before(self, logical: str, attribute: str, subject_id: str, cutoff: str) -> list[str]:
        """Ids of the subject's sessions (runs) or documents made before ``cutoff``, from the table's by_subject."""
        key = "session_id" if logical == "runs" else "document_id"
        request: dict[str, Any] = {
            "TableName": self._s.aws.table_name(logical),
            "IndexName": "by_subject",
            "KeyConditionExpression": "#s = :s AND created_at < :c",
            "ExpressionAttributeNames": {"#s": attribute},
            "ExpressionAttributeValues": {":s": {"S": subject_id}, ":c": {"S": cutoff}},
            "ProjectionExpression": key,
        }
        return [item[key]["S"] for item in query_items(self._db, request)]


def _cutoff(now: datetime, days: int) -> str:
    return timestamp(now - timedelta(days=days))


def retention_job(services: Services) -> dict[str, Any]:
    """The daily job: erase each class of the patients' data past its retention (off unless configured)."""
    policy = RetentionPolicy.of(services)
    if policy.off:
        return {"retention": "off"}
    return Retention(services, policy).run()
