"""Erasing a subject: an idempotent, resumable machine that keeps every proof and destroys the person.

The machine's state is the subject's ``#erasure`` item; each phase ends in one audited write that also
moves the item on, so a crash anywhere leaves a state a retry resumes from, and a retry of a done
erasure changes nothing. The phases, in order:

1. ``begun``: the ``#erasure`` item is written (refused while a legal hold stands). From here the fence
   holds: no key is made for the subject again, no flow names them, no consent is written.
2. ``key``: the subject's data key is destroyed. Every field sealed under it is noise from now on,
   wherever a copy of it lies, so the order is safe: nothing is ever deleted while still readable by key.
3. ``uploads``: each document the patient uploaded goes, every version of every body (S3 versions and delete
   markers), its items and its knowledge chunks.
4. ``flows``: each flow of the patient is fenced (``flow_state`` ``erasing``: no step is written to it, every
   read answers 410), loses its steps, its spans waiting in ``otlp_waiting``, the pathway it seeded and
   that pathway's family snapshots, then becomes a tombstone (ids, times and counts) in one audited write
   per flow, ``admin.subject.flow_erased`` on the flow's own subject: the flow's evidence bundle carries it.
5. ``conversations``: each chat session the patient began goes, runs, grounding and header, with any flow
   of it recorded without the patient.
6. ``consents``: the consent item and the patient's rate-limit counters go.
7. ``receipt``: ``admin.subject.erased`` records what was destroyed (counts and digests, no values)
   and when the erasure becomes final (the backup window). The next checkpoint signs it.

Then the embedded store of ``flowledger serve`` compacts its journal and snapshot (a no-op on AWS), again on
every retry. The ledger is never rewritten: its events name flows by id and patients by pseudonym, so every chain,
checkpoint, proof and earlier evidence bundle still verifies.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from flowledger.chat.runs import SESSION_HEADER
from flowledger.errors import ConditionFailed, LegalHold, NotFound
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.otlp.waiting import MARKER as WAITING_MARKER
from flowledger.pathways.snapshot import SnapshotStore
from flowledger.pathways.store import pathway_id_for
from flowledger.store import items
from flowledger.store.compaction import compact_embedded_store
from flowledger.store.paging import batch_delete, query_items
from flowledger.subjects import BACKUP_WINDOW_DAYS, ERASED_AT, ERASED_STATE, subject_id_of
from flowledger.subjects.holds import LegalHolds
from flowledger.subjects.keys import ERASURE_ITEM, HOLD_ITEM, KEY_ITEM, subject_key
from flowledger.workspaces.erasure import erase_document, subject_documents

if TYPE_CHECKING:
    from flowledger.services import Services

Phase = Literal["key", "uploads", "flows", "conversations", "consents", "receipt", "completed"]
PHASES: tuple[Phase, ...] = ("key", "uploads", "flows", "conversations", "consents", "receipt", "completed")
COUNTED = (
    *("flows", "steps", "waiting_spans", "pathways", "snapshot_objects"),
    *("sessions", "session_items"),
    *("documents", "document_items", "objects", "chunks"),
    *("consents", "rate_limits"),
)
# A flow's digest is folded into lanes by addition, so each flow counts once whatever order a resumed
# erasure meets them in; 56-bit lanes keep each sum inside DynamoDB's 38-digit numbers.
DIGEST_LANES = 4
LANE_BITS = 56
# The counter shards of the erasure item (the receipt sums them): each worker of a run counts into its own
# (FLOWLEDGER_ERASURE_WORKERS is at most this many), so flows erased at once never contend for one item.
COUNTER_SHARDS = 32
# Flows of a patient read back from the eventually consistent by_patient index until a pass erases none.
MAX_FLOW_PASSES = 100
# What a flow's tombstone keeps: ids, times and counts, never a summary, a reference or the patient.
TOMBSTONE_KEEPS = ("created_at", "trigger_type", "closed_at", "closed_shard")
RATE_LIMIT_KEYS = ("narrative", "flow_list")  # reasoning's per-patient counters (store/ratelimit.py)


class ErasureView(BaseModel):
    """An erasure as its receipt tells it: no value of the subject, only ids, times, counts and digests."""

    subject_id: str
    erasure_id: str
    reason: str
    requested_by: str
    started_at: str
    phase: Phase
    completed_at: str | None = None
    final_after: str | None = None  # the end of the backup window: no copy of the subject's data after it
    counts: dict[str, int]
    key_sha256: str | None = None  # the wrapped key destroyed
    flows_sha256: str | None = None
    receipt_event: str | None = None  # chain_id/seq of admin.subject.erased


class SubjectErasure:
    """Runs (or resumes) one subject's erasure; ``after`` is called after each durable write (tests crash there)."""

    def __init__(self, services: Services, after: Callable[[str], None] = lambda _: None) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._keys = services.subject_keys
        self._subjects = self._keys.table
        self._after = after
        self._purged: set[str] = set()  # trigger families whose pathway snapshots this run deleted
        self._lock = threading.Lock()
        self._worker = threading.local()  # .shard: the counter shard this worker thread counts into
        self._shards = itertools.count()

    def erase(self, admin: Principal, patient_id: str, reason: str, deadline: float | None = None) -> ErasureView:
        """Erase ``patient_id``'s data (``LegalHold`` while one stands), or go on with an erasure already begun.

        Stops at ``deadline`` (a ``time.monotonic()`` reading) between flows with the erasure still running:
        call again to finish it. A done erasure is answered as it was.
        """
        subject_id = subject_id_of(patient_id)
        state = self._state(subject_id) or self._begin(admin, patient_id, subject_id, reason)
        while state["phase"] != "completed":
            phase = state["phase"]
            if phase == "key":
                self._destroy_key(admin, subject_id, state)
            elif phase == "uploads":
                if not self._erase_uploads(subject_id, deadline):
                    return self._view(self._state(subject_id))
                self._advance(admin, subject_id, state, "uploads", "flows")
            elif phase == "flows":
                if not self._erase_flows(admin, patient_id, subject_id, state, deadline):
                    return self._view(self._state(subject_id))
                self._advance(admin, subject_id, state, "flows", "conversations")
            elif phase == "conversations":
                if not self._erase_conversations(admin, subject_id, state, deadline):
                    return self._view(self._state(subject_id))
                self._advance(admin, subject_id, state, "conversations", "consents")
            elif phase == "consents":
                self._erase_consents(patient_id, subject_id, state)
            elif phase == "receipt":
                self._write_receipt(admin, subject_id)
            moved = self._state(subject_id)
            assert moved is not None  # the item is never deleted
            state = moved
        # Last, and again on every retry: the embedded store drops every journal segment and snapshot older
        # than the deletes (on AWS, a no-op).
        compact_embedded_store(self._s.settings)
        return self._view(state)

    def status(self, patient_id: str) -> ErasureView | None:
        """The subject's erasure, begun or done; None if there is none."""
        state = self._state(subject_id_of(patient_id))
        return self._view(state) if state else None

    # ---- phases ------------------------------------------------------------------------------

    def _begin(self, admin: Principal, patient_id: str, subject_id: str, reason: str) -> dict[str, Any]:
        hold = LegalHolds(self._s).held(subject_id)
        if hold is not None:
            raise LegalHold(f"a legal hold stops this erasure: {hold.reason}")
        erasure_id = new_id("er_")
        started = timestamp(self._s.clock())
        state = {
            **subject_key(subject_id, ERASURE_ITEM),
            **items.to_item(
                {
                    "erasure_id": erasure_id,
                    "reason": reason,
                    "requested_by": admin.actor,
                    "started_at": started,
                    "phase": "key",
                    "erasure_state": "running",  # the by_state index: the resume job finds it while it runs
                    "patient_id": patient_id,  # what the job needs to go on; removed with the receipt
                    **{f"count_{name}": 0 for name in COUNTED},
                    **{f"lane_{n}": 0 for n in range(DIGEST_LANES)},
                }
            ),
        }
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="admin.subject.erasure_started",
                    actor=admin.actor,
                    subject=f"subject:{subject_id}",
                    refs={"erasure": erasure_id},
                    payload={"reason": reason},
                ),
                [
                    {
                        "Put": {
                            "TableName": self._subjects,
                            "Item": state,
                            "ConditionExpression": "attribute_not_exists(sk)",
                        }
                    },
                    {  # a hold placed since it was read above wins
                        "ConditionCheck": {
                            "TableName": self._subjects,
                            "Key": subject_key(subject_id, HOLD_ITEM),
                            "ConditionExpression": "attribute_not_exists(sk)",
                        }
                    },
                ],
            )
        except ConditionFailed as failed:
            if failed.index == 1:
                return self._begin(admin, patient_id, subject_id, reason)  # raises LegalHold with the hold's reason
            begun = self._state(subject_id)  # another request began it first: go on with theirs
            if begun is None:
                raise
            return begun
        self._after("begun")
        return items.from_item(state)

    def _destroy_key(self, admin: Principal, subject_id: str, state: dict[str, Any]) -> None:
        key = self._item(subject_id, KEY_ITEM)
        key_sha256 = hashlib.sha256(key["edk"]["B"]).hexdigest() if key else state.get("key_sha256", "none")
        self._s.ledger.append(
            AuditEntry(
                action="admin.subject.key_destroyed",
                actor=admin.actor,
                subject=f"subject:{subject_id}",
                refs={"erasure": state["erasure_id"]},
                payload={"key_sha256": key_sha256, "had_key": key is not None},
            ),
            [
                {"Delete": {"TableName": self._subjects, "Key": subject_key(subject_id, KEY_ITEM)}},
                self._move(subject_id, "key", "uploads", {"key_sha256": key_sha256}),
            ],
        )
        self._keys.forget(subject_id)
        self._after("key")

    def _erase_flows(
        self, admin: Principal, patient_id: str, subject_id: str, state: dict[str, Any], deadline: float | None
    ) -> bool:
        """Tombstone every flow of the patient; False when the deadline came first."""
        refs = {"erasure": state["erasure_id"]}

        def erase(flow_id: str) -> int | None:  # None: the deadline came first
            if deadline is not None and time.monotonic() >= deadline:
                return None
            return self.erase_flow(admin, subject_id, flow_id, refs, tally=True)

        for _ in range(MAX_FLOW_PASSES):
            with ThreadPoolExecutor(self._s.settings.erasure_workers, thread_name_prefix="erasure") as pool:
                erased = list(pool.map(erase, self._patient_flows(patient_id)))
            if None in erased:
                return False
            if not any(erased):
                return True
        return True

    def _patient_flows(self, patient_id: str) -> list[str]:
        request = {
            "TableName": self._s.aws.table_name("flows"),
            "IndexName": "by_patient",
            "KeyConditionExpression": "patient_id = :p",
            "ExpressionAttributeValues": {":p": {"S": patient_id}},
            "ProjectionExpression": "flow_id",
        }
        return [item["flow_id"]["S"] for item in query_items(self._db, request)]

    def erase_flow(self, actor: Principal, subject_id: str, flow_id: str, refs: dict[str, str], *, tally: bool) -> int:
        """Delete what a flow holds and leave its tombstone (``admin.subject.flow_erased``, naming ``refs``): 1, or 0
        when it is one already. ``tally`` counts it into the subject's erasure (retention erases with none)."""
        table = self._s.aws.table_name
        try:
            # Fence the flow first: no step is written to it from now on (a step write needs it active) and every
            # read of it answers 410, so nothing lands between the deletes below and the tombstone.
            fenced = self._db.update_item(
                TableName=table("flows"),
                Key={"flow_id": {"S": flow_id}},
                UpdateExpression="SET flow_state = :erasing, #erased = if_not_exists(#erased, :now)",
                ConditionExpression="attribute_exists(flow_id) AND flow_state <> :erased",
                ExpressionAttributeNames={"#erased": ERASED_AT},
                ExpressionAttributeValues={
                    ":erasing": {"S": "erasing"},
                    ":erased": {"S": ERASED_STATE},
                    ":now": {"S": timestamp(self._s.clock())},
                },
                ReturnValues="ALL_OLD",
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return 0  # gone, or a tombstone already
        stored = fenced["Attributes"]
        self._after("flow_fenced")
        batch_delete(self._db, table("steps"), self._keys_of("steps", flow_id, "step_id"))
        # Only the OTLP receiver holds spans for a parent, and only under the flows it opened.
        opened_by_otlp = stored.get("source", {}).get("S") == "otlp"
        waiting = self._keys_of("otlp_waiting", flow_id, "waiting_key") if opened_by_otlp else []
        batch_delete(self._db, table("otlp_waiting"), waiting)
        pathway = {"pathway_id": {"S": pathway_id_for(flow_id)}}
        seeded = self._db.delete_item(TableName=table("pathways"), Key=pathway, ReturnValues="ALL_OLD")
        had_pathway = "Attributes" in seeded
        snapshot_objects = self._purge_snapshots(stored) if "closed_at" in stored else 0
        self._after("flow_contents")
        tombstone = {
            "flow_id": {"S": flow_id},
            **{name: stored[name] for name in TOMBSTONE_KEEPS if name in stored},
            "flow_state": {"S": ERASED_STATE},
            ERASED_AT: {"S": timestamp(self._s.clock())},
            **{f"{name}_id": {"S": value} for name, value in refs.items()},  # erasure_id, or retention_id
            "step_count": stored.get("step_count", {"N": "0"}),
        }
        # The flow's own step count, not the steps just found: a crash after the deletes leaves fewer to find.
        step_count = int(stored.get("step_count", {}).get("N", "0"))
        spans = sum(1 for key in waiting if key["waiting_key"]["S"] != WAITING_MARKER)  # not the flow's marker item
        counts = {"flows": 1, "steps": step_count, "waiting_spans": spans, "pathways": int(had_pathway)}
        counts["snapshot_objects"] = snapshot_objects
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="admin.subject.flow_erased",
                    actor=actor.actor,
                    subject=f"flow:{flow_id}",
                    refs={**refs, "subject": subject_id},
                    payload={"steps": step_count, "waiting_spans": spans, "pathway": had_pathway},
                ),
                [
                    {
                        "Put": {
                            "TableName": table("flows"),
                            "Item": tombstone,
                            "ConditionExpression": "flow_state = :erasing",
                            "ExpressionAttributeValues": {":erasing": {"S": "erasing"}},
                        }
                    },
                    *([self._tally(subject_id, flow_id, counts)] if tally else []),
                ],
            )
        except ConditionFailed:
            return 0  # tombstoned by a concurrent retry of this erasure
        self._after("flow")
        return 1

    def _tally(self, subject_id: str, flow_id: str, counts: dict[str, int]) -> dict[str, Any]:
        """The update that counts an erased flow (and folds it into the digest) in one of the erasure's counter
        shards: this worker's own, so flows erased in parallel never contend for one item."""
        shard = getattr(self._worker, "shard", None)
        if shard is None:
            with self._lock:
                shard = self._worker.shard = next(self._shards) % COUNTER_SHARDS
        adds = [f"count_{name} :{name}" for name in counts] + [f"lane_{n} :lane{n}" for n in range(DIGEST_LANES)]
        values = {f":{name}": {"N": str(value)} for name, value in counts.items()}
        values |= {f":lane{n}": {"N": str(lane)} for n, lane in enumerate(_lanes(flow_id))}
        return {
            "Update": {
                "TableName": self._subjects,
                "Key": subject_key(subject_id, f"{ERASURE_ITEM}#{shard}"),
                "UpdateExpression": "ADD " + ", ".join(adds),
                "ExpressionAttributeValues": values,
            }
        }

    def _purge_snapshots(self, stored: dict[str, Any]) -> int:
        """Delete the pathway snapshots of a closed flow's family (it may have seeded one), once a run a family."""
        family = stored.get("trigger_type", {}).get("S")
        with self._lock:
            if not family or family in self._purged:
                return 0
            self._purged.add(family)
        return SnapshotStore.of(self._s).purge_family(family)

    def _erase_conversations(
        self, admin: Principal, subject_id: str, state: dict[str, Any], deadline: float | None
    ) -> bool:
        """Delete every chat session the patient began (its runs, its grounding, its header) and any flow of it the
        flows phase did not meet (a turn recorded without the patient); False when the deadline came first."""
        runs = self._s.aws.table_name("runs")
        request = {
            "TableName": runs,
            "IndexName": "by_subject",
            "KeyConditionExpression": "session_subject = :s",
            "ExpressionAttributeValues": {":s": {"S": subject_id}},
            "ProjectionExpression": "session_id",
        }
        for session_id in [item["session_id"]["S"] for item in query_items(self._db, request)]:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self.erase_session(admin, subject_id, session_id, {"erasure": state["erasure_id"]}, tally=True)
        return True

    def erase_session(
        self, actor: Principal, subject_id: str, session_id: str, refs: dict[str, str], *, tally: bool
    ) -> tuple[int, int]:
        """Delete a chat session, its runs, grounding and header, and its turns' flows: (sessions, items) deleted."""
        runs = self._s.aws.table_name("runs")
        for flow_id in self._trace_flows(session_id):
            self.erase_flow(actor, subject_id, flow_id, refs, tally=tally)
        keys = [
            {"session_id": item["session_id"], "run_id": item["run_id"]}
            for item in query_items(
                self._db,
                {
                    "TableName": runs,
                    "KeyConditionExpression": "session_id = :s",
                    "ExpressionAttributeValues": {":s": {"S": session_id}},
                    "ProjectionExpression": "session_id, run_id",
                    "ConsistentRead": True,
                },
            )
        ]
        # The header last: while it stands, the index still finds the session for a retry.
        headers = [k for k in keys if k["run_id"]["S"] == SESSION_HEADER]
        batch_delete(self._db, runs, [k for k in keys if k["run_id"]["S"] != SESSION_HEADER])
        batch_delete(self._db, runs, headers)
        if tally:
            self._add(subject_id, {"sessions": len(headers), "session_items": len(keys)})
        self._after("session")
        return len(headers), len(keys)

    def _erase_uploads(self, subject_id: str, deadline: float | None) -> bool:
        """Erase every document the patient uploaded, each version of each body; False when the deadline came first.

        Read back from the eventually consistent by_subject index until a pass finds none left to erase.
        """
        for _ in range(MAX_FLOW_PASSES):
            erased_now = 0
            for document_id in subject_documents(self._s, subject_id):
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                erased = erase_document(self._s, document_id)
                if erased.items:
                    erased_now += 1
                    counts = {"documents": 1, "document_items": erased.items}
                    self._add(subject_id, counts | {"objects": erased.objects, "chunks": erased.chunks})
                self._after("document")
            if erased_now == 0:
                return True
        return True

    def _trace_flows(self, trace_id: str) -> list[str]:
        request = {
            "TableName": self._s.aws.table_name("flows"),
            "IndexName": "by_trace",
            "KeyConditionExpression": "trace_id = :t",
            "ExpressionAttributeValues": {":t": {"S": trace_id}},
            "ProjectionExpression": "flow_id",
        }
        return [item["flow_id"]["S"] for item in query_items(self._db, request)]

    def _keys_of(self, logical: str, flow_id: str, sort: str) -> list[dict[str, Any]]:
        request = {
            "TableName": self._s.aws.table_name(logical),
            "KeyConditionExpression": "flow_id = :f",
            "ExpressionAttributeValues": {":f": {"S": flow_id}},
            "ProjectionExpression": f"flow_id, {sort}",
            "ConsistentRead": True,
        }
        return [{"flow_id": item["flow_id"], sort: item[sort]} for item in query_items(self._db, request)]

    def _erase_consents(self, patient_id: str, subject_id: str, state: dict[str, Any]) -> None:
        table = self._s.aws.table_name
        consent = self._db.get_item(
            TableName=table("consents"), Key={"patient_id": {"S": patient_id}}, ConsistentRead=True
        ).get("Item")
        limits: list[dict[str, Any]] = []
        for prefix in RATE_LIMIT_KEYS:
            request = {
                "TableName": table("rate_limits"),
                "KeyConditionExpression": "#k = :k",
                "ExpressionAttributeNames": {"#k": "key", "#w": "window"},
                "ExpressionAttributeValues": {":k": {"S": f"{prefix}:{patient_id}"}},
                "ProjectionExpression": "#k, #w",
                "ConsistentRead": True,
            }
            limits += [{"key": i["key"], "window": i["window"]} for i in query_items(self._db, request)]
        batch_delete(self._db, table("rate_limits"), limits)
        adds = {"consents": int(consent is not None), "rate_limits": len(limits)}
        self._db.transact_write_items(
            TransactItems=[
                {"Delete": {"TableName": table("consents"), "Key": {"patient_id": {"S": patient_id}}}},
                self._move(subject_id, "consents", "receipt", adds=adds),
            ]
        )
        self._after("consents")

    def _write_receipt(self, admin: Principal, subject_id: str) -> None:
        state = self._state(subject_id)
        assert state is not None
        now = self._s.clock()
        completed, final_after = timestamp(now), timestamp(now + timedelta(days=BACKUP_WINDOW_DAYS))
        flows_sha256 = _lanes_digest([int(state[f"lane_{n}"]) for n in range(DIGEST_LANES)])
        counts = {name: int(state[f"count_{name}"]) for name in COUNTED}
        event = self._s.ledger.append(
            AuditEntry(
                action="admin.subject.erased",
                actor=admin.actor,
                subject=f"subject:{subject_id}",
                refs={"erasure": state["erasure_id"]},
                payload={
                    **counts,
                    "key_sha256": state.get("key_sha256", "none"),
                    "flows_sha256": flows_sha256,
                    "final_after": final_after,
                    "backup_window_days": BACKUP_WINDOW_DAYS,
                },
            ),
            [
                self._move(
                    subject_id,
                    "receipt",
                    "completed",
                    {"completed_at": completed, "final_after": final_after, "flows_sha256": flows_sha256},
                    remove_state=True,
                )
            ],
        )
        self._db.update_item(
            TableName=self._subjects,
            Key=subject_key(subject_id, ERASURE_ITEM),
            UpdateExpression="SET receipt_event = :e",
            ExpressionAttributeValues={":e": {"S": f"{event.chain_id}/{event.seq}"}},
        )
        self._after("receipt")

    # ---- the state item ----------------------------------------------------------------------

    def _move(
        self,
        subject_id: str,
        phase: Phase,
        to: Phase,
        sets: dict[str, str] | None = None,
        adds: dict[str, int] | None = None,
        remove_state: bool = False,
    ) -> dict[str, Any]:
        """The ``#erasure`` update that moves it from ``phase`` to ``to``; it fails if another run moved it first."""
        values: dict[str, Any] = {":from": {"S": phase}, ":to": {"S": to}}
        expression = "SET phase = :to"
        for n, (name, value) in enumerate((sets or {}).items()):
            expression += f", {name} = :s{n}"
            values[f":s{n}"] = {"S": value}
        if adds:
            expression += " ADD " + ", ".join(f"count_{name} :a{n}" for n, name in enumerate(adds))
            values |= {f":a{n}": {"N": str(value)} for n, value in enumerate(adds.values())}
        if remove_state:
            expression += " REMOVE erasure_state, patient_id"
        return {
            "Update": {
                "TableName": self._subjects,
                "Key": subject_key(subject_id, ERASURE_ITEM),
                "UpdateExpression": expression,
                "ConditionExpression": "phase = :from",
                "ExpressionAttributeValues": values,
            }
        }

    def _advance(self, admin: Principal, subject_id: str, state: dict[str, Any], phase: Phase, to: Phase) -> None:
        """End ``phase`` in one audited write (``admin.subject.{phase}_erased``) with what it found gone."""
        # A concurrent run of this erasure may have moved it on first.
        with contextlib.suppress(ConditionFailed):
            self._s.ledger.append(
                AuditEntry(
                    action=f"admin.subject.{phase}_erased",
                    actor=admin.actor,
                    subject=f"subject:{subject_id}",
                    refs={"erasure": state["erasure_id"]},
                    payload={name: int(value) for name, value in self._counts(subject_id).items()},
                ),
                [self._move(subject_id, phase, to)],
            )
        self._after(phase)

    def _counts(self, subject_id: str) -> dict[str, int]:
        state = self._state(subject_id) or {}
        return {name: int(state.get(f"count_{name}", 0)) for name in COUNTED}

    def _add(self, subject_id: str, counts: dict[str, int]) -> None:
        """Count what was just deleted (after it was: a crash between the two leaves a count short, never long)."""
        self._db.update_item(
            TableName=self._subjects,
            Key=subject_key(subject_id, ERASURE_ITEM),
            UpdateExpression="ADD " + ", ".join(f"count_{name} :n{n}" for n, name in enumerate(counts)),
            ExpressionAttributeValues={f":n{n}": {"N": str(value)} for n, value in enumerate(counts.values())},
        )

    def _state(self, subject_id: str) -> dict[str, Any] | None:
        """The ``#erasure`` item, its counts and digest lanes summed with its counter shards' (one query)."""
        request = {
            "TableName": self._subjects,
            "KeyConditionExpression": "subject_id = :s AND begins_with(sk, :e)",
            "ExpressionAttributeValues": {":s": {"S": subject_id}, ":e": {"S": ERASURE_ITEM}},
            "ConsistentRead": True,
        }
        found = [items.from_item(item) for item in query_items(self._db, request)]
        state = next((item for item in found if item["sk"] == ERASURE_ITEM), None)
        if state is None:
            return None
        for shard in found:
            if shard is not state:
                for name, value in shard.items():
                    if name.startswith(("count_", "lane_")):
                        state[name] = int(state.get(name, 0)) + int(value)
        return state

    def _item(self, subject_id: str, sk: str) -> dict[str, Any] | None:
        response = self._db.get_item(TableName=self._subjects, Key=subject_key(subject_id, sk), ConsistentRead=True)
        item: dict[str, Any] | None = response.get("Item")
        return item

    def _view(self, state: dict[str, Any] | None) -> ErasureView:
        if state is None:
            raise NotFound("no erasure of this subject")
        return ErasureView(
            subject_id=state["subject_id"],
            erasure_id=state["erasure_id"],
            reason=state["reason"],
            requested_by=state["requested_by"],
            started_at=state["started_at"],
            phase=state["phase"],
            completed_at=state.get("completed_at"),
            final_after=state.get("final_after"),
            counts={name: int(state.get(f"count_{name}", 0)) for name in COUNTED},
            key_sha256=state.get("key_sha256"),
            flows_sha256=state.get("flows_sha256"),
            receipt_event=state.get("receipt_event"),
        )


def _lanes(flow_id: str) -> list[int]:
    digest = int.from_bytes(hashlib.sha256(flow_id.encode()).digest(), "big")
    mask = (1 << LANE_BITS) - 1
    return [(digest >> (LANE_BITS * n)) & mask for n in range(DIGEST_LANES)]


def _lanes_digest(lanes: list[int]) -> str:
    """The erased flows' digest: SHA-256 over the lane sums (the same set of flows gives the same digest)."""
    return hashlib.sha256(("flows:" + ",".join(str(lane) for lane in lanes)).encode()).hexdigest()


RESUME_JOB = "subject_erasure_resume"
RESUME_BUDGET_SECONDS = 600.0  # of the jobs function's 15 minutes: the rest is left for the next run


def resume_erasures_job(services: Services) -> dict[str, Any]:
    """Every few minutes: go on with each erasure left running (a request that answered 202 and was not sent
    again, a crash), as ``system:subject_erasure_resume``, until done or out of time."""
    deadline = time.monotonic() + RESUME_BUDGET_SECONDS
    request = {
        "TableName": services.subject_keys.table,
        "IndexName": "by_state",
        "KeyConditionExpression": "erasure_state = :r",
        "ExpressionAttributeValues": {":r": {"S": "running"}},
        "ProjectionExpression": "patient_id, reason",
    }
    actor = Principal(kind="iam", id=f"system:{RESUME_JOB}")
    done = running = 0
    for item in query_items(services.aws.dynamodb, request):
        if time.monotonic() >= deadline:
            running += 1
            continue
        view = SubjectErasure(services).erase(actor, item["patient_id"]["S"], item["reason"]["S"], deadline)
        done, running = (done + 1, running) if view.phase == "completed" else (done, running + 1)
    return {"completed": done, "still_running": running}
