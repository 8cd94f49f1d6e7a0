"""Every item of a DynamoDB query, page after page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def query_items(db: Any, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The items ``request`` matches, following ``LastEvaluatedKey`` lazily (stop early to read less)."""
    page = dict(request)
    while True:
        response = db.query(**page)
        yield from response.get("Items", [])
        if "LastEvaluatedKey" not in response:
            return
        page["ExclusiveStartKey"] = response["LastEvaluatedKey"]
