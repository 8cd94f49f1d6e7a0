"""Fixed-window request counters in the ``rate_limits`` table (expired windows vanish by TTL)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowledger.errors import RateLimited

if TYPE_CHECKING:
    from flowledger.services import Services


def hit_rate_limit(services: Services, key: str, limit: int, window_seconds: int) -> None:
    """Count one request against ``key``; raise :class:`RateLimited` past ``limit`` in this window."""
    now = int(services.clock().timestamp())
    window = now // window_seconds
    window_end = (window + 1) * window_seconds
    response = services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("rate_limits"),
        Key={"key": {"S": key}, "window": {"S": str(window)}},
        UpdateExpression="ADD hits :one SET expires_at = if_not_exists(expires_at, :expires)",
        ExpressionAttributeValues={":one": {"N": "1"}, ":expires": {"N": str(window_end + window_seconds)}},
        ReturnValues="UPDATED_NEW",
    )
    if int(response["Attributes"]["hits"]["N"]) > limit:
        raise RateLimited(f"at most {limit} requests per {window_seconds // 60} minutes", max(1, window_end - now))
