"""Every item of a DynamoDB query or scan, page after page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def query_items(db: Any, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The items ``request`` matches, following ``LastEvaluatedKey`` lazily (stop early to read less)."""
    return _pages(db.query, request)


def scan_items(db: Any, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every item a ``Scan`` reads, following ``LastEvaluatedKey`` lazily."""
    return _pages(db.scan, request)


def _pages(call: Any, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    page = dict(request)
    while True:
        response = call(**page)
        yield from response.get("Items", [])
        if "LastEvaluatedKey" not in response:
            return
        page["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def batch_delete(db: Any, table: str, keys: list[dict[str, Any]]) -> int:
    """Delete these items, 25 a ``BatchWriteItem`` (its limit), until none is left unprocessed; how many asked."""
    for start in range(0, len(keys), 25):
        pending: dict[str, Any] = {table: [{"DeleteRequest": {"Key": key}} for key in keys[start : start + 25]]}
        while pending:
            pending = db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
    return len(keys)
