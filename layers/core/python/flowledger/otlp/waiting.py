"""Spans that arrive before their parent wait for it, for a bounded time, instead of vanishing or being cut off.

Exporters send spans as they end, so a child routinely comes before its parent (an agent's model calls before
the agent's own span; a log record before its span), and a trace split over processes arrives in any order. A
span whose parent (or a linked span) is neither in its request nor recorded is held here, sealed whole under the
flow's data key, together with its writer; so is a span whose parent is itself held. Held spans are counted as
taken in the answer and the receipt: they are not refused.

A held span is written as soon as the request that brings its parent is written (that request releases
every span of the flow that waited for what it wrote, and theirs in turn: found through the flow's marker item,
the set of span ids its held spans wait for, never by reading every held span), or, once
``FLOWLEDGER_OTLP_PARENT_WAIT_SECONDS`` have passed since it was first held, by the ``otlp_release`` job (every
minute), under the flow itself with the missing parent's span id kept as ``orphan_of``. A span whose parent came
while a link has not waits on for the link. A request writes at most ``MAX_RELEASED_PER_REQUEST`` held spans
(a trace's 19,999 children sent before its root would not fit in one request's time) and flags the flow; the job
writes the rest. Nothing leaves this table but by being written (or refused by the flow service, and said so),
and it has no TTL.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flowledger.identity import Principal
from flowledger.otlp.mapping import SpanStep
from flowledger.services import Services
from flowledger.store.envelope import FieldRef

TABLE = "otlp_waiting"
# The flow's own item in the table: the set of span ids its held spans wait for (``parents``).
MARKER = "#parents"
MAX_DUE_FLOWS = 1_000  # flows one release job run takes; the next run takes the rest
_TUPLES = ("linked_span_ids", "unmapped")


@dataclass(frozen=True)
class Waiting:
    """One held span: the step it will be, the span it waits for, what a refusal calls it, and its writer."""

    step: SpanStep
    parent: str
    label: str
    writer: Principal
    release_at: float  # epoch seconds: written as an orphan from then on

    @property
    def key(self) -> str:
        return f"{self.parent}#{self.step.span_id}"


class WaitingRoom:
    """The held spans of every flow, one item each, keyed by the flow and ``<parent>#<span>``."""

    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name(TABLE)

    def hold(self, flow_id: str, held: list[Waiting]) -> None:
        """Hold spans; held again (an exporter's retry), each keeps the time it was first held. The flow's marker
        item gains the spans they wait for, so a request that writes one of those finds them in a few reads.

        Batched: the times already held read 100 keys a request, the spans written 25 a request (a request of 512
        children sent before their parent costs some 25 calls, not 512)."""
        if not held:
            return
        first_held = self._held_since(flow_id, [waiting.key for waiting in held])
        puts = []
        for waiting in held:
            sealed = self._s.sealer.seal(
                {
                    "step": dataclasses.asdict(waiting.step),
                    "label": waiting.label,
                    "writer": waiting.writer.model_dump(mode="json", include={"kind", "id"}),
                },
                FieldRef(flow_id, waiting.key, "waiting", "span"),
            )
            item = {
                "flow_id": {"S": flow_id},
                "waiting_key": {"S": waiting.key},
                "sealed": {"M": {k: {"S": v} for k, v in sealed.items()}},
                "release_at": {"N": first_held.get(waiting.key, repr(waiting.release_at))},
            }
            puts.append({"PutRequest": {"Item": item}})
        for start in range(0, len(puts), 25):  # BatchWriteItem takes 25 a request
            pending: dict[str, Any] = {self._table: puts[start : start + 25]}
            while pending:
                pending = self._db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
        self._db.update_item(
            TableName=self._table,
            Key=self._marker(flow_id),
            UpdateExpression="SET trace_id = :trace ADD parents :parents",
            ExpressionAttributeValues={
                ":parents": {"SS": sorted({waiting.parent for waiting in held})},
                ":trace": {"S": held[0].step.trace_id},
            },
        )

    def _held_since(self, flow_id: str, keys: list[str]) -> dict[str, str]:
        """The ``release_at`` of those of ``keys`` already held (an exporter's retry keeps its first time)."""
        found: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 100):  # BatchGetItem takes 100 keys a request
            pending: dict[str, Any] = {
                self._table: {
                    "Keys": [{"flow_id": {"S": flow_id}, "waiting_key": {"S": k}} for k in unique[start : start + 100]],
                    "ConsistentRead": True,
                    "ProjectionExpression": "waiting_key, release_at",
                }
            }
            while pending:
                response = self._db.batch_get_item(RequestItems=pending)
                for item in response.get("Responses", {}).get(self._table, []):
                    found[item["waiting_key"]["S"]] = item["release_at"]["N"]
                pending = response.get("UnprocessedKeys") or {}
        return found

    def awaited(self, flow_id: str) -> tuple[str | None, set[str]]:
        """The flow's trace id and the span ids its held spans wait for (its marker item)."""
        item = self._db.get_item(TableName=self._table, Key=self._marker(flow_id), ConsistentRead=True).get("Item", {})
        return item.get("trace_id", {}).get("S"), set(item.get("parents", {}).get("SS", []))

    def waiting_for(self, flow_id: str, written: set[str], limit: int) -> tuple[list[Waiting], bool]:
        """Up to ``limit`` spans that wait for one of ``written`` (span ids now written), or for those, and so
        on: read by the marker's parents, never the whole flow's held spans; and whether more wait."""
        _, awaited = self.awaited(flow_id)
        found: list[Waiting] = []
        frontier, seen = written & awaited, set[str]()
        while frontier:
            seen |= frontier
            for parent in sorted(frontier):
                children, more = self._query(flow_id, f"{parent}#", limit - len(found))
                found += children
                if more:
                    return found, True
            frontier = {w.step.span_id for w in found} & awaited - seen
        return found, False

    def due(self, flow_id: str, now: float, limit: int) -> tuple[list[Waiting], bool]:
        """Up to ``limit`` of the flow's spans whose wait is over, and whether more are."""
        return self._query(flow_id, "", limit, due_at=now)

    def flag(self, flow_id: str, pending: bool) -> None:
        """Mark the flow as holding spans a request could not release in its time (the job takes them), or not."""
        if pending:
            self._db.update_item(
                TableName=self._table,
                Key=self._marker(flow_id),
                UpdateExpression="SET release_pending = :yes",
                ExpressionAttributeValues={":yes": {"BOOL": True}},
            )
            return
        with contextlib.suppress(self._db.exceptions.ConditionalCheckFailedException):  # no marker: nothing waits
            self._db.update_item(
                TableName=self._table,
                Key=self._marker(flow_id),
                UpdateExpression="REMOVE release_pending",
                ConditionExpression="attribute_exists(waiting_key)",
            )

    def _marker(self, flow_id: str) -> dict[str, Any]:
        return {"flow_id": {"S": flow_id}, "waiting_key": {"S": MARKER}}

    def of_flow(self, flow_id: str) -> list[Waiting]:
        """Every span the flow holds (a consistent read: a span held a moment ago is seen)."""
        return self._query(flow_id, "", None)[0]

    def _query(
        self, flow_id: str, prefix: str, limit: int | None, due_at: float | None = None
    ) -> tuple[list[Waiting], bool]:
        found: list[Waiting] = []
        values: dict[str, Any] = {":flow": {"S": flow_id}}
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "flow_id = :flow",
            "ConsistentRead": True,
        }
        if prefix:
            request["KeyConditionExpression"] += " AND begins_with(waiting_key, :prefix)"
            values[":prefix"] = {"S": prefix}
        if due_at is not None:
            request["FilterExpression"] = "release_at <= :now"
            values[":now"] = {"N": repr(due_at)}
        request["ExpressionAttributeValues"] = values
        while True:
            if limit is not None:
                request["Limit"] = limit - len(found) + 1  # one more: whether more wait, without reading them
            page = self._db.query(**request)
            items = [item for item in page.get("Items", []) if item["waiting_key"]["S"] != MARKER]
            if limit is not None and len(found) + len(items) > limit:
                return found + [self._opened(flow_id, item) for item in items[: limit - len(found)]], True
            found += [self._opened(flow_id, item) for item in items]
            if "LastEvaluatedKey" not in page:
                return found, False
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def remove(self, flow_id: str, written: list[Waiting], still: list[Waiting] | None) -> None:
        """Forget spans that were written (or refused): they wait no more. ``still`` are all the spans that go on
        waiting for the parents ``written`` waited for (None: not all were read): a parent none waits for leaves
        the marker."""
        for start in range(0, len(written), 25):  # BatchWriteItem takes 25 a request
            pending: dict[str, Any] = {
                self._table: [
                    {"DeleteRequest": {"Key": {"flow_id": {"S": flow_id}, "waiting_key": {"S": w.key}}}}
                    for w in written[start : start + 25]
                ]
            }
            while pending:
                pending = self._db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
        gone = {w.parent for w in written} - {w.parent for w in still} if still is not None else set()
        if not gone:
            return
        left = self._db.update_item(
            TableName=self._table,
            Key=self._marker(flow_id),
            UpdateExpression="DELETE parents :gone",
            ExpressionAttributeValues={":gone": {"SS": sorted(gone)}},
            ReturnValues="UPDATED_NEW",
        )
        if "parents" not in left.get("Attributes", {}):  # nothing waits in the flow: the marker goes too
            with contextlib.suppress(self._db.exceptions.ConditionalCheckFailedException):
                self._db.delete_item(
                    TableName=self._table,
                    Key=self._marker(flow_id),
                    ConditionExpression="attribute_not_exists(parents)",
                )

    def due_flows(self, now: float) -> Iterator[str]:
        """Flows holding a span whose wait is over, or spans a request left to the job, each once, at most
        :data:`MAX_DUE_FLOWS`."""
        seen: set[str] = set()
        request: dict[str, Any] = {
            "TableName": self._table,
            "FilterExpression": "release_at <= :now OR attribute_exists(release_pending)",
            "ExpressionAttributeValues": {":now": {"N": repr(now)}},
            "ProjectionExpression": "flow_id",
        }
        while len(seen) < MAX_DUE_FLOWS:
            page = self._db.scan(**request)
            for item in page.get("Items", []):
                flow_id = item["flow_id"]["S"]
                if flow_id not in seen and len(seen) < MAX_DUE_FLOWS:
                    seen.add(flow_id)
                    yield flow_id
            if "LastEvaluatedKey" not in page:
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _opened(self, flow_id: str, item: dict[str, Any]) -> Waiting:
        key = item["waiting_key"]["S"]
        sealed = {k: v["S"] for k, v in item["sealed"]["M"].items()}
        held = self._s.sealer.open(sealed, FieldRef(flow_id, key, "waiting", "span"))
        step: dict[str, Any] = {k: tuple(v) if k in _TUPLES else v for k, v in held["step"].items()}
        return Waiting(
            step=SpanStep(**step),
            parent=key.split("#", 1)[0],
            label=held["label"],
            writer=Principal(**held["writer"], scopes=frozenset({"reasoning.write"})),
            release_at=float(item["release_at"]["N"]),
        )
