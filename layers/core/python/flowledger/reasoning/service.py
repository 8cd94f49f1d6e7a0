"""Reasoning flows on DynamoDB. Every write carries its audit event in the same transaction."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from flowledger.errors import (
    ConditionFailed,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    SubjectErased,
    UndecodableItem,
)
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.ledger.events import AuditEntry, parse_timestamp, timestamp
from flowledger.ledger.row_failures import ROW_ERRORS, UNEXPECTED, RowFailures
from flowledger.ledger.store import TRANSACT_ITEMS_LIMIT
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.pathways.library import PathwayLibrary
from flowledger.reasoning.dimensions import PATIENT_LABELS, Dimensions, StepSignal, compute_dimensions
from flowledger.reasoning.guard import guard_counts
from flowledger.reasoning.models import (
    MAX_STEP_PAYLOAD_BYTES,
    MAX_STEPS_PER_FLOW,
    AdminFlowView,
    AdminStepView,
    Consent,
    ConsentChange,
    FlowClose,
    FlowPage,
    FlowSource,
    FlowStart,
    FlowView,
    InProgress,
    Narrative,
    NarrativeStep,
    Outcome,
    RadarAxis,
    StepBatchResult,
    StepCreate,
    StepView,
)
from flowledger.reasoning.steps_page import steps_without_payloads
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.decoding import DECODE_ERRORS, Skips, decoded, key_of, undecodable
from flowledger.store.envelope import FieldRef, is_sealed
from flowledger.store.paging import query_items
from flowledger.store.ratelimit import hit_rate_limit
from flowledger.subjects import ERASED_AT, subject_id_of

logger = logging.getLogger("flowledger.reasoning")

ACTIVE_SHARDS = 16
# One flow guard, then a step and its audit event each, in one transaction: 49 steps.
MAX_STEPS_PER_BATCH = (TRANSACT_ITEMS_LIMIT - 1) // 2
# Under the transaction's 4 MB with room for sealing (base64) and the events.
MAX_BATCH_PAYLOAD_BYTES = 2 * 1024 * 1024
# A batch's transaction lost to another attempt of it this many times: give up with a 409.
BATCH_ATTEMPTS = 3
STALE_AFTER = timedelta(hours=24)
NARRATIVE_READS_PER_WINDOW = 30
NARRATIVE_WINDOW_SECONDS = 300
DISCLAIMER = (
    "This summary explains the steps the system took. It is not medical advice; "
    "talk to your care team about any decision."
)


class AskCareTeam(Forbidden):
    """The flow's summaries did not pass the guard: only the care team may see it."""

    code = "ask_care_team"


class ConsentRequired(Forbidden):
    code = "consent_required"


def _active_shard(flow_id: str) -> str:
    return str(int.from_bytes(hashlib.sha256(flow_id.encode()).digest()[:4], "big") % ACTIVE_SHARDS)


class FlowService:
    """The flow lifecycle, the patient and admin views and the decay rule, over one ``Services``."""

    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._flows = services.aws.table_name("flows")
        self._steps = services.aws.table_name("steps")
        self._consents = services.aws.table_name("consents")

    # ---- writes ------------------------------------------------------------------------------

    def start_flow(
        self, principal: Principal, body: FlowStart, source: FlowSource = "api", source_service: str | None = None
    ) -> FlowView:
        """Open a flow (``reasoning.flow.started``); ``source`` says what wrote it: the API (an SDK over HTTP), an
        agent in process, or the OTLP receiver (``source_service``: the traces' ``service.name``)."""
        now = timestamp(self._s.clock())
        flow_id = body.flow_id or new_id("fl_")
        flow = FlowView(
            flow_id=flow_id,
            flow_state="active",
            created_by=principal.id,
            created_at=now,
            step_count=0,
            source=source,
            source_service=source_service,
            **body.model_dump(exclude={"flow_id"}),
        )
        # listing_year: the flows list's partition (by_listing, reasoning/listing.py).
        # agents (a string set) and first_step are the steps' to add: the guard of each step write sets them
        stored = flow.model_dump(exclude={"agents", "first_step"})
        item = items.to_item({**stored, "active_shard": _active_shard(flow_id), "listing_year": now[:4]})
        refs = {"trace_id": body.trace_id} if body.trace_id else {}
        fence = []
        if body.patient_id:  # the ledger names the patient by pseudonym; an erased patient takes no new flow
            refs["patient"] = self._s.subject_keys.pseudonym(body.patient_id)
            fence = [self._s.subject_keys.fence(subject_id_of(body.patient_id))]
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="reasoning.flow.started",
                    actor=principal.actor,
                    subject=f"flow:{flow_id}",
                    refs=refs,
                    payload={"trigger_type": body.trigger_type},
                ),
                [
                    {
                        "Put": {
                            "TableName": self._flows,
                            "Item": item,
                            "ConditionExpression": "attribute_not_exists(flow_id)",
                        }
                    },
                    *fence,
                ],
            )
        except ConditionFailed as failed:  # only a client-chosen id can already exist
            if failed.index == 1:
                raise SubjectErased("this flow's patient was erased: no flow may name them again") from None
            raise Conflict(f"flow {flow_id} already exists") from None
        self._s.metrics.emit("reasoning.flow.started", 1, "Count", {"trigger_type": body.trigger_type})
        return flow

    def add_step(self, principal: Principal, flow_id: str, body: StepCreate) -> StepView:
        """Record one step (``reasoning.step.created``) in one transaction of three items."""
        if payload_bytes(body) > MAX_STEP_PAYLOAD_BYTES:
            raise PayloadTooLarge(f"step inputs and outputs exceed {MAX_STEP_PAYLOAD_BYTES // 1024} KB")
        step_id = body.step_id or new_id("st_")
        if step_id in body.parent_step_ids:
            raise InvalidInput("a step cannot be its own parent (cycle)")
        self._require_parents(flow_id, body.parent_step_ids)
        now = timestamp(self._s.clock())
        step, record = self._step_item(principal, flow_id, step_id, body, now)
        try:
            self._s.ledger.append(
                self._step_entry(principal, flow_id, step_id, body),
                [self._guard(principal, flow_id, 1, now, {body.agent}, body), record],
            )
        except ConditionFailed as exc:
            if exc.index == 1:
                raise Conflict(f"step {step_id} is already recorded") from None
            raise self._why_not_writable(principal, flow_id) from None
        self._s.metrics.emit("reasoning.step.writes", 1, "Count", {"step_kind": body.step_kind, "agent": body.agent})
        return step

    def add_steps(self, principal: Principal, flow_id: str, bodies: Sequence[StepCreate]) -> StepBatchResult:
        """Record several steps of one flow in one transaction, all or nothing.

        One flow guard (active, this writer's, room for the new steps), then each step with its own
        ``reasoning.step.created`` event, so up to :data:`MAX_STEPS_PER_BATCH` steps fit DynamoDB's
        transaction limit. The rules of :meth:`add_step` hold for each step; a parent may also be an
        earlier step of the same batch. A retried batch never writes twice: a step already recorded
        with the same content (an earlier attempt whose answer was lost) is skipped and listed in
        ``already_recorded``, with no second write or audit event; a step id recorded with other
        content is a 409 naming it.
        """
        if len(bodies) > MAX_STEPS_PER_BATCH:
            raise PayloadTooLarge(
                f"a batch holds at most {MAX_STEPS_PER_BATCH} steps (one transaction); this one has {len(bodies)}"
            )
        if not bodies:
            raise InvalidInput("a batch holds at least one step")
        steps = [(body.step_id or new_id("st_"), body) for body in bodies]
        external_parents = _check_batch(steps)
        ids = [step_id for step_id, _ in steps]
        digests = {step_id: _digest(step_id, body) for step_id, body in steps}
        for _ in range(BATCH_ATTEMPTS):
            stored = self._stored_digests(flow_id, [*ids, *external_parents])
            missing = [p for p in external_parents if p not in stored]
            if missing:
                raise InvalidInput(f"unknown parent step(s): {', '.join(missing)}")
            for step_id in ids:
                if step_id in stored and stored[step_id] != digests[step_id]:
                    raise Conflict(f"step {step_id} is already recorded with other content")
            fresh = [(step_id, body) for step_id, body in steps if step_id not in stored]
            already = [step_id for step_id in ids if step_id in stored]
            if not fresh:
                self._require_writer(principal, flow_id)  # a retry learns nothing of a flow it may not write
                return StepBatchResult(flow_id=flow_id, recorded=[], already_recorded=already)
            try:
                self._write_batch(principal, flow_id, fresh)
            except ConditionFailed as exc:
                if exc.index == 0:
                    raise self._why_not_writable(principal, flow_id, len(fresh)) from None
                continue  # another attempt of this batch wrote a step meanwhile: read what it wrote
            # One EMF record per (kind, agent) with its count, not one per step: a batch is one write.
            for (kind, agent), count in Counter((body.step_kind, body.agent) for _, body in fresh).items():
                self._s.metrics.emit("reasoning.step.writes", count, "Count", {"step_kind": kind, "agent": agent})
            return StepBatchResult(flow_id=flow_id, recorded=[s for s, _ in fresh], already_recorded=already)
        raise Conflict("the batch's steps kept being written by another request; retry it")

    def _write_batch(self, principal: Principal, flow_id: str, steps: list[tuple[str, StepCreate]]) -> None:
        """One transaction: the flow guard, each step's Put, then each step's audit event."""
        base = self._s.clock()
        # A microsecond apart: stored order (created_at, then id) is the batch's order.
        moments = [timestamp(base + timedelta(microseconds=n)) for n in range(len(steps))]
        puts = [self._step_item(principal, flow_id, s, b, at)[1] for (s, b), at in zip(steps, moments, strict=True)]
        self._s.ledger.append_all(
            [self._step_entry(principal, flow_id, step_id, body) for step_id, body in steps],
            [
                self._guard(
                    principal, flow_id, len(steps), moments[-1], {body.agent for _, body in steps}, steps[0][1]
                ),
                *puts,
            ],
        )

    def _step_item(
        self, principal: Principal, flow_id: str, step_id: str, body: StepCreate, now: str
    ) -> tuple[StepView, dict[str, Any]]:
        """The step's view and the conditional Put that stores it (PII fields sealed)."""
        step = StepView(
            step_id=step_id,
            flow_id=flow_id,
            created_at=now,
            **body.model_dump(
                include={"step_kind", "agent", "summary_text", "latency_ms", "confidence", "parent_step_ids"}
            ),
        )
        record = {
            **step.model_dump(),
            "created_by": principal.id,
            "pii_fields": body.pii_fields.model_dump(),
            "back_refs": body.back_refs.model_dump(exclude_none=True),
            "inputs": self._seal(flow_id, step_id, "inputs", body.inputs, body.pii_fields.inputs),
            "outputs": self._seal(flow_id, step_id, "outputs", body.outputs, body.pii_fields.outputs),
            # What the client sent, so a retried batch can tell its own earlier write from another.
            "body_sha256": _digest(step_id, body),
        }
        put = {
            "Put": {
                "TableName": self._steps,
                "Item": items.to_item(record),
                "ConditionExpression": "attribute_not_exists(step_id)",
            }
        }
        return step, put

    def _guard(
        self, principal: Principal, flow_id: str, count: int, now: str, agents: set[str], first: StepCreate
    ) -> dict[str, Any]:
        """The flow's Update: active, this writer's, and room for ``count`` more steps.

        It adds the steps' ``agents`` to the flow's set, which the flows list filters by agent on.
        """
        return {
            "Update": {
                "TableName": self._flows,
                "Key": {"flow_id": {"S": flow_id}},
                # first_step: what the flows list shows of a flow besides its trigger (the first step written)
                "UpdateExpression": "SET step_count = step_count + :n, last_step_at = :now, "
                "first_step = if_not_exists(first_step, :first) ADD agents :agents",
                "ConditionExpression": "flow_state = :active AND step_count <= :room AND created_by = :sub",
                "ExpressionAttributeValues": {
                    ":n": {"N": str(count)},
                    ":now": {"S": now},
                    ":agents": {"SS": sorted(agents)},
                    ":first": {
                        "M": {
                            "step_kind": {"S": first.step_kind},
                            "agent": {"S": first.agent},
                            "summary_text": {"S": first.summary_text},
                        }
                    },
                    ":active": {"S": "active"},
                    ":room": {"N": str(MAX_STEPS_PER_FLOW - count)},
                    ":sub": {"S": principal.id},
                },
            }
        }

    def _step_entry(self, principal: Principal, flow_id: str, step_id: str, body: StepCreate) -> AuditEntry:
        return AuditEntry(
            action="reasoning.step.created",
            actor=principal.actor,
            subject=f"flow:{flow_id}",
            refs={"step_id": step_id},
            payload={
                "step_kind": body.step_kind,
                "agent": body.agent,
                "parents": len(body.parent_step_ids),
                "pii_fields": len(body.pii_fields.inputs) + len(body.pii_fields.outputs),
            },
        )

    def close_flow(self, principal: Principal, flow_id: str, body: FlowClose) -> FlowView:
        """Close a flow once: guard every summary, snapshot the radar (``reasoning.flow.completed|aborted``)."""
        flow = self._flow(flow_id)
        if flow.created_by != principal.id:
            raise Forbidden("only the writer that opened a flow may close it")
        return self._close(flow, body, principal.actor)

    def _close(self, flow: FlowView, body: FlowClose, actor: str) -> FlowView:
        if flow.flow_state != "active":
            raise Conflict(f"flow {flow.flow_id} is already {flow.flow_state}")
        steps = steps_without_payloads(self._s, flow.flow_id)  # 20,000 steps: never their payloads
        safe, counts = guard_counts([flow.trigger_summary, *(s["summary_text"] for s in steps), body.outcome.summary])
        maturity, recency = self._family_axes(flow.trigger_type)
        dimensions = compute_dimensions(
            [_signal(s) for s in steps],
            body.outcome.confidence,
            aborted=body.state == "aborted",
            summaries_safe=safe,
            maturity=maturity,
            recency=recency,
        )
        closed = flow.model_copy(
            update={
                "flow_state": body.state,
                "closed_at": timestamp(self._s.clock()),
                "outcome": body.outcome,
                "abort_reason": body.reason if body.state == "aborted" else None,
                "patient_safe_summary": safe,
                "dimensions_snapshot": dimensions,
                "step_count": len(steps),
            }
        )
        values = items.to_item(
            {
                ":state": body.state,
                ":closed": closed.closed_at,
                ":outcome": body.outcome.model_dump(),
                ":safe": safe,
                ":dims": dimensions.model_dump(),
                ":counts": counts,
                ":active": "active",
                ":shard": _active_shard(flow.flow_id),
            }
        )
        # closed_shard: the export's time-window index (by_closed) reads closed flows shard by shard.
        update = (
            "SET flow_state = :state, closed_at = :closed, outcome = :outcome, patient_safe_summary = :safe, "
            "dimensions_snapshot = :dims, guard_counts = :counts, closed_shard = :shard"
        )
        if closed.abort_reason:
            update += ", abort_reason = :reason"
            values[":reason"] = {"S": closed.abort_reason}
        try:
            self._s.ledger.append(
                AuditEntry(
                    action=f"reasoning.flow.{body.state}",
                    actor=actor,
                    subject=f"flow:{flow.flow_id}",
                    payload={
                        "outcome_type": body.outcome.type,
                        "steps": len(steps),
                        "patient_safe_summary": safe,
                        **counts,
                    },
                ),
                [
                    {
                        "Update": {
                            "TableName": self._flows,
                            "Key": {"flow_id": {"S": flow.flow_id}},
                            "UpdateExpression": update + " REMOVE active_shard",
                            "ConditionExpression": "flow_state = :active",
                            "ExpressionAttributeValues": values,
                        }
                    }
                ],
            )
        except ConditionFailed:
            raise Conflict(f"flow {flow.flow_id} was closed by another request") from None
        dims = {
            "outcome_type": body.outcome.type,
            "trigger_type": flow.trigger_type,
            "patient_safe_summary": str(safe).lower(),
        }
        self._s.metrics.emit(f"reasoning.flow.{body.state}", 1, "Count", dims)
        PathwayExtractor(self._s).extract_soft(closed, steps, actor)
        latency = (self._s.clock() - parse_timestamp(flow.created_at)).total_seconds() * 1000
        self._s.metrics.emit(
            "reasoning.flow.latency_ms",
            latency,
            "Milliseconds",
            {
                "outcome_type": body.outcome.type,
                "trigger_type": flow.trigger_type,
                "step_count_bucket": _step_bucket(len(steps)),
            },
        )
        return closed

    def set_consent(self, principal: Principal, body: ConsentChange) -> Consent:
        """A patient opts in or out of reading their flows (``reasoning.read_consent.changed``)."""
        if not principal.patient_id:
            raise Forbidden("only a patient's token can change reasoning.read consent")
        consent = Consent(
            patient_id=principal.patient_id, reasoning_read=body.reasoning_read, changed_at=timestamp(self._s.clock())
        )
        keys = self._s.subject_keys
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="reasoning.read_consent.changed",
                    actor=principal.actor,
                    subject=f"patient:{keys.pseudonym(principal.patient_id)}",
                    payload={"reasoning_read": body.reasoning_read},
                ),
                [
                    {"Put": {"TableName": self._consents, "Item": items.to_item(consent.model_dump())}},
                    keys.fence(subject_id_of(principal.patient_id)),
                ],
            )
        except ConditionFailed as failed:
            if failed.index == 1:  # the fence: an erasure of this patient has begun
                raise SubjectErased("your data was erased") from None
            raise Conflict("your consent changed meanwhile; read it and set it again") from None
        return consent

    def read_consent(self, principal: Principal) -> Consent:
        """The patient's current ``reasoning.read`` choice (opted out until they opt in).

        Not audited and not rate-limited, as ``GET /api/me`` is not: it shows the caller only their own
        setting, which every change to it already records.
        """
        if not principal.patient_id:
            raise Forbidden("only a patient's token can read reasoning.read consent")
        self._s.subject_keys.require_live_patient(principal.patient_id)
        item = self._consent_item(principal.patient_id)
        if item is None:
            return Consent(patient_id=principal.patient_id, reasoning_read=False)
        return decoded(item, Consent.model_validate, f"consent of {principal.patient_id}", principal.patient_id)

    def decay_stale_flows(self) -> dict[str, int]:
        """Abort every flow active for more than 24 hours (reason ``timeout``); safe to re-run.

        ``skipped`` counts flows closed meanwhile and flows whose stored flow or steps cannot be read.
        """
        cutoff = timestamp(self._s.clock() - STALE_AFTER)
        aborted = skipped = 0
        undecodable = RowFailures(self._s, "flow_decay", "flow")
        for shard in range(ACTIVE_SHARDS):
            for flow_id in self._stale_in_shard(str(shard), cutoff):
                try:
                    flow = self._flow(flow_id)
                    self._close(
                        flow,
                        FlowClose(
                            state="aborted",
                            reason="timeout",
                            outcome=Outcome(type="timeout", summary="Stopped after 24 hours without a close"),
                        ),
                        "system:flow_decay",
                    )
                except UndecodableItem as exc:
                    undecodable.note(exc)  # one poisoned flow must not stop every hourly run
                    continue
                except (Conflict, NotFound):
                    skipped += 1  # closed meanwhile: nothing to do
                    continue
                except ROW_ERRORS as exc:  # one flow that cannot be closed fails alone (audited), never the run
                    undecodable.record(flow_id, UNEXPECTED, exc)
                    continue
                aborted += 1
        return {"aborted": aborted, "skipped": skipped + undecodable.count, "rows_failed": undecodable.count}

    # ---- reads -------------------------------------------------------------------------------

    def patient_narrative(self, principal: Principal, flow_id: str) -> Narrative | InProgress:
        """The patient's view of their own flow, once they opted in and its summaries passed."""
        if not principal.patient_id:
            raise Forbidden("only a patient's token can read a reasoning narrative")
        # Before the rate limit, whose counter names the patient: nothing of an erased patient is written again.
        self._s.subject_keys.require_live_patient(principal.patient_id)
        hit_rate_limit(
            self._s, f"narrative:{principal.patient_id}", NARRATIVE_READS_PER_WINDOW, NARRATIVE_WINDOW_SECONDS
        )
        flow = self._flow(flow_id)
        if flow.patient_id != principal.patient_id:
            raise Forbidden("this flow is not about you")
        if not self._consented(principal.patient_id):
            raise ConsentRequired("opt in to reading your reasoning flows first (PUT /api/reasoning/consent)")
        if flow.flow_state == "active":
            return InProgress(flow_id=flow_id, state="active", steps_so_far=flow.step_count)
        if not flow.patient_safe_summary:
            raise AskCareTeam("this explanation is only available through your care team")
        steps = steps_without_payloads(self._s, flow_id)  # the narrative never shows inputs or outputs
        radar = flow.dimensions_snapshot or self._fresh_dimensions(flow, steps)
        self._s.ledger.append(
            AuditEntry(
                action="patient.reasoning.flow.read",
                actor=principal.actor,
                subject=f"flow:{flow_id}",
                refs={"patient": self._s.subject_keys.pseudonym(principal.patient_id)},
                payload={"steps": len(steps)},
            )
        )
        return Narrative(
            flow_id=flow_id,
            trigger_summary=flow.trigger_summary,
            steps=[
                NarrativeStep(
                    agent_label=s["agent"].replace("_", " ").title(), summary=s["summary_text"], at=s["created_at"]
                )
                for s in steps
            ],
            outcome_summary=flow.outcome.summary if flow.outcome else "",
            radar=[
                RadarAxis(label=PATIENT_LABELS[name], score=axis["score"], bucket=axis["bucket"])
                for name, axis in radar.model_dump().items()
            ],
            disclaimer=DISCLAIMER,
        )

    def admin_flow(self, admin: Principal, flow_id: str) -> AdminFlowView:
        """The whole DAG with PII fields opened (``admin.reasoning.flow.read``, actor = IAM principal)."""
        flow = self._flow(flow_id)
        records = list(self._step_records(flow_id))
        steps = [
            AdminStepView(
                **{
                    **record,
                    "inputs": self._open(flow_id, record, "inputs"),
                    "outputs": self._open(flow_id, record, "outputs"),
                }
            )
            for record in records
        ]
        self._s.ledger.append(
            AuditEntry(
                action="admin.reasoning.flow.read",
                actor=admin.actor,
                subject=f"flow:{flow_id}",
                payload={"steps": len(steps)},
            )
        )
        return AdminFlowView(
            flow=flow, steps=steps, dimensions=flow.dimensions_snapshot or self._fresh_dimensions(flow, records)
        )

    def flows_by_trace(self, trace_id: str, limit: int, cursor: str | None) -> FlowPage:
        """Flows of one trace, oldest first, from the trace index (no audit: a listing)."""
        request: dict[str, Any] = {
            "TableName": self._flows,
            "IndexName": "by_trace",
            "KeyConditionExpression": "trace_id = :t",
            "ExpressionAttributeValues": {":t": {"S": trace_id}},
            "Limit": limit,
        }
        if cursor:
            request["ExclusiveStartKey"] = _decode_cursor(cursor, trace_id)
        response = self._db.query(**request)
        flows = [self._flow(items.from_item(item)["flow_id"]) for item in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return FlowPage(flows=flows, next_cursor=_encode_cursor(last) if last else None)

    def closed_flows_of_family(self, trigger_type: str, since: str, limit: int) -> list[FlowView]:
        """The most recent closed flows of one trigger type closed at or after ``since``, newest first.

        One bounded query of the sparse ``by_family`` index (only closed flows carry ``closed_at``); its
        projection holds what a family's aggregate needs, so no flow is read again. An item that cannot
        be decoded is logged and passed over.
        """
        request: dict[str, Any] = {
            "TableName": self._flows,
            "IndexName": "by_family",
            "KeyConditionExpression": "trigger_type = :t AND closed_at >= :since",
            "ExpressionAttributeValues": {":t": {"S": trigger_type}, ":since": {"S": since}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        found = self._db.query(**request).get("Items", [])
        return list(Skips("family_flows").readable(found, _family_flow))

    # ---- helpers -----------------------------------------------------------------------------

    def _flow(self, flow_id: str) -> FlowView:
        response = self._db.get_item(TableName=self._flows, Key={"flow_id": {"S": flow_id}}, ConsistentRead=True)
        if "Item" not in response:
            raise NotFound(f"no flow {flow_id}")
        if ERASED_AT in response["Item"]:
            raise SubjectErased(f"flow {flow_id} was erased with its patient's data")
        return decoded(response["Item"], FlowView.model_validate, f"flow {flow_id}", flow_id)

    def _step_records(self, flow_id: str) -> Iterator[dict[str, Any]]:
        request: dict[str, Any] = {
            "TableName": self._steps,
            "KeyConditionExpression": "flow_id = :f",
            "ExpressionAttributeValues": {":f": {"S": flow_id}},
            "ConsistentRead": True,
        }
        records = [
            decoded(item, _step_record, f"step {key_of(item, 'step_id')} of flow {flow_id}", key_of(item, "step_id"))
            for item in query_items(self._db, request)
        ]
        # Step ids are ULIDs, so key order is creation order; client-chosen ids keep it as they are ULIDs too.
        yield from sorted(records, key=lambda r: (r["created_at"], r["step_id"]))

    def _require_parents(self, flow_id: str, parents: list[str]) -> None:
        if not parents:
            return
        keys = [{"flow_id": {"S": flow_id}, "step_id": {"S": p}} for p in dict.fromkeys(parents)]
        response = self._db.batch_get_item(
            RequestItems={self._steps: {"Keys": keys, "ConsistentRead": True, "ProjectionExpression": "step_id"}}
        )
        found = {item["step_id"]["S"] for item in response.get("Responses", {}).get(self._steps, [])}
        missing = sorted(set(parents) - found)
        if missing:
            raise InvalidInput(f"unknown parent step(s): {', '.join(missing)}")

    def _why_not_writable(self, principal: Principal, flow_id: str, adding: int = 1) -> Exception:
        flow = self._flow(flow_id)
        if flow.created_by != principal.id:
            return Forbidden("only the writer that opened a flow may add steps to it")
        if flow.flow_state != "active":
            return Conflict(f"flow {flow_id} is {flow.flow_state}; steps are only added to an active flow")
        if adding == 1:
            return Conflict(f"flow {flow_id} already has {MAX_STEPS_PER_FLOW} steps")
        return Conflict(
            f"flow {flow_id} has {flow.step_count} steps; {adding} more would pass the limit of {MAX_STEPS_PER_FLOW}"
        )

    def _require_writer(self, principal: Principal, flow_id: str) -> None:
        if self._flow(flow_id).created_by != principal.id:
            raise Forbidden("only the writer that opened a flow may add steps to it")

    def recorded_steps(self, flow_id: str, step_ids: list[str]) -> set[str]:
        """Which of these steps the flow holds (a consistent read; none asked, none read)."""
        return set(self._stored_digests(flow_id, step_ids)) if step_ids else set()

    def _stored_digests(self, flow_id: str, step_ids: list[str]) -> dict[str, str | None]:
        """Which of these steps the flow holds, each with the digest of the body it was recorded from."""
        found: dict[str, str | None] = {}
        unique = list(dict.fromkeys(step_ids))
        for start in range(0, len(unique), 100):  # BatchGetItem takes 100 keys a request
            pending: dict[str, Any] = {
                self._steps: {
                    "Keys": [{"flow_id": {"S": flow_id}, "step_id": {"S": s}} for s in unique[start : start + 100]],
                    "ConsistentRead": True,
                    "ProjectionExpression": "step_id, body_sha256",
                }
            }
            while pending:
                response = self._db.batch_get_item(RequestItems=pending)
                for item in response.get("Responses", {}).get(self._steps, []):
                    found[item["step_id"]["S"]] = item.get("body_sha256", {}).get("S")
                pending = response.get("UnprocessedKeys") or {}
        return found

    def _seal(self, flow_id: str, step_id: str, side: str, values: dict[str, Any], pii: list[str]) -> dict[str, Any]:
        return {
            key: self._s.sealer.seal(value, FieldRef(flow_id, step_id, side, key)) if key in pii else value
            for key, value in values.items()
        }

    def _open(self, flow_id: str, record: dict[str, Any], side: str) -> dict[str, Any]:
        return {
            key: self._open_field(value, FieldRef(flow_id, record["step_id"], side, key), side, record["step_id"])
            if is_sealed(value)
            else value
            for key, value in record.get(side, {}).items()
        }

    def _open_field(self, sealed: dict[str, str], context: FieldRef, side: str, step_id: str) -> Any:
        try:
            return self._s.sealer.open(sealed, context)
        except DECODE_ERRORS as exc:
            # A mangled, moved or forged envelope (SealedFieldError) is the item's fault, not the request's.
            raise undecodable(f"sealed {side} of step {step_id}", step_id, exc) from None

    def flow_with_steps(self, flow_id: str) -> tuple[FlowView, list[dict[str, Any]]]:
        """A flow and its stored step records (sealed fields stay sealed)."""
        return self._flow(flow_id), list(self._step_records(flow_id))

    def _family_axes(self, trigger_type: str) -> tuple[int | None, int | None]:
        """The radar's Maturity and Recency from the pathway library; not rated (None) when it cannot say."""
        try:
            return PathwayLibrary(self._s).family_axes(trigger_type, self._s.clock())
        except Exception:
            logger.warning("pathway family unavailable for the radar", exc_info=True)
            return None, None

    def _consent_item(self, patient_id: str) -> dict[str, Any] | None:
        response = self._db.get_item(
            TableName=self._consents, Key={"patient_id": {"S": patient_id}}, ConsistentRead=True
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    def _consented(self, patient_id: str) -> bool:
        item = self._consent_item(patient_id) or {}
        return bool(item.get("reasoning_read", {}).get("BOOL", False))

    def _fresh_dimensions(self, flow: FlowView, steps: list[dict[str, Any]]) -> Dimensions:
        """For flows closed before snapshots existed: the radar computed now (the family's axes not rated)."""
        return compute_dimensions(
            [_signal(s) for s in steps],
            flow.outcome.confidence if flow.outcome else None,
            aborted=flow.flow_state == "aborted",
            summaries_safe=bool(flow.patient_safe_summary),
        )

    def _stale_in_shard(self, shard: str, cutoff: str) -> Iterator[str]:
        request: dict[str, Any] = {
            "TableName": self._flows,
            "IndexName": "by_active",
            "KeyConditionExpression": "active_shard = :s AND created_at < :cutoff",
            "ExpressionAttributeValues": {":s": {"S": shard}, ":cutoff": {"S": cutoff}},
        }
        for item in query_items(self._db, request):
            yield item["flow_id"]["S"]


def flow_decay_job(services: Services) -> dict[str, int]:
    """The hourly job: abort zombie flows."""
    return FlowService(services).decay_stale_flows()


def _step_record(values: dict[str, Any]) -> dict[str, Any]:
    """A stored step as read, once it holds what every reader of steps relies on."""
    AdminStepView.model_validate(values)
    return values


def payload_bytes(body: StepCreate) -> int:
    return len(json.dumps({"inputs": body.inputs, "outputs": body.outputs}).encode())


def _digest(step_id: str, body: StepCreate) -> str:
    """A step body's fingerprint (its id included): equal for a retry of the same step, only for that."""
    fields = {**body.model_dump(mode="json"), "step_id": step_id}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _check_batch(steps: list[tuple[str, StepCreate]]) -> list[str]:
    """The rules a batch breaks before anything is read; returns the parents named outside the batch."""
    earlier: set[str] = set()
    ids = {step_id for step_id, _ in steps}
    outside: dict[str, None] = {}
    total = 0
    for position, (step_id, body) in enumerate(steps):
        payload = payload_bytes(body)
        if payload > MAX_STEP_PAYLOAD_BYTES:
            raise PayloadTooLarge(
                f"step {position} ({step_id}): inputs and outputs exceed {MAX_STEP_PAYLOAD_BYTES // 1024} KB"
            )
        total += payload
        if total > MAX_BATCH_PAYLOAD_BYTES:
            raise PayloadTooLarge(
                f"the batch's inputs and outputs exceed {MAX_BATCH_PAYLOAD_BYTES // (1024 * 1024)} MB; send fewer steps"
            )
        if step_id in earlier:
            raise InvalidInput(f"step {step_id} appears twice in the batch")
        if step_id in body.parent_step_ids:
            raise InvalidInput(f"step {step_id} cannot be its own parent (cycle)")
        for parent in body.parent_step_ids:
            if parent in ids and parent not in earlier:
                raise InvalidInput(f"step {step_id} names {parent} as a parent, which comes later in the batch")
            if parent not in ids:
                outside[parent] = None
        earlier.add(step_id)
    return list(outside)


def _signal(step: dict[str, Any]) -> StepSignal:
    return StepSignal(step_kind=step["step_kind"], agent=step["agent"], confidence=step.get("confidence"))


def _step_bucket(count: int) -> str:
    return "0" if count == 0 else "1-3" if count <= 3 else "4-10" if count <= 10 else "11-50" if count <= 50 else "51+"


def _encode_cursor(key: dict[str, Any]) -> str:
    return encode_cursor(items.from_item(key))


def _decode_cursor(cursor: str, trace_id: str) -> dict[str, Any]:
    key = decode_cursor(cursor)
    if (
        not isinstance(key, dict)
        or key.get("trace_id") != trace_id
        or set(key) != {"trace_id", "created_at", "flow_id"}
    ):
        raise InvalidInput("cursor is not one this API returned")
    return items.to_item(key)


def _family_flow(item: dict[str, Any]) -> FlowView:
    flow_id = key_of(item, "flow_id")
    return decoded(item, FlowView.model_validate, f"flow {flow_id}", flow_id)
