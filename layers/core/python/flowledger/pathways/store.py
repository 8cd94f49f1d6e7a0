"""Pathways on DynamoDB: one item per pathway, its vector a float32 binary attribute."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from flowledger.pathways.models import Pathway
from flowledger.services import Services
from flowledger.store.counters import KEY_PREFIX
from flowledger.store.decoding import decoded, key_of
from flowledger.store.paging import query_items, scan_items

BATCH_GET = 100


def pathway_id_for(seed_flow_id: str) -> str:
    """One flow seeds at most one pathway: its id derives from the flow's."""
    return "pw_" + hashlib.sha256(seed_flow_id.encode()).hexdigest()[:26]


def pack_vector(vector: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def unpack_vector(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def unit(vector: Sequence[float]) -> list[float]:
    """The vector scaled to length 1 (an all-zero vector stays as it is)."""
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector] if norm else list(vector)


def to_pathway(item: dict[str, Any]) -> tuple[Pathway, bytes | None]:
    """A stored item as a pathway and its packed vector (None when not embedded).

    Raises ``UndecodableItem`` naming the pathway when the item no longer reads as one.
    """
    pathway_id = key_of(item, "pathway_id")
    return decoded(item, _pathway_and_vector, f"pathway {pathway_id}", pathway_id)


def _pathway_and_vector(values: dict[str, Any]) -> tuple[Pathway, bytes | None]:
    vector = values.pop("embedding", None)
    if vector is not None and not isinstance(vector, bytes):
        raise TypeError("embedding is not binary")
    return Pathway.model_validate(values), vector


class PathwayStore:
    def __init__(self, dynamodb: Any, table_name: str) -> None:
        self._db = dynamodb
        self.table = table_name

    @classmethod
    def of(cls, services: Services) -> PathwayStore:
        """The deployment's pathways table."""
        return cls(services.aws.dynamodb, services.aws.table_name("pathways"))

    def get(self, pathway_id: str) -> tuple[Pathway, bytes | None] | None:
        item = self._db.get_item(TableName=self.table, Key=_key(pathway_id), ConsistentRead=True).get("Item")
        return to_pathway(item) if item else None

    def get_many(self, pathway_ids: Iterable[str]) -> dict[str, tuple[Pathway, bytes | None]]:
        """The stored pathways among these ids (BatchGetItem, strongly consistent)."""
        wanted = list(dict.fromkeys(pathway_ids))
        found: dict[str, tuple[Pathway, bytes | None]] = {}
        for start in range(0, len(wanted), BATCH_GET):
            pending: dict[str, Any] = {
                self.table: {"Keys": [_key(p) for p in wanted[start : start + BATCH_GET]], "ConsistentRead": True}
            }
            while pending:
                response = self._db.batch_get_item(RequestItems=pending)
                for item in response.get("Responses", {}).get(self.table, []):
                    pathway, vector = to_pathway(item)
                    found[pathway.pathway_id] = (pathway, vector)
                pending = response.get("UnprocessedKeys") or {}
        return found

    def scan(self, projection: str | None = None, consistent: bool = False) -> Iterator[dict[str, Any]]:
        """Every stored pathway item (only the ``projection`` attributes, when given), page by page.

        The library's counter items share the table and are left out.
        """
        request: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": consistent,
            "FilterExpression": "NOT begins_with(#key, :counters)",
            "ExpressionAttributeNames": {"#key": "pathway_id"},
            "ExpressionAttributeValues": {":counters": {"S": KEY_PREFIX}},
        }
        if projection:
            request["ProjectionExpression"] = projection
        return scan_items(self._db, request)

    def changed_since(self, trigger_type: str, since: str) -> list[str]:
        """Ids of a family's pathways changed after ``since`` (created, hit, embedded or demoted)."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_family_changed",
            "KeyConditionExpression": "trigger_type = :t",
            "ExpressionAttributeValues": {":t": {"S": trigger_type}},
        }
        if since:  # without a snapshot, the whole family has "changed"
            request["KeyConditionExpression"] += " AND changed_at > :since"
            request["ExpressionAttributeValues"][":since"] = {"S": since}
        return [item["pathway_id"]["S"] for item in query_items(self._db, request)]


def _key(pathway_id: str) -> dict[str, Any]:
    return {"pathway_id": {"S": pathway_id}}
