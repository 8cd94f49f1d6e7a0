"""Flows lists, newest first, a page at a time, from indexes only (a Query, never a Scan).

Operators list every flow (``by_listing``: one partition per year of ``created_at``) or one patient's
(``by_patient``), filtered by state, trigger type, outcome type, agent and a ``created_at`` window.
The window narrows the key condition; the other filters are a FilterExpression on what the index
projects, and what it does not project is checked on the flow items read for the page. A query's
``Limit`` counts the items it reads, not those that pass, so a filtered page can come back short, even
empty, and still carry a cursor: the list goes on past it.

Patients list their own flows (``by_patient``), consent-gated, rate-limited and audited as the
narrative read is, showing no more than the narrative would.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, time
from typing import Any, Literal

from pydantic import BaseModel, Field

from flowledger.errors import Forbidden, InvalidInput
from flowledger.identity import Principal
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.reasoning.models import FlowPage, FlowView
from flowledger.reasoning.service import (
    NARRATIVE_READS_PER_WINDOW,
    NARRATIVE_WINDOW_SECONDS,
    ConsentRequired,
    FlowService,
)
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.decoding import Skips, decoded, key_of
from flowledger.store.paging import query_items, scan_items
from flowledger.store.ratelimit import hit_rate_limit
from flowledger.subjects import ERASED_AT

# No flow before this year carries listing_year (the index came with the list): the walk stops here
# unless the window's start is older.
FIRST_LISTED_YEAR = 2026
# Index partitions one page may read before it answers (short, with a cursor) rather than walk on.
QUERIES_PER_PAGE = 8
CURSOR_ERROR = "cursor is not one this API returned for these filters"

FlowState = Literal["active", "completed", "aborted"]


@dataclass(frozen=True)
class FlowFilters:
    """What an operator's flows list is narrowed to; None is no filter."""

    state: str | None = None
    trigger_type: str | None = None
    outcome: str | None = None
    agent: str | None = None
    patient_id: str | None = None
    created_from: str | None = None
    created_to: str | None = None

    def digest(self) -> str:
        """A short fingerprint a cursor carries, so it resumes only the listing it came from."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def window_bound(value: str | None, *, end: bool) -> str | None:
    """A ``from``/``to`` value as a stored ``created_at``: a date (a ``to`` date takes in its whole day)
    or an ISO date-time with a zone; InvalidInput (422) for anything else."""
    if value is None:
        return None
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return timestamp(datetime.combine(day, time.max if end else time.min, tzinfo=UTC))
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{'to' if end else 'from'} is not a date (2026-12-01) or an ISO date-time") from None
    if moment.tzinfo is None:
        raise InvalidInput(f"{'to' if end else 'from'} needs a time zone (2026-12-01T09:30:00Z)")
    return timestamp(moment)


class PatientFlow(BaseModel):
    """One of the patient's flows, with what their narrative may show."""

    flow_id: str
    state: FlowState
    explained: bool = Field(description="the explanation can be read (closed, and its summaries passed the guard)")
    trigger_summary: str | None = Field(description="what it was about; only when explained")
    started_at: str
    closed_at: str | None = None


class PatientFlowPage(BaseModel):
    flows: list[PatientFlow]
    next_cursor: str | None


@dataclass(frozen=True)
class _Source:
    """One index a listing reads, the partitions it walks and the filters it can apply itself."""

    index: str
    partition: str  # the index's partition key attribute
    values: tuple[str, ...]  # partition values, newest first
    filters_in_index: frozenset[str]  # filter names the index projects (a FilterExpression)


class FlowListing:
    """Flows lists over one ``Services``."""

    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._flows = services.aws.table_name("flows")

    # ---- operators ---------------------------------------------------------------------------

    def list_flows(self, filters: FlowFilters, limit: int, cursor: str | None) -> FlowPage:
        """Flows newest first, narrowed by ``filters``; a page may be short and still have a cursor.

        Not audited, as the trace search is not: a listing opens no sealed field.
        """
        if filters.created_from and filters.created_to and filters.created_from > filters.created_to:
            raise InvalidInput("from is after to")
        source = self._source(filters)
        found, next_cursor = self._walk(source, filters, limit, cursor, filters.digest())
        flows = [flow.view for flow in self._read_flows(found) if flow.matches(filters)]
        return FlowPage(flows=flows, next_cursor=next_cursor)

    def _source(self, filters: FlowFilters) -> _Source:
        if filters.patient_id:
            # by_patient projects trigger_type and flow_state, not outcome nor agents.
            return _Source("by_patient", "patient_id", (filters.patient_id,), frozenset({"state", "trigger_type"}))
        newest = int((filters.created_to or timestamp(self._s.clock()))[:4])
        oldest = int(filters.created_from[:4]) if filters.created_from else min(FIRST_LISTED_YEAR, newest)
        years = tuple(str(year) for year in range(newest, oldest - 1, -1))
        return _Source("by_listing", "listing_year", years, frozenset({"state", "trigger_type", "outcome", "agent"}))

    # ---- patients ----------------------------------------------------------------------------

    def patient_flows(self, principal: Principal, limit: int, cursor: str | None) -> PatientFlowPage:
        """The caller's own flows, newest first (``patient.reasoning.flows.listed``).

        The narrative's rules hold: a patient's token only, the same rate, opted in; what the list
        shows of a flow is what its narrative would (what it was about only once closed with
        summaries that passed the guard).
        """
        patient_id = principal.patient_id
        if not patient_id:
            raise Forbidden("only a patient's token can list reasoning flows")
        # Before the rate limit, whose counter names the patient: nothing of an erased patient is written again.
        self._s.subject_keys.require_live_patient(patient_id)
        hit_rate_limit(self._s, f"flow_list:{patient_id}", NARRATIVE_READS_PER_WINDOW, NARRATIVE_WINDOW_SECONDS)
        if not FlowService(self._s).read_consent(principal).reasoning_read:
            raise ConsentRequired("opt in to reading your reasoning flows first (PUT /api/reasoning/consent)")
        source = _Source("by_patient", "patient_id", (patient_id,), frozenset())
        found, next_cursor = self._walk(source, FlowFilters(patient_id=patient_id), limit, cursor, "patient")
        flows = [flow.for_patient() for flow in self._read_flows(found)]
        self._s.ledger.append(
            AuditEntry(
                action="patient.reasoning.flows.listed",
                actor=principal.actor,
                subject=f"patient:{self._s.subject_keys.pseudonym(patient_id)}",
                payload={"flows": len(flows), "first_page": cursor is None},
            )
        )
        return PatientFlowPage(flows=flows, next_cursor=next_cursor)

    # ---- the walk ----------------------------------------------------------------------------

    def _walk(
        self, source: _Source, filters: FlowFilters, limit: int, cursor: str | None, digest: str
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Up to ``limit`` index items, newest first, and the cursor after them (None at the end).

        Each query reads at most what the page still has room for, so the position after the last item
        read is exactly where the next page starts, however many the filter let through.
        """
        # partition: the position in source.values; start: the key after which to read in it
        partition, start = self._resume(cursor, source, digest) if cursor else (0, None)
        found: list[dict[str, Any]] = []
        if not source.values:  # a window wholly before the first listed year
            return found, None
        for _ in range(QUERIES_PER_PAGE):
            request = self._query(source, filters, source.values[partition], limit - len(found))
            if start:
                request["ExclusiveStartKey"] = start
            response = self._db.query(**request)
            found += response.get("Items", [])
            start = response.get("LastEvaluatedKey")
            if not start:
                partition += 1
                if partition == len(source.values):
                    return found, None
            if len(found) >= limit:
                break
        position = {"v": 1, "f": digest, "p": source.values[partition], "k": items.from_item(start) if start else None}
        return found, encode_cursor(position)

    def _query(self, source: _Source, filters: FlowFilters, value: str, limit: int) -> dict[str, Any]:
        names = {"#p": source.partition}
        values: dict[str, Any] = {":p": {"S": value}}
        key = "#p = :p"
        if filters.created_from and filters.created_to:
            key += " AND created_at BETWEEN :from AND :to"
        elif filters.created_from:
            key += " AND created_at >= :from"
        elif filters.created_to:
            key += " AND created_at <= :to"
        for name, bound in (("from", filters.created_from), ("to", filters.created_to)):
            if bound:
                values[f":{name}"] = {"S": bound}
        conditions = []
        for name, path, operator in _FILTERS:
            wanted = getattr(filters, name)
            if wanted is None or name not in source.filters_in_index:
                continue
            for part in path.split("."):
                names[f"#{part}"] = part
            attribute = ".".join(f"#{part}" for part in path.split("."))
            values[f":{name}"] = {"S": wanted}
            conditions.append(f"contains({attribute}, :{name})" if operator == "contains" else f"{attribute} = :{name}")
        request: dict[str, Any] = {
            "TableName": self._flows,
            "IndexName": source.index,
            "KeyConditionExpression": key,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if conditions:
            request["FilterExpression"] = " AND ".join(conditions)
        return request

    def _resume(self, cursor: str, source: _Source, digest: str) -> tuple[int, dict[str, Any] | None]:
        """Where a cursor resumes: a partition of ``source`` and the key after which to read (422 otherwise)."""
        position = decode_cursor(cursor)
        if (
            not isinstance(position, dict)
            or set(position) != {"v", "f", "p", "k"}
            or position["v"] != 1
            or position["f"] != digest
            or position["p"] not in source.values
        ):
            raise InvalidInput(CURSOR_ERROR)
        key = position["k"]
        if key is None:
            return source.values.index(position["p"]), None
        if (
            not isinstance(key, dict)
            or set(key) != {"flow_id", "created_at", source.partition}
            or not all(isinstance(v, str) for v in key.values())
            or key[source.partition] != position["p"]
        ):
            raise InvalidInput(CURSOR_ERROR)
        return source.values.index(position["p"]), items.to_item(key)

    def _read_flows(self, found: list[dict[str, Any]]) -> list[_Listed]:
        """The page's flows in index order, read whole (the index leaves step counts out); an item that
        cannot be decoded is logged by id and left out."""
        ids = list(dict.fromkeys(key_of(item, "flow_id") for item in found))
        stored: dict[str, dict[str, Any]] = {}
        pending: dict[str, Any] = (
            {self._flows: {"Keys": [{"flow_id": {"S": flow_id}} for flow_id in ids]}} if ids else {}
        )
        while pending:  # a page is at most 100 flows: one BatchGetItem, and its unprocessed keys again
            response = self._db.batch_get_item(RequestItems=pending)
            for item in response.get("Responses", {}).get(self._flows, []):
                stored[key_of(item, "flow_id")] = item
            pending = response.get("UnprocessedKeys") or {}
        # An erased flow's tombstone may linger in an index a moment after erasure: it is not listed.
        present = [stored[flow_id] for flow_id in ids if flow_id in stored and ERASED_AT not in stored[flow_id]]
        return list(Skips("flows_list").readable(present, _flow))


def stamp_unlisted_flows(services: Services) -> dict[str, int]:
    """Once, after an upgrade: give each flow written before the list its ``listing_year`` and ``agents``.

    Flows from before the list carry neither, so ``by_listing`` (filled by DynamoDB from what items
    hold) leaves them out and the agent filter cannot find them. This reads the flows table once (the
    one Scan here: a migration, never a listing) and each such flow's steps (their agents only), and
    sets both with a condition, so a re-run or a flow written meanwhile is left as it is. Nothing but
    ids and counts is logged or returned.
    """
    db = services.aws.dynamodb
    flows, steps = services.aws.table_name("flows"), services.aws.table_name("steps")
    stamped = 0
    request: dict[str, Any] = {
        "TableName": flows,
        "FilterExpression": "attribute_not_exists(listing_year)",
        "ProjectionExpression": "flow_id, created_at",
    }
    for item in scan_items(db, request):
        flow_id, created_at = key_of(item, "flow_id"), item.get("created_at", {}).get("S", "")
        if len(created_at) < 4:
            continue  # not a readable flow: the undecodable-items repair names it elsewhere
        agents = {
            step["agent"]["S"]
            for step in query_items(
                db,
                {
                    "TableName": steps,
                    "KeyConditionExpression": "flow_id = :f",
                    "ExpressionAttributeValues": {":f": {"S": flow_id}},
                    "ProjectionExpression": "#agent",
                    "ExpressionAttributeNames": {"#agent": "agent"},  # a reserved word
                },
            )
            if "S" in step.get("agent", {})
        }
        update = "SET listing_year = :y" + (" ADD agents :a" if agents else "")
        values: dict[str, Any] = {":y": {"S": created_at[:4]}}
        if agents:
            values[":a"] = {"SS": sorted(agents)}
        try:
            db.update_item(
                TableName=flows,
                Key={"flow_id": {"S": flow_id}},
                UpdateExpression=update,
                ConditionExpression="attribute_exists(flow_id) AND attribute_not_exists(listing_year)",
                ExpressionAttributeValues=values,
            )
        except db.exceptions.ConditionalCheckFailedException:
            continue
        stamped += 1
    return {"stamped": stamped}


# name on FlowFilters, attribute path on the flow item, how it compares
_FILTERS = (
    ("state", "flow_state", "="),
    ("trigger_type", "trigger_type", "="),
    ("outcome", "outcome.type", "="),
    ("agent", "agents", "contains"),
)


@dataclass(frozen=True)
class _Listed:
    """A flow read for a page: its view (with the agents that recorded its steps)."""

    view: FlowView

    def matches(self, filters: FlowFilters) -> bool:
        """The filters, on the whole flow: those the index could not apply, and any it saw go stale."""
        view = self.view
        return (
            (filters.state is None or view.flow_state == filters.state)
            and (filters.trigger_type is None or view.trigger_type == filters.trigger_type)
            and (filters.outcome is None or (view.outcome is not None and view.outcome.type == filters.outcome))
            and (filters.agent is None or filters.agent in view.agents)
        )

    def for_patient(self) -> PatientFlow:
        """What the patient's list shows: what it was about only where the narrative would show it."""
        view = self.view
        explained = view.flow_state != "active" and bool(view.patient_safe_summary)
        return PatientFlow(
            flow_id=view.flow_id,
            state=view.flow_state,
            explained=explained,
            trigger_summary=view.trigger_summary if explained else None,
            started_at=view.created_at,
            closed_at=view.closed_at,
        )


def _listed(values: dict[str, Any]) -> _Listed:
    return _Listed(FlowView.model_validate(values))


def _flow(item: dict[str, Any]) -> _Listed:
    flow_id = key_of(item, "flow_id")
    return decoded(item, _listed, f"flow {flow_id}", flow_id)
