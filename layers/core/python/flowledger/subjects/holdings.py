"""What Flowledger holds about a subject, by data class and since when: the answer to "what do you hold about me"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from flowledger.store.paging import query_items
from flowledger.subjects import BACKUP_WINDOW_DAYS, subject_id_of
from flowledger.subjects.erasure import ErasureView, SubjectErasure
from flowledger.subjects.holds import Hold, LegalHolds
from flowledger.subjects.keys import KEY_ITEM, subject_key

if TYPE_CHECKING:
    from flowledger.services import Services


class HeldClass(BaseModel):
    data_class: str
    items: int
    since: str | None  # the oldest item's time


class SubjectView(BaseModel):
    patient_id: str
    subject_id: str
    state: Literal["none", "held", "erasing", "erased"]
    pseudonym: str | None  # how the ledger names the patient (patient:<pseudonym>), while their key lives
    key_created_at: str | None
    classes: list[HeldClass]
    hold: Hold | None
    erasure: ErasureView | None
    backup_window_days: int = BACKUP_WINDOW_DAYS


def subject_view(services: Services, patient_id: str) -> SubjectView:
    """The patient's subject: what is held of them, in which classes and since when, any hold and erasure."""
    db, table = services.aws.dynamodb, services.aws.table_name
    subject_id = subject_id_of(patient_id)
    key = db.get_item(
        TableName=services.subject_keys.table, Key=subject_key(subject_id, KEY_ITEM), ConsistentRead=True
    ).get("Item")
    classes = [
        _flows(services, patient_id),
        _indexed(services, "conversations", "runs", "session_subject", subject_id),
        _indexed(services, "uploads", "documents", "subject_id", subject_id),
    ]
    consent = db.get_item(TableName=table("consents"), Key={"patient_id": {"S": patient_id}}, ConsistentRead=True)
    if "Item" in consent:
        classes.append(HeldClass(data_class="consents", items=1, since=consent["Item"]["changed_at"]["S"]))
    held = [c for c in classes if c.items]
    erasure = SubjectErasure(services).status(patient_id)
    if erasure is not None:
        state: Literal["none", "held", "erasing", "erased"] = "erased" if erasure.phase == "completed" else "erasing"
    else:
        state = "held" if held or key else "none"
    return SubjectView(
        patient_id=patient_id,
        subject_id=subject_id,
        state=state,
        pseudonym=services.subject_keys.pseudonym(patient_id) if key and erasure is None else None,
        key_created_at=key["created_at"]["S"] if key else None,
        classes=held,
        hold=LegalHolds(services).hold(patient_id),
        erasure=erasure,
    )


def _flows(services: Services, patient_id: str) -> HeldClass:
    request = {
        "TableName": services.aws.table_name("flows"),
        "IndexName": "by_patient",
        "KeyConditionExpression": "patient_id = :p",
        "ExpressionAttributeValues": {":p": {"S": patient_id}},
        "ProjectionExpression": "created_at",
    }
    count, oldest = 0, None
    for item in query_items(services.aws.dynamodb, request):  # oldest first: the index sorts by created_at
        count += 1
        oldest = oldest or item["created_at"]["S"]
    return HeldClass(data_class="flows", items=count, since=oldest)


def _indexed(services: Services, data_class: str, logical: str, attribute: str, subject_id: str) -> HeldClass:
    """The subject's chat sessions (runs) or uploads (documents), from the table's sparse by_subject index."""
    request = {
        "TableName": services.aws.table_name(logical),
        "IndexName": "by_subject",
        "KeyConditionExpression": "#s = :s",
        "ExpressionAttributeNames": {"#s": attribute},
        "ExpressionAttributeValues": {":s": {"S": subject_id}},
        "ProjectionExpression": "created_at",
    }
    count, oldest = 0, None
    for item in query_items(services.aws.dynamodb, request):
        count += 1
        oldest = oldest or item["created_at"]["S"]
    return HeldClass(data_class=data_class, items=count, since=oldest)
