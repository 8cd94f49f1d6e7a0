"""The admin flow page's reads: a flow's overview, its steps a page at a time, and one sealed field.

A flow may hold up to :data:`~flowledger.reasoning.models.MAX_STEPS_PER_FLOW` steps, so nothing here reads
them all into one answer:

- the overview is the flow and its radar (``admin.reasoning.flow.read``), and with ``steps`` also the first
  page of its steps, as the steps route answers it (the flow page's one first read: a round trip, a flow
  read and an audit write fewer than reading the two apart; both events are written, in one transaction);
- the steps come in creation order, a page at a time, from the steps table's ``by_created`` index
  (``flow_id``, ``created_at``); a page ends at ``limit`` steps or at :data:`MAX_PAGE_BYTES` of step
  data, whichever comes first, and is audited (``admin.reasoning.flow.steps_read``, counts only);
- a sealed PII field is never opened in a page: it reads as :data:`SEALED_PLACEHOLDER`, and opening it
  is a read of its own, audited with its flow, step, side and field, never its value
  (``admin.reasoning.step.sealed_field_opened``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from flowledger.errors import InvalidInput, NotFound, SubjectErased
from flowledger.identity import Principal
from flowledger.ledger.events import AuditEntry
from flowledger.reasoning.dimensions import Dimensions, StepSignal, compute_dimensions
from flowledger.reasoning.models import AdminStepView, FlowView, StepView
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.decoding import DECODE_ERRORS, decoded, key_of, undecodable
from flowledger.store.envelope import SEALED_MARKER, FieldRef, is_sealed
from flowledger.store.paging import query_items
from flowledger.subjects import ERASED_AT

STEPS_BY_CREATED = "by_created"
DEFAULT_STEPS_PAGE = 500
MAX_STEPS_PAGE = 1000
# Under Lambda's 6 MB response with room for JSON escaping: a page of large steps ends early, with a cursor.
MAX_PAGE_BYTES = 4 * 1024 * 1024
# What a sealed field reads as in a page. The key is the one reserved for sealed fields (a step body
# holding it is refused), so no recorded value can be mistaken for it.
SEALED_PLACEHOLDER: dict[str, bool] = {SEALED_MARKER: True}
Side = Literal["inputs", "outputs"]
_TOKEN = re.compile(r"^[A-Za-z0-9_.:/@+=-]{1,128}$")  # ledger.events.Token: what a payload value may be
_STEP_ID = re.compile(r"^st_[0-9A-Z]{26}$")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
# A step without its payloads (names, as some are DynamoDB reserved words).
_LEAN_NAMES = {
    f"#{n}": name
    for n, name in enumerate(
        (
            "flow_id",
            "step_id",
            "step_kind",
            "agent",
            "summary_text",
            "latency_ms",
            "confidence",
            "parent_step_ids",
            "created_at",
        )
    )
}
# What the radar of an active flow needs of its steps (names, as some are DynamoDB reserved words).
_SIGNAL_NAMES = {"#k": "step_kind", "#a": "agent", "#c": "confidence"}


class AdminStepPage(BaseModel):
    """Steps of one flow in creation order, sealed fields shown as ``{"__sealed__": true}``."""

    flow_id: str
    steps: list[AdminStepView]
    next_cursor: str | None = Field(description="hand back as cursor for the next page; null after the last")


class AdminFlowOverview(BaseModel):
    """A flow and its radar, and when asked for, the first page of its steps (the rest: ``.../steps``)."""

    flow: FlowView
    dimensions: Dimensions
    first_steps: AdminStepPage | None = Field(
        default=None,
        description="with `steps=N`: the first page of up to N steps, as `.../steps?limit=N` answers it; null without",
    )


class SealedFieldValue(BaseModel):
    """One sealed field of one step, opened."""

    flow_id: str
    step_id: str
    side: Side
    field: str
    value: Any


class FlowPageReader:
    """The admin flow page's reads over one ``Services``; every read is audited with the IAM principal."""

    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._flows = services.aws.table_name("flows")
        self._steps = services.aws.table_name("steps")

    def overview(self, admin: Principal, flow_id: str, steps: int = 0) -> AdminFlowOverview:
        """The flow and its radar (``admin.reasoning.flow.read``); with ``steps``, its first page of that many.

        A closed flow's radar is its snapshot; an active flow's is computed from its steps' kinds,
        agents and confidences (one lean query, never their inputs or outputs). The first page is the
        steps route's first page (audited as that route audits it, in the same transaction as the read).
        """
        if not 0 <= steps <= MAX_STEPS_PAGE:
            raise InvalidInput(f"steps must be between 0 and {MAX_STEPS_PAGE}")
        flow = self._flow(flow_id)
        dimensions = flow.dimensions_snapshot or self._active_dimensions(flow)
        entries = [
            AuditEntry(
                action="admin.reasoning.flow.read",
                actor=admin.actor,
                subject=f"flow:{flow_id}",
                payload={"steps": flow.step_count},
            )
        ]
        first = None
        if steps:
            first = self._read_page(flow_id, steps, None)
            entries.append(_steps_read(admin, first, first_page=True))
        self._s.ledger.append_all(entries)
        return AdminFlowOverview(flow=flow, dimensions=dimensions, first_steps=first)

    def steps(self, admin: Principal, flow_id: str, limit: int, cursor: str | None) -> AdminStepPage:
        """Up to ``limit`` steps after ``cursor`` in creation order (``admin.reasoning.flow.steps_read``).

        The flow must exist (404); a cursor this route did not issue for this flow is a 422.
        """
        if not 1 <= limit <= MAX_STEPS_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_STEPS_PAGE}")
        start = _decode_step_cursor(cursor, flow_id) if cursor else None
        self._flow(flow_id)
        page = self._read_page(flow_id, limit, start)
        self._s.ledger.append(_steps_read(admin, page, first_page=start is None))
        return page

    def open_sealed(self, admin: Principal, flow_id: str, step_id: str, side: Side, field: str) -> SealedFieldValue:
        """One sealed field opened (``admin.reasoning.step.sealed_field_opened``, naming it, never its value).

        404 when the step or a sealed field of that name is not there; 409 when the stored envelope does
        not open at its place (moved or altered); 410 when the flow (or its patient's key) was erased.
        """
        response = self._db.get_item(
            TableName=self._steps,
            Key={"flow_id": {"S": flow_id}, "step_id": {"S": step_id}},
            ConsistentRead=True,
        )
        if "Item" not in response:
            self._flow(flow_id)  # 410 for a step of an erased flow (its steps are gone), 404 for no flow
            raise NotFound(f"no step {step_id} in flow {flow_id}")
        record = decoded(response["Item"], _step_record, f"step {step_id} of flow {flow_id}", step_id)
        stored = record.get(side, {}).get(field)
        if not is_sealed(stored):
            raise NotFound(f"step {step_id} has no sealed {side} field named {field!r}")
        try:
            value = self._s.sealer.open(stored, FieldRef(flow_id, step_id, side, field))
        except DECODE_ERRORS as exc:
            # A mangled, moved or forged envelope (SealedFieldError) is the item's fault, not the request's.
            raise undecodable(f"sealed {side} of step {step_id}", step_id, exc) from None
        self._s.ledger.append(
            AuditEntry(
                action="admin.reasoning.step.sealed_field_opened",
                actor=admin.actor,
                subject=f"flow:{flow_id}",
                refs={"step_id": step_id},
                payload={"side": side, "field": audited_name(field)},
            )
        )
        return SealedFieldValue(flow_id=flow_id, step_id=step_id, side=side, field=field, value=value)

    # ---- helpers -----------------------------------------------------------------------------

    def _flow(self, flow_id: str) -> FlowView:
        response = self._db.get_item(TableName=self._flows, Key={"flow_id": {"S": flow_id}}, ConsistentRead=True)
        if "Item" not in response:
            raise NotFound(f"no flow {flow_id}")
        if ERASED_AT in response["Item"]:
            raise SubjectErased(f"flow {flow_id} was erased with its patient's data")
        return decoded(response["Item"], FlowView.model_validate, f"flow {flow_id}", flow_id)

    def _read_page(self, flow_id: str, limit: int, start: dict[str, Any] | None) -> AdminStepPage:
        steps, last_key = self._page(flow_id, limit, start)
        return AdminStepPage(flow_id=flow_id, steps=steps, next_cursor=encode_cursor(last_key) if last_key else None)

    def _page(
        self, flow_id: str, limit: int, start: dict[str, Any] | None
    ) -> tuple[list[AdminStepView], dict[str, Any] | None]:
        """The page's steps and the key to resume after (None when the flow has no more)."""
        request: dict[str, Any] = {
            "TableName": self._steps,
            "IndexName": STEPS_BY_CREATED,
            "KeyConditionExpression": "flow_id = :f",
            "ExpressionAttributeValues": {":f": {"S": flow_id}},
        }
        steps: list[AdminStepView] = []
        size = 0
        last: dict[str, Any] | None = None
        while True:
            page = {**request, "Limit": limit - len(steps)}
            if start:
                page["ExclusiveStartKey"] = start
            response = self._db.query(**page)
            for item in response.get("Items", []):
                step_id = key_of(item, "step_id")
                step = decoded(item, _step_view, f"step {step_id} of flow {flow_id}", step_id)
                # The first step always goes in, so a page makes progress whatever a step weighs.
                weight = len(step.model_dump_json())
                if steps and size + weight > MAX_PAGE_BYTES:
                    return steps, last
                steps.append(step)
                size += weight
                last = items.from_item({name: item[name] for name in ("flow_id", "step_id", "created_at")})
            start = response.get("LastEvaluatedKey")
            if not start:
                return steps, None
            if len(steps) == limit:
                return steps, last

    def _active_dimensions(self, flow: FlowView) -> Dimensions:
        """The radar computed now, as the close computes it, for a flow with no snapshot yet."""
        request: dict[str, Any] = {
            "TableName": self._steps,
            "KeyConditionExpression": "flow_id = :f",
            "ExpressionAttributeValues": {":f": {"S": flow.flow_id}},
            "ProjectionExpression": ", ".join(_SIGNAL_NAMES),
            "ExpressionAttributeNames": _SIGNAL_NAMES,
        }
        signals = []
        for item in query_items(self._db, request):
            values = items.from_item(item)
            signals.append(
                StepSignal(step_kind=values["step_kind"], agent=values["agent"], confidence=values.get("confidence"))
            )
        return compute_dimensions(
            signals,
            flow.outcome.confidence if flow.outcome else None,
            aborted=flow.flow_state == "aborted",
            summaries_safe=bool(flow.patient_safe_summary),
        )


def steps_without_payloads(services: Services, flow_id: str) -> list[dict[str, Any]]:
    """A flow's steps in creation order without their inputs and outputs (what a close reads).

    A close guards the summaries and computes the radar from kinds, agents and confidences; leaving the
    payloads (up to 64 KB a step) unread keeps a 20,000-step close to a few MB. A step that cannot be read
    as a step raises ``UndecodableItem`` naming it.
    """
    request: dict[str, Any] = {
        "TableName": services.aws.table_name("steps"),
        "KeyConditionExpression": "flow_id = :f",
        "ExpressionAttributeValues": {":f": {"S": flow_id}},
        "ProjectionExpression": ", ".join(_LEAN_NAMES),
        "ExpressionAttributeNames": _LEAN_NAMES,
        "ConsistentRead": True,
    }
    records = [
        decoded(item, _lean_step, f"step {key_of(item, 'step_id')} of flow {flow_id}", key_of(item, "step_id"))
        for item in query_items(services.aws.dynamodb, request)
    ]
    return sorted(records, key=lambda r: (r["created_at"], r["step_id"]))


def _lean_step(values: dict[str, Any]) -> dict[str, Any]:
    StepView.model_validate(values)
    return values


def _steps_read(admin: Principal, page: AdminStepPage, *, first_page: bool) -> AuditEntry:
    """The audit entry of a page of steps read: how many, how many sealed fields in them (never a value)."""
    sealed = sum(
        v == SEALED_PLACEHOLDER for step in page.steps for side in (step.inputs, step.outputs) for v in side.values()
    )
    return AuditEntry(
        action="admin.reasoning.flow.steps_read",
        actor=admin.actor,
        subject=f"flow:{page.flow_id}",
        payload={"steps": len(page.steps), "sealed_fields": sealed, "first_page": first_page},
    )


def audited_name(field: str) -> str:
    """A field's name as the audit event records it: itself when it is a token, else its digest.

    Event payloads hold tokens only (no free text); a field named with spaces or other characters is
    still told apart from every other field by the digest of its name.
    """
    if _TOKEN.match(field):
        return field
    return "sha256:" + hashlib.sha256(field.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _step_record(values: dict[str, Any]) -> dict[str, Any]:
    """A stored step as read, once it holds what every reader of steps relies on."""
    AdminStepView.model_validate(values)
    return values


def _step_view(values: dict[str, Any]) -> AdminStepView:
    """A stored step with each sealed field replaced by the placeholder."""
    for side in ("inputs", "outputs"):
        fields = values.get(side)
        if isinstance(fields, dict):
            values[side] = {k: SEALED_PLACEHOLDER if is_sealed(v) else v for k, v in fields.items()}
    return AdminStepView.model_validate(values)


def _decode_step_cursor(cursor: str, flow_id: str) -> dict[str, Any]:
    """The index key a cursor resumes after; 422 unless it is one this route issued for this flow."""
    key = decode_cursor(cursor)
    if (
        not isinstance(key, dict)
        or set(key) != {"flow_id", "step_id", "created_at"}
        or key["flow_id"] != flow_id
        or not isinstance(key["step_id"], str)
        or not _STEP_ID.match(key["step_id"])
        or not isinstance(key["created_at"], str)
        or not _TIMESTAMP.match(key["created_at"])
    ):
        raise InvalidInput("cursor is not one this API returned for this flow")
    return items.to_item(key)
