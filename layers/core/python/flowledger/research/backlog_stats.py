"""The backlog's observability view in a fixed number of requests, and the counters it reads.

Each status change of a row adds its deltas to the backlog's counters (``store/counters.py``) in
the transaction that changes the row: one per status (``status:pending``...) and, for rows still in
play (pending or dispatched), one per retry count (``retries:0``...). The view reads them with one
``BatchGetItem`` and adds three bounded queries: the oldest pending row (``by_status``, ``Limit 1``),
the longest-dispatched row and the latest failures (``by_status_changed``, ``Limit 1`` and ``Limit 10``).
Five requests, whatever the number of rows.

Terminal statuses (completed, failed_voluntary, failed_after_retries) are lifetime totals: their rows
expire 30 days after completion by TTL, which no transaction sees, so those counts never go down.
Pending and dispatched rows never expire, so theirs are exact current counts.

Counters of rows written before they existed are missing: ``recount`` (run once after the upgrade)
rebuilds them from a full read of the table, and gives older rows the ``status_changed_at`` the view's
index needs.
"""

from __future__ import annotations

import contextlib
import heapq
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from flowledger.errors import BacklogContention, ConditionFailed
from flowledger.ledger.events import AuditEntry, parse_timestamp, timestamp
from flowledger.research.health import loop_health
from flowledger.research.models import BacklogRow, BacklogStatus, BacklogView, RecentFailure
from flowledger.services import Services
from flowledger.store.counters import ShardedCounters
from flowledger.store.decoding import Skips, decoded, key_of
from flowledger.store.paging import scan_items

RECENT_WINDOW = timedelta(hours=24)
RECENT_FAILURES_SHOWN = 10
IN_PLAY = (BacklogStatus.PENDING, BacklogStatus.DISPATCHED)
TERMINAL = (BacklogStatus.COMPLETED, BacklogStatus.FAILED_VOLUNTARY, BacklogStatus.FAILED_AFTER_RETRIES)
FAILED = (BacklogStatus.FAILED_VOLUNTARY, BacklogStatus.FAILED_AFTER_RETRIES)
RECOUNT_ATTEMPTS = 5
RECOUNT_ACTOR = "system:backlog_recount"


def counters_of(services: Services) -> ShardedCounters:
    """The backlog's counter shards, kept in the backlog table."""
    return ShardedCounters(services.aws.dynamodb, services.aws.table_name("backlog"), "request_id")


def counted(status: BacklogStatus, retry_count: int) -> Counter[str]:
    """What one row in this state adds to the counters (pure)."""
    counts = Counter({f"status:{status.value}": 1})
    if status in IN_PLAY:
        counts[f"retries:{retry_count}"] += 1
    return counts


def moved(before: tuple[BacklogStatus, int] | None, after: tuple[BacklogStatus, int]) -> dict[str, int]:
    """The counter deltas of a row going from ``before`` (None: a new row) to ``after`` (pure)."""
    deltas = Counter(counted(*after))
    if before is not None:
        deltas.subtract(counted(*before))
    return {name: delta for name, delta in deltas.items() if delta}


class BacklogStats:
    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name("backlog")
        self.counters = counters_of(services)

    def view(self) -> BacklogView:
        """Status counts, oldest ages, retries, recent failures and the loop-health verdict (five requests)."""
        now = self._s.clock()
        totals = self.counters.read().totals
        distribution = {status.value: totals.get(f"status:{status.value}", 0) for status in BacklogStatus}
        retries = {
            name.removeprefix("retries:"): count
            for name, count in totals.items()
            if name.startswith("retries:") and count
        }
        pending_since = self._first("by_status", BacklogStatus.PENDING, "created_at")
        dispatched_since = self._first("by_status_changed", BacklogStatus.DISPATCHED, "status_changed_at")
        failures = self.recent_failures(timestamp(now - RECENT_WINDOW))

        def age(moment: str | None) -> int | None:
            return int((now - parse_timestamp(moment)).total_seconds()) if moment else None

        pending_age, dispatched_age = age(pending_since), age(dispatched_since)
        return BacklogView(
            status_distribution=distribution,
            oldest_pending_age_seconds=pending_age,
            oldest_dispatched_age_seconds=dispatched_age,
            retry_distribution=dict(sorted(retries.items(), key=lambda kv: int(kv[0]))),
            recent_failures=failures,
            # At most RECENT_FAILURES_SHOWN are read: enough for the warn rule (>= 5), which is all it decides.
            loop_health=loop_health(pending_age, dispatched_age, len(failures)),
        )

    def _first(self, index: str, status: BacklogStatus, sort_key: str) -> str | None:
        """The sort key of the earliest row of ``status`` in ``index`` (one query, Limit 1)."""
        response = self._db.query(
            TableName=self._table,
            IndexName=index,
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": {"S": status.value}},
            Limit=1,
        )
        found = response.get("Items", [])
        return found[0].get(sort_key, {}).get("S") if found else None

    def recent_failures(self, since: str) -> list[RecentFailure]:
        """The latest failures since ``since``, newest first: one query per failed status, each Limit 10."""
        latest: list[RecentFailure] = []
        for status in FAILED:
            response = self._db.query(
                TableName=self._table,
                IndexName="by_status_changed",
                KeyConditionExpression="#s = :s AND status_changed_at >= :since",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":s": {"S": status.value}, ":since": {"S": since}},
                ScanIndexForward=False,
                Limit=RECENT_FAILURES_SHOWN,
            )
            for item in response.get("Items", []):
                latest.append(
                    RecentFailure(
                        request_id=item["request_id"]["S"],
                        status=status,
                        failure_reason=item.get("failure_reason", {}).get("S"),
                        completed_at=item.get("completed_at", item["status_changed_at"])["S"],
                    )
                )
        return heapq.nlargest(RECENT_FAILURES_SHOWN, latest, key=lambda f: f.completed_at or "")

    # ---- the one-off recount ------------------------------------------------------------------------

    def recount(self, actor: str = RECOUNT_ACTOR) -> dict[str, int]:
        """Rebuild the counters from every row (a full, strongly consistent scan), audited; for upgrades.

        Counts of pending and dispatched rows, and of retries, are set to what the rows say. A terminal
        total is never lowered below what was counted (rows that expired are gone from the scan), only
        raised to the rows retained. The replacement is conditional on no counted write having landed
        during the scan; when one did, the scan is repeated (``RECOUNT_ATTEMPTS``), then BacklogContention.
        Rows without ``status_changed_at`` get it (from the time they entered their status) on the way.
        """
        skips = Skips("backlog_recount")
        for _ in range(RECOUNT_ATTEMPTS):
            seen = self.counters.read()
            counts: Counter[str] = Counter()
            for row in skips.readable(self._stored_rows(), row_of):
                counts.update(counted(row.status, row.retry_count))
                self._stamp_status_changed_at(row)
            for status in TERMINAL:
                name = f"status:{status.value}"
                counts[name] = max(counts[name], seen.totals.get(name, 0))
            try:
                self._s.ledger.append(
                    AuditEntry(
                        action="memory.job.backlog_counters.recounted",
                        actor=actor,
                        subject="backlog:counters",
                        payload={
                            **{s.value: counts[f"status:{s.value}"] for s in BacklogStatus},
                            "skipped": skips.count,
                        },
                    ),
                    self.counters.replace_items(counts, seen),
                )
            except ConditionFailed:
                continue  # a write was counted during the scan: read again
            return {name: count for name, count in sorted(counts.items()) if count}
        raise BacklogContention("the backlog kept changing during the recount; nothing was replaced, retry")

    def _stored_rows(self) -> Iterator[dict[str, Any]]:
        request = {"TableName": self._table, "ConsistentRead": True}
        # Counters and open-request guards share the table; a row's id never starts with "#".
        return (i for i in scan_items(self._db, request) if not i["request_id"]["S"].startswith("#"))

    def _stamp_status_changed_at(self, row: BacklogRow) -> None:
        """Give a row written before ``status_changed_at`` existed the time it entered its status."""
        if row.status_changed_at is not None:
            return
        since = {
            BacklogStatus.PENDING: row.ticketed_at or row.created_at,
            BacklogStatus.DISPATCHED: row.dispatched_at or row.created_at,
        }.get(row.status, row.completed_at or row.created_at)
        # A row that moved on meanwhile was stamped by its new status.
        with contextlib.suppress(self._db.exceptions.ConditionalCheckFailedException):
            self._db.update_item(
                TableName=self._table,
                Key={"request_id": {"S": row.request_id}},
                UpdateExpression="SET status_changed_at = :at",
                ConditionExpression="#s = :s AND attribute_not_exists(status_changed_at)",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":at": {"S": since}, ":s": {"S": row.status.value}},
            )


def row_of(item: Mapping[str, Any]) -> BacklogRow:
    """A stored item as a row; raises ``UndecodableItem`` naming it when it no longer reads as one."""
    request_id = key_of(dict(item), "request_id")
    return decoded(dict(item), BacklogRow.model_validate, f"backlog request {request_id}", request_id)
