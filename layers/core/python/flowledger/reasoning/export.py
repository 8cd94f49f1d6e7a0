"""Closed flows of a time window as dataset records (``flowledger flows export``, ``flows otel-export``).

The window is read through the sparse ``by_closed`` index of the flows table: closed flows carry
``closed_shard`` ("0".."15") and ``closed_at``, so the window is 16 key-range queries, never a scan. Each
shard's query is paged lazily and the 16 are merged by ``(closed_at, flow_id)`` with ``heapq.merge``, so
memory holds one page per shard whatever the window's size. The index projects what a record needs of the
flow (no ``trigger_summary``, no ``patient_id``), so no flow item is read; each flow's steps are one Query
whose projection leaves out ``inputs`` and ``outputs``. A few flows' step queries run ahead in threads
(:data:`LOOKAHEAD`); records still come out in merge order.

Flows closed before ``closed_shard`` was written at close are not in the index and are not exported. A flow
erased with its patient (``subjects/erasure.py``) leaves a tombstone in the index: it yields no record and is
counted in ``erased``, which the export's summary names.

The record is :class:`~flowledger.reasoning.dataset.FlowRecord`: every record yielded has validated as one.
A summary the guard flags is hidden (the placeholder) rather than dropped; an item that cannot be read as a
record is logged by its ids, counted in ``skipped`` and passed over.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, get_args

from flowledger.errors import InvalidInput
from flowledger.reasoning.dataset import HIDDEN_SUMMARY, MAX_RECORDS, FlowRecord
from flowledger.reasoning.guard import check_summary
from flowledger.reasoning.models import Outcome
from flowledger.reasoning.service import ACTIVE_SHARDS
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.decoding import Skips, key_of, undecodable
from flowledger.store.paging import query_items
from flowledger.subjects import ERASED_STATE

CLOSED_INDEX = "by_closed"
CLOSED_SHARDS = ACTIVE_SHARDS  # FlowService._close writes closed_shard with the active shard's rule
FLOW_STATES = ("completed", "aborted")
OUTCOME_TYPES: tuple[str, ...] = get_args(Outcome.model_fields["type"].annotation)
OUTCOME_FILTERS = (*FLOW_STATES, *OUTCOME_TYPES)
INDEX_PAGE = 200  # items per index page: 16 pages in memory at most, a few hundred KB
LOOKAHEAD = 4  # flows whose step queries are in flight at once
# Attributes of a step the record reads; inputs, outputs and pii_fields are never fetched.
TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")  # dataset.ToolName
STEP_ATTRIBUTES = (
    "step_id",
    "step_kind",
    "agent",
    "summary_text",
    "confidence",
    "latency_ms",
    "parent_step_ids",
    "back_refs",
    "created_at",
)
BACK_REFS = ("llm_call_log_ref", "experiment_trace_ref", "decision_graph_node_ref", "memory_claim_ref")


@dataclass(frozen=True)
class ExportWindow:
    """Which closed flows to export.

    ``since`` (inclusive) and ``until`` (exclusive) bound ``closed_at``, as the ledger writes timestamps
    (``2026-01-01T00:00:00.000000Z``); ``outcome`` is a flow state (completed, aborted) or an outcome type;
    ``min_confidence`` keeps flows whose ``aggregate_confidence`` (the lowest across steps and outcome) is
    at least it, so a flow with no confidence at all is left out; ``limit`` caps the records.
    """

    since: str | None = None
    until: str | None = None
    outcome: str | None = None
    min_confidence: float | None = None
    limit: int = MAX_RECORDS

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and not self.since < self.until:
            raise InvalidInput(f"since ({self.since}) must be before until ({self.until})")
        if self.outcome is not None and self.outcome not in OUTCOME_FILTERS:
            raise InvalidInput(f"outcome {self.outcome!r} is not one of {', '.join(OUTCOME_FILTERS)}")
        if self.min_confidence is not None and not 0.0 <= self.min_confidence <= 1.0:  # also refuses nan
            raise InvalidInput(f"min_confidence {self.min_confidence} is not between 0 and 1")
        if not 1 <= self.limit <= MAX_RECORDS:
            raise InvalidInput(f"limit {self.limit} is not between 1 and {MAX_RECORDS:,}")

    def admits_flow(self, flow: dict[str, Any]) -> bool:
        """Whether an indexed flow can be in the export, judged before its steps are read."""
        closed_at = flow.get("closed_at", "")
        if self.until is not None and closed_at >= self.until:
            return False  # BETWEEN includes its upper bound; until does not
        if self.outcome is not None:
            outcome = flow.get("outcome") or {}
            if self.outcome not in (flow.get("flow_state"), outcome.get("type")):
                return False
        if self.min_confidence is not None:
            confidence = (flow.get("outcome") or {}).get("confidence")
            # The aggregate is at most the outcome's confidence: a low one rules the flow out unread.
            if confidence is not None and confidence < self.min_confidence:
                return False
        return True

    def admits_record(self, record: FlowRecord) -> bool:
        """Whether a built record meets ``min_confidence`` (the only rule that needs the steps)."""
        if self.min_confidence is None:
            return True
        aggregate = record.flow.aggregate_confidence
        return aggregate is not None and aggregate >= self.min_confidence


class ClosedFlowReader:
    """One pass over a window's closed flows; ``skipped`` counts the items that could not be records."""

    def __init__(self, services: Services, window: ExportWindow, lookahead: int = LOOKAHEAD) -> None:
        self._db = services.aws.dynamodb
        self._flows = services.aws.table_name("flows")
        self._steps = services.aws.table_name("steps")
        self._window = window
        self._lookahead = max(1, lookahead)
        self._skips = Skips("flow_export")
        self.read = 0  # index items read
        self.erased = 0  # tombstones of flows erased with their patient: no record, counted and named
        self.limit_reached = False

    @property
    def skipped(self) -> int:
        return self._skips.count

    def records(self) -> Iterator[FlowRecord]:
        """The window's records in ``(closed_at, flow_id)`` order, at most ``limit`` of them.

        ``limit_reached`` is true afterwards when the limit stopped the export with flows left unread.
        """
        flows = self._admitted_flows()
        written = 0
        pending: deque[tuple[dict[str, Any], Future[list[dict[str, Any]]]]] = deque()
        executor = ThreadPoolExecutor(max_workers=self._lookahead, thread_name_prefix="flow-export")
        try:
            while True:
                # Keep LOOKAHEAD step queries in flight; settle the oldest, so the order is the merge's.
                while len(pending) < self._lookahead:
                    flow = next(flows, None)
                    if flow is None:
                        break
                    pending.append((flow, executor.submit(self._step_items, flow)))
                if not pending:
                    return
                record = self._settle(*pending.popleft())
                if record is None:
                    continue
                yield record
                written += 1
                if written == self._window.limit:
                    self.limit_reached = bool(pending) or next(flows, None) is not None
                    return
        finally:
            executor.shutdown(wait=True, cancel_futures=True)

    # ---- reading -------------------------------------------------------------------------------

    def _admitted_flows(self) -> Iterator[dict[str, Any]]:
        merged = heapq.merge(*(self._shard(str(s)) for s in range(CLOSED_SHARDS)), key=_order)
        for item in merged:
            self.read += 1
            if item.get("flow_state", {}).get("S") == ERASED_STATE:
                self.erased += 1  # its tombstone keeps closed_at, so the window meets it; it has nothing to export
                continue
            flow = self._flow_values(item)
            if flow is not None and self._window.admits_flow(flow):
                yield flow

    def _shard(self, shard: str) -> Iterator[dict[str, Any]]:
        since, until = self._window.since, self._window.until
        condition = "closed_shard = :shard"
        values: dict[str, Any] = {":shard": {"S": shard}}
        if since is not None and until is not None:
            condition += " AND closed_at BETWEEN :since AND :until"
        elif since is not None:
            condition += " AND closed_at >= :since"
        elif until is not None:
            condition += " AND closed_at < :until"
        if since is not None:
            values[":since"] = {"S": since}
        if until is not None:
            values[":until"] = {"S": until}
        request = {
            "TableName": self._flows,
            "IndexName": CLOSED_INDEX,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "Limit": INDEX_PAGE,
        }
        return query_items(self._db, request)

    def _flow_values(self, item: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return items.from_item(item)
        except (KeyError, TypeError, ValueError, AttributeError, StopIteration) as exc:
            flow_id = key_of(item, "flow_id")
            self._skips.note(undecodable(f"flow {flow_id}", flow_id, exc))
            return None

    def _step_items(self, flow: dict[str, Any]) -> list[dict[str, Any]]:
        if flow.get("step_count") == 0:
            return []
        names = {f"#a{i}": name for i, name in enumerate(STEP_ATTRIBUTES)}
        # and of the inputs only the tool's name, where a step keeps it (inputs.tool; inputs.otel.tool of an
        # ingested span): never a content
        tool_paths = "#in.#tool, #in.#otel.#tool"
        request = {
            "TableName": self._steps,
            "KeyConditionExpression": "#a_flow = :f",
            "ExpressionAttributeNames": {
                **names,
                "#a_flow": "flow_id",
                "#in": "inputs",
                "#tool": "tool",
                "#otel": "otel",
            },
            "ExpressionAttributeValues": {":f": {"S": flow["flow_id"]}},
            "ProjectionExpression": ", ".join([*names, tool_paths]),
            # The close was seen through the index; the steps it counted were written before it.
            "ConsistentRead": True,
        }
        return list(query_items(self._db, request))

    def _settle(self, flow: dict[str, Any], future: Future[list[dict[str, Any]]]) -> FlowRecord | None:
        flow_id = str(flow.get("flow_id", "?"))
        try:
            steps = [items.from_item(item) for item in future.result()]
            record = record_of(flow, steps)
        except (KeyError, TypeError, ValueError, AttributeError, StopIteration) as exc:
            self._skips.note(undecodable(f"flow {flow_id} or its steps", flow_id, exc))
            return None
        return record if self._window.admits_record(record) else None


def closed_flow_records(services: Services, window: ExportWindow) -> Iterator[FlowRecord]:
    """The window's closed flows as records, oldest close first (see the module docstring)."""
    return ClosedFlowReader(services, window).records()


# ---- the record --------------------------------------------------------------------------------


def visible(summary: str) -> tuple[str, bool]:
    """A summary as the record shows it, and whether it is hidden: verbatim unless the guard flags it."""
    return (summary, False) if check_summary(summary).safe else (HIDDEN_SUMMARY, True)


def tool_of(step: dict[str, Any]) -> str | None:
    """The tool a step names in the clear (``inputs.tool``, or an ingested span's ``inputs.otel.tool``), else None.
    A sealed value is a map, and a name that is not an identifier is not taken: neither is ever exported."""
    inputs = step.get("inputs") or {}
    facts = inputs.get("otel")
    facts = facts if isinstance(facts, dict) else {}
    for value in (inputs.get("tool"), facts.get("tool")):
        if isinstance(value, str) and TOOL_NAME.match(value):
            return value
    return None


def record_of(flow: dict[str, Any], steps: list[dict[str, Any]]) -> FlowRecord:
    """The dataset record of a closed flow (index values) and its projected steps (any order).

    Raises ``ValidationError`` (a ``ValueError``) when the stored values do not make a record.
    """
    ordered = sorted(steps, key=lambda s: (s["created_at"], s["step_id"]))
    record_steps = []
    confidences: list[float] = []
    agents: dict[str, None] = {}
    for step in ordered:
        text, hidden = visible(step["summary_text"])
        confidence = _confidence(step.get("confidence"))
        if confidence is not None:
            confidences.append(confidence)
        agents.setdefault(step["agent"], None)
        refs = step.get("back_refs") or {}
        record_steps.append(
            {
                "step_id": step["step_id"],
                "step_kind": step["step_kind"],
                "agent": step["agent"],
                "summary_text": text,
                "summary_hidden": hidden,
                "confidence": confidence,
                "latency_ms": step.get("latency_ms"),
                "parent_step_ids": list(step.get("parent_step_ids") or []),
                "back_refs": {name: bool(refs.get(name)) for name in BACK_REFS},
                "tool": tool_of(step),
            }
        )
    outcome = flow.get("outcome")
    if outcome is not None:
        outcome_confidence = _confidence(outcome.get("confidence"))
        if outcome_confidence is not None:
            confidences.append(outcome_confidence)
        outcome = {
            "type": outcome["type"],
            "summary": visible(outcome["summary"])[0],
            **({"confidence": outcome_confidence} if outcome_confidence is not None else {}),
        }
    values = {
        "flow": {
            "flow_id": flow["flow_id"],
            "trigger_type": flow["trigger_type"],
            "trigger_ref": flow["trigger_ref"],
            "trace_id": flow.get("trace_id"),
            "flow_state": flow["flow_state"],
            "created_at": flow["created_at"],
            "closed_at": flow["closed_at"],
            "outcome": outcome,
            "abort_reason": flow.get("abort_reason"),
            "patient_safe_summary": bool(flow.get("patient_safe_summary")),
            "step_count": len(record_steps),
            "agents": list(agents),
            "aggregate_confidence": min(confidences, default=None),
        },
        "steps": record_steps,
    }
    if flow.get("step_count") != len(record_steps):
        raise ValueError(f"the flow counts {flow.get('step_count')} steps but {len(record_steps)} were read")
    return FlowRecord.model_validate(values)


def _confidence(value: Any) -> float | None:
    # On AWS a float with an integral value comes back an int (1.0 as 1); the record's confidence is a float.
    return None if value is None else float(value)


def _order(item: dict[str, Any]) -> tuple[str, str]:
    return item["closed_at"]["S"], item["flow_id"]["S"]
