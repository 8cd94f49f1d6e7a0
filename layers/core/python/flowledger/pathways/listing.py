"""The pathway library's pathways themselves, a page at a time, each with its radar.

One trigger family is read from ``by_family_changed`` (most recently changed first); the whole library
is a Scan of the pathways table (no order to promise). A page's ``Limit`` counts the items read, not
those the filters keep, so a filtered page can come back short, even empty, and still carry a cursor:
the list goes on past it (as the flows list does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from flowledger.errors import InvalidInput
from flowledger.pathways.matcher import view_of
from flowledger.pathways.models import Pathway, PathwayView
from flowledger.pathways.store import PathwayStore, to_pathway
from flowledger.services import Services
from flowledger.store.counters import KEY_PREFIX
from flowledger.store.cursors import decode_cursor, encode_cursor
from flowledger.store.decoding import Skips

CURSOR_ERROR = "cursor is not one this API returned for these filters"
# A scan can stop on one of the counter items sharing the table: its key resumes the scan as well.
TABLE_KEY = re.compile(r"^(pw_[0-9a-f]{26}|" + re.escape(KEY_PREFIX) + r"[0-9]{2})$")
TIMESTAMP = re.compile(r"^[0-9T:.+Z-]{10,40}$")

PathwayStatus = Literal["active", "demoted"]


@dataclass(frozen=True)
class PathwayFilters:
    """What the list is narrowed to; None is no filter."""

    trigger_type: str | None = None
    status: PathwayStatus | None = None
    ref_prefix: str | None = None

    def keeps(self, pathway: Pathway) -> bool:
        if self.status is not None and (self.status == "active") != pathway.active:
            return False
        return self.ref_prefix is None or pathway.trigger_ref.startswith(self.ref_prefix)


class PathwayPage(BaseModel):
    pathways: list[PathwayView]
    next_cursor: str | None


class PathwayListing:
    def __init__(self, services: Services) -> None:
        self._s = services
        self._store = PathwayStore.of(services)
        self._db = services.aws.dynamodb

    def page(self, filters: PathwayFilters, limit: int, cursor: str | None) -> PathwayPage:
        """One page of pathways (admin views with their radar) and the cursor of the next, if any."""
        if filters.trigger_type:
            pathways, last = self._family_page(filters.trigger_type, limit, cursor)
        else:
            pathways, last = self._library_page(filters, limit, cursor)
        now = self._s.clock()
        return PathwayPage(
            pathways=[view_of(p, now) for p in pathways if filters.keeps(p)],
            next_cursor=encode_cursor(last) if last else None,
        )

    def _family_page(self, trigger_type: str, limit: int, cursor: str | None) -> tuple[list[Pathway], list[str]]:
        request: dict[str, Any] = {
            "TableName": self._store.table,
            "IndexName": "by_family_changed",
            "KeyConditionExpression": "trigger_type = :t",
            "ExpressionAttributeValues": {":t": {"S": trigger_type}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if cursor is not None:
            pathway_id, changed_at = _position(cursor, 2)
            if not pathway_id.startswith("pw_") or not TIMESTAMP.fullmatch(changed_at):
                raise InvalidInput(CURSOR_ERROR)
            request["ExclusiveStartKey"] = {
                "pathway_id": {"S": pathway_id},
                "trigger_type": {"S": trigger_type},
                "changed_at": {"S": changed_at},
            }
        response = self._db.query(**request)
        ids = [item["pathway_id"]["S"] for item in response.get("Items", [])]
        found = self._store.get_many(ids)
        last = response.get("LastEvaluatedKey")
        resume = [last["pathway_id"]["S"], last["changed_at"]["S"]] if last else []
        return [found[i][0] for i in ids if i in found], resume

    def _library_page(self, filters: PathwayFilters, limit: int, cursor: str | None) -> tuple[list[Pathway], list[str]]:
        request: dict[str, Any] = {
            "TableName": self._store.table,
            "Limit": limit,
            # The library's counter items share the table.
            "FilterExpression": "NOT begins_with(pathway_id, :counters)",
            "ExpressionAttributeValues": {":counters": {"S": KEY_PREFIX}},
        }
        if filters.ref_prefix:
            request["FilterExpression"] += " AND begins_with(trigger_ref, :prefix)"
            request["ExpressionAttributeValues"][":prefix"] = {"S": filters.ref_prefix}
        if cursor is not None:
            (pathway_id,) = _position(cursor, 1)
            request["ExclusiveStartKey"] = {"pathway_id": {"S": pathway_id}}
        response = self._db.scan(**request)
        pathways = [p for p, _ in Skips("pathway_list").readable(response.get("Items", []), to_pathway)]
        last = response.get("LastEvaluatedKey")
        return pathways, [last["pathway_id"]["S"]] if last else []


def _position(cursor: str, size: int) -> list[str]:
    """The strings a cursor of this listing holds (a table key first); 422 for anything else."""
    position = decode_cursor(cursor)
    if (
        not isinstance(position, list)
        or len(position) != size
        or not all(isinstance(part, str) for part in position)
        or not TABLE_KEY.fullmatch(position[0])
    ):
        raise InvalidInput(CURSOR_ERROR)
    return position
