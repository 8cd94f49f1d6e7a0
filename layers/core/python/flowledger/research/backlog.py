"""The research backlog on DynamoDB: enqueue, atomic FIFO pull, complete, stale sweep, observability.

Every status change is one transaction with its audit event. Unfiltered pulls go through the
ticket queue (``tickets.py``): each consumer takes the next ticket atomically and flips that row,
so consumers never race for the same row and each one's pulls follow enqueue order. A pull
filtered by trigger type reads the oldest pending rows of that type from the status index and
flips the first it wins. Exactly-once holds either way: a flip is conditional on the row being
pending.

Each status change also moves the backlog's counters (``backlog_stats.py``) in its own transaction,
so the observability view reads a fixed number of items however many rows there are.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from flowledger.errors import BacklogContention, ConditionFailed, Conflict, LedgerContention, NotFound
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.ledger.row_failures import ROW_ERRORS, UNEXPECTED, RowFailures
from flowledger.research.backlog_stats import BacklogStats, counters_of, moved, row_of
from flowledger.research.models import BacklogRow, BacklogStatus, BacklogView, Completion, DeeperRequest
from flowledger.research.tickets import TicketQueue
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.backoff import backoff_seconds
from flowledger.store.paging import query_items

CANDIDATES_PER_QUERY = 8
COMPLETE_ATTEMPTS = 4  # a complete re-reads when the row was recovered and dispatched again meanwhile
TICKET_ATTEMPTS = 12  # concurrent enqueues race for the next ticket number; each retry backs off
# Each pause is jittered up to 2 ms * 2**attempt, capped here, and none follows the last attempt: at most
# TICKET_MAX_WAIT_SECONDS (about 1.3 s) of sleeping before BacklogContention, well inside a request's budget.
TICKET_PAUSE_CAP_SECONDS = 0.25
TICKET_MAX_WAIT_SECONDS = sum(min(TICKET_PAUSE_CAP_SECONDS, 0.002 * 2**a) for a in range(TICKET_ATTEMPTS - 1))


GUARD_PREFIX = "#open#"


def guard_key(open_key: str) -> str:
    """The key of the item that marks ``open_key`` as held by an open row."""
    return GUARD_PREFIX + hashlib.sha256(open_key.encode()).hexdigest()[:32]


def request_id_for(idempotency_key: str) -> str:
    """The row id a client key maps to: the same key always names the same row."""
    return "rq_" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:26]


# What a ticketed write builds for the ticket it is given: its audit entry, its own transaction
# items (whose conditions decide the outcome) and the row as it will be stored.
TicketedWrite = Callable[[int], tuple[AuditEntry, list[dict[str, Any]], BacklogRow]]


class Backlog:
    def __init__(self, services: Services, sleep: Callable[[float], None] = time.sleep) -> None:
        self._s = services
        self._sleep = sleep  # the pause between ticket attempts (a recorder in tests)
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name("backlog")
        self._tickets = TicketQueue(self._db, services.aws.table_name("backlog_tickets"))
        self._counters = counters_of(services)
        # The rows a pull passed over because they no longer read as rows: each audited, never the pull's end.
        self.failures = RowFailures(services, "backlog_pull", "backlog")

    # ---- producer ---------------------------------------------------------------------------------

    def enqueue(
        self, actor: str, body: DeeperRequest, strategy: str | None = None, open_key: str | None = None
    ) -> tuple[BacklogRow, bool]:
        """Queue a deeper-research request; the same idempotency key returns the first row (False).

        With ``open_key`` (the producers'), at most one row per key is open at a time: while one is
        pending or dispatched, another enqueue under the key returns it (False); once it completes or
        fails, the key is free again at once, not after the 30 days its row is kept. The guard item
        is written with the row and deleted in the transaction that ends it.
        """
        request_id = request_id_for(body.idempotency_key)
        now = timestamp(self._s.clock())

        def write(ticket: int) -> tuple[AuditEntry, list[dict[str, Any]], BacklogRow]:
            row = BacklogRow(
                request_id=request_id,
                status=BacklogStatus.PENDING,
                created_at=now,
                created_by=actor,
                strategy=strategy,
                ticket=ticket,
                ticketed_at=now,
                status_changed_at=now,
                open_key=open_key,
                **body.model_dump(exclude={"idempotency_key"}),
            )
            entry = AuditEntry(
                action="reasoning.research.deeper_request_created",
                actor=actor,
                subject=f"backlog:{request_id}",
                payload={
                    "trigger_type": body.trigger_type,
                    "reason": body.reason.value,
                    "dispatched_from_backlog": body.dispatched_from_backlog,
                },
            )
            put = {
                "Put": {
                    "TableName": self._table,
                    "Item": _row_item(row),
                    "ConditionExpression": "attribute_not_exists(request_id)",
                }
            }
            return entry, [put, *self._guard_put(open_key, request_id)], row

        counted = self._counters.update_item(moved(None, (BacklogStatus.PENDING, 0)), request_id)
        for attempt in range(2):
            try:
                return self._write_with_ticket(write, counted), True
            except ConditionFailed as failed:
                if failed.index == 1 and open_key is not None:  # the guard: a row under this key is open
                    holder = self._open_row(open_key)
                    if holder is not None:
                        return holder, False
                    if attempt == 0:
                        continue  # the holder ended (or its guard was stale and is gone now): once more
                    raise BacklogContention("the open request under this key keeps changing; retry") from None
                existing = self.get(request_id)
                if existing is None:  # pragma: no cover - a row is never deleted before its TTL
                    raise
                return existing, False
        raise AssertionError("unreachable")  # pragma: no cover

    def _guard_put(self, open_key: str | None, request_id: str) -> list[dict[str, Any]]:
        if open_key is None:
            return []
        # No TTL: a row stays open as long as it likes (pending rows never expire), and its guard with it;
        # every end of the row deletes the guard in the same transaction.
        return [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": {"request_id": {"S": guard_key(open_key)}, "open_request_id": {"S": request_id}},
                    "ConditionExpression": "attribute_not_exists(request_id)",
                }
            }
        ]

    def _open_row(self, open_key: str) -> BacklogRow | None:
        """The open row holding ``open_key``; None when it was released meanwhile.

        A guard naming a row that has ended (or is gone) is stale: it is deleted, conditionally on still
        naming that row, so it can never block the trigger.
        """
        key = {"request_id": {"S": guard_key(open_key)}}
        guard = self._db.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        if guard is None:
            return None
        holder_id = guard["open_request_id"]["S"]
        holder = self.get(holder_id)
        if holder is not None and holder.status in (BacklogStatus.PENDING, BacklogStatus.DISPATCHED):
            return holder
        with contextlib.suppress(self._db.exceptions.ConditionalCheckFailedException):
            self._db.delete_item(
                TableName=self._table,
                Key=key,
                ConditionExpression="open_request_id = :holder",
                ExpressionAttributeValues={":holder": {"S": holder_id}},
            )
        return None

    def _guard_release(self, row: BacklogRow) -> list[dict[str, Any]]:
        """The delete of ``row``'s guard, with its end.

        Unconditional: while a row is open no other row can hold its key (the put is conditional and the
        guard has no TTL), so the guard there is this row's, or none; a condition here could only ever
        keep a row from ending.
        """
        if row.open_key is None:
            return []
        return [{"Delete": {"TableName": self._table, "Key": {"request_id": {"S": guard_key(row.open_key)}}}}]

    def request_deeper(self, actor: str, body: DeeperRequest) -> tuple[BacklogRow, bool]:
        """An operator asks for deeper research: the enqueue, then ``admin.reasoning.research.deeper_requested``.

        The admin event records the operator's request itself, pinned to their principal, on a replayed
        key too (``created`` false); producers inside agents call :meth:`enqueue` and emit none. It is a
        second transaction after the enqueue's, since the ledger seals one event per transaction: if it
        fails the row stands, and the client's retry with the same key replays the row and records it.
        """
        row, created = self.enqueue(actor, body)
        self._s.ledger.append(
            AuditEntry(
                action="admin.reasoning.research.deeper_requested",
                actor=actor,
                subject=f"backlog:{row.request_id}",
                payload={"created": created, "trigger_type": body.trigger_type, "reason": body.reason.value},
            )
        )
        return row, created

    def _write_with_ticket(self, write: TicketedWrite, counted: list[dict[str, Any]]) -> BacklogRow:
        """Run a write that puts a row in the queue, with the next ticket number; retried when another takes it.

        ``counted`` (its counter update, without a condition) goes last, after the ticket's items.

        At most ``TICKET_ATTEMPTS`` attempts with a jittered pause between two (never after the last), so
        the total wait is bounded by ``TICKET_MAX_WAIT_SECONDS``.
        """
        expires = int((self._s.clock() + timedelta(days=self._s.settings.backlog_retention_days)).timestamp())
        for attempt in range(TICKET_ATTEMPTS):
            if attempt:
                self._sleep(backoff_seconds(attempt - 1, cap=TICKET_PAUSE_CAP_SECONDS))
            issued, _ = self._tickets.counter()
            entry, own, row = write(issued + 1)
            try:
                ticket_items = self._tickets.issue_items(issued, _row_item(row), expires)
                self._s.ledger.append(entry, [*own, *ticket_items, *counted])
            except ConditionFailed as failed:
                if failed.index < len(own):
                    raise
                continue
            return row
        raise BacklogContention("the backlog's ticket counter stayed contended; nothing was written, retry")

    # ---- consumer ---------------------------------------------------------------------------------

    def pull_next(self, actor: str, trigger_type: str | None = None, strategy: str | None = None) -> BacklogRow | None:
        """Flip the oldest pending row (optionally of one trigger type) to dispatched, or None if none is left.

        With ``strategy``, critic rows queued under another strategy are left pending: they give up
        their ticket ("parked") and are served, once the ticket queue is empty, to a pull that takes them.
        """
        if trigger_type is not None:
            return self._pull_oldest(actor, trigger_type, strategy, parked_only=False)
        skips = self.failures
        while (ticket := self._tickets.take()) is not None:
            copy = self._tickets.slot(ticket)
            if copy is None:
                continue  # its row was pulled by trigger type
            row = next(skips.readable([copy], _row), None)
            if row is None:
                continue  # logged; the ticket is spent, so the queue moves past it
            if strategy and row.strategy not in (None, strategy):
                self._park(row, actor)
                continue
            pulled = self._dispatch(row, actor)
            if pulled is not None:
                return pulled
        return self._pull_oldest(actor, None, strategy, parked_only=True)

    def _pull_oldest(
        self, actor: str, trigger_type: str | None, strategy: str | None, parked_only: bool
    ) -> BacklogRow | None:
        while True:
            candidates = self._oldest_pending(trigger_type, strategy, parked_only)
            if not candidates:
                return None
            for candidate in candidates:
                pulled = self._dispatch(candidate, actor)
                if pulled is not None:
                    return pulled

    def _park(self, row: BacklogRow, actor: str) -> None:
        """Take a row of another strategy out of the ticket queue, pending where it is."""
        assert row.ticket is not None
        with contextlib.suppress(ConditionFailed):  # dispatched or re-ticketed meanwhile
            self._s.ledger.append(
                AuditEntry(
                    action="reasoning.research.backlog.parked",
                    actor=actor,
                    subject=f"backlog:{row.request_id}",
                    payload={"strategy": row.strategy},
                ),
                [
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": {"request_id": {"S": row.request_id}},
                            "UpdateExpression": "REMOVE ticket, ticketed_at",
                            "ConditionExpression": "#s = :pending AND ticket = :ticket",
                            "ExpressionAttributeNames": {"#s": "status"},
                            "ExpressionAttributeValues": {
                                ":pending": {"S": "pending"},
                                ":ticket": {"N": str(row.ticket)},
                            },
                        }
                    },
                    self._tickets.release_item(row.ticket),
                ],
            )

    def _oldest_pending(self, trigger_type: str | None, strategy: str | None, parked_only: bool) -> list[BacklogRow]:
        request = self._by_status(BacklogStatus.PENDING) | {"Limit": CANDIDATES_PER_QUERY}
        filters = ["attribute_not_exists(ticket)"] if parked_only else []
        if trigger_type:
            filters.append("trigger_type = :t")
            request["ExpressionAttributeValues"][":t"] = {"S": trigger_type}
        if strategy:
            # Rows queued under another critic strategy are left where they are.
            filters.append("(attribute_not_exists(strategy) OR strategy = :strategy)")
            request["ExpressionAttributeValues"][":strategy"] = {"S": strategy}
        if filters:
            request["FilterExpression"] = " AND ".join(filters)
        # A row that cannot be read is passed over (and logged), or it would block the head of the queue.
        readable = self.failures.readable(query_items(self._db, request), _row)
        return list(itertools.islice(readable, CANDIDATES_PER_QUERY))

    def _dispatch(self, candidate: BacklogRow, actor: str) -> BacklogRow | None:
        request_id = candidate.request_id
        now = timestamp(self._s.clock())
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="reasoning.research.backlog.dispatched", actor=actor, subject=f"backlog:{request_id}"
                ),
                [
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": {"request_id": {"S": request_id}},
                            "UpdateExpression": (
                                "SET #s = :dispatched, dispatched_at = :now, dispatched_to = :actor,"
                                " status_changed_at = :now"
                            ),
                            # The row still holds the ticket read (so the slot deleted is its own).
                            "ConditionExpression": "#s = :pending AND "
                            + ("ticket = :ticket" if candidate.ticket else "attribute_not_exists(ticket)"),
                            "ExpressionAttributeNames": {"#s": "status"},
                            "ExpressionAttributeValues": {
                                ":dispatched": {"S": "dispatched"},
                                ":pending": {"S": "pending"},
                                ":now": {"S": now},
                                ":actor": {"S": actor},
                                **({":ticket": {"N": str(candidate.ticket)}} if candidate.ticket else {}),
                            },
                        }
                    },
                    *([self._tickets.release_item(candidate.ticket)] if candidate.ticket else []),
                    *self._counters.update_item(
                        moved(
                            (BacklogStatus.PENDING, candidate.retry_count),
                            (BacklogStatus.DISPATCHED, candidate.retry_count),
                        ),
                        request_id,
                    ),
                ],
            )
        except ConditionFailed:
            return None  # another consumer won it: try the next candidate
        # The slot and the index hold the whole row, so the pulled row needs no second read.
        return candidate.model_copy(
            update={
                "status": BacklogStatus.DISPATCHED,
                "dispatched_at": now,
                "dispatched_to": actor,
                "status_changed_at": now,
            }
        )

    def complete(self, actor: str, request_id: str, body: Completion) -> BacklogRow:
        """Close a dispatched row: completed (with its flow id) or, with ``error``, failed_voluntary.

        The row is read first: its counters move by its retry count, and the close is conditional on
        the very dispatch read (``dispatched_at``), so the row returned is the row stored.
        """
        failed = body.error is not None
        status = BacklogStatus.FAILED_VOLUNTARY if failed else BacklogStatus.COMPLETED
        fields = {"completed_flow_id": body.flow_id, "failure_reason": body.error}
        for _ in range(COMPLETE_ATTEMPTS):
            row = self.get(request_id)
            if row is None:
                raise NotFound(f"no backlog request {request_id}")
            if row.status is not BacklogStatus.DISPATCHED:
                break
            try:
                # A failure's reason is a code (the pattern of ``Completion.error``): audited with the close.
                payload = {"failed": failed, **({"reason": body.error} if failed else {})}
                return self._terminate(row, status, actor, {k: v for k, v in fields.items() if v}, payload)
            except ConditionFailed:
                continue  # recovered (and perhaps dispatched again) since the read: read it again
        else:
            row = self.get(request_id)
            assert row is not None  # a row is never deleted before its TTL
        raise Conflict(f"request {request_id} is {row.status.value}; only a dispatched request can be completed")

    def _terminate(
        self,
        seen: BacklogRow,
        status: BacklogStatus,
        actor: str,
        fields: dict[str, Any],
        payload: dict[str, Any],
    ) -> BacklogRow:
        """Close ``seen`` (a dispatched row, as read) with ``status``; ConditionFailed if it moved since."""
        now = self._s.clock()
        at = timestamp(now)
        expires = int((now + timedelta(days=self._s.settings.backlog_retention_days)).timestamp())
        closed = {"status": status, "completed_at": at, "expires_at": expires, "status_changed_at": at, **fields}
        assignments = ", ".join(f"{'#s' if name == 'status' else name} = :{name}" for name in closed)
        action = {
            BacklogStatus.COMPLETED: "completed",
            BacklogStatus.FAILED_VOLUNTARY: "failed_voluntary",
            BacklogStatus.FAILED_AFTER_RETRIES: "failed_after_retries",
        }[status]
        self._s.ledger.append(
            AuditEntry(
                action=f"reasoning.research.backlog.{action}",
                actor=actor,
                subject=f"backlog:{seen.request_id}",
                payload=payload,
            ),
            [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": {"request_id": {"S": seen.request_id}},
                        "UpdateExpression": f"SET {assignments}",
                        # The same dispatch as read: its retry count is the one the counters move by.
                        "ConditionExpression": "#s = :dispatched AND dispatched_at = :seen",
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": items.to_item(
                            {
                                **{f":{name}": value for name, value in closed.items()},
                                ":status": status.value,  # the enum itself is not a stored value
                                ":dispatched": BacklogStatus.DISPATCHED.value,
                                ":seen": seen.dispatched_at,
                            }
                        ),
                    }
                },
                *self._counters.update_item(
                    moved((BacklogStatus.DISPATCHED, seen.retry_count), (status, seen.retry_count)), seen.request_id
                ),
                *self._guard_release(seen),
            ],
        )
        return seen.model_copy(update=closed)

    # ---- lifecycle --------------------------------------------------------------------------------

    def sweep_stale(self) -> dict[str, int]:
        """Dispatched rows older than the threshold go back to pending (retry + 1), or fail after the retries.

        Pending rows whose ticket was taken long ago without a dispatch (a consumer died between the
        two) get a new ticket at the back of the queue; parked rows have no ticket and are left alone.
        Rows that cannot be read are logged by id, counted in ``skipped`` and left as they are.

        A sweep stopped by a fault resumes on the next run without a cursor: each requeue is one
        transaction with its event, conditional on the row being as read (still dispatched at the same
        ``dispatched_at``, or pending under the same ticket), and a requeued row is neither dispatched
        nor stranded any more; so the next sweep takes only the rows the stopped one did not reach.
        """
        settings = self._s.settings
        cutoff = timestamp(self._s.clock() - timedelta(minutes=settings.backlog_stale_after_minutes))
        recovered = failed = requeued = contended = 0
        skips = RowFailures(self._s, "backlog_stale_sweep", "backlog")
        for row in self._rows(BacklogStatus.DISPATCHED, skips):
            if row.dispatched_at is None or row.dispatched_at >= cutoff:
                continue
            try:
                if row.retry_count >= settings.backlog_max_retries:
                    self._terminate(
                        row,
                        BacklogStatus.FAILED_AFTER_RETRIES,
                        "system:backlog_stale_sweep",
                        {"failure_reason": "stale_after_retries"},
                        {"retry_count": row.retry_count},
                    )
                    failed += 1
                else:
                    self._requeue(row, "recovered", retry_count=row.retry_count + 1)
                    recovered += 1
            except ConditionFailed:
                continue  # completed meanwhile
            except (BacklogContention, LedgerContention):
                contended += 1  # the next sweep tries again
            except ROW_ERRORS as exc:  # a row the sweep cannot move fails alone (audited), never the sweep
                skips.record(row.request_id, UNEXPECTED, exc)
        _, taken = self._tickets.counter()
        for row in self._rows(BacklogStatus.PENDING, skips):
            # A parked row (no ticket) waits for a pull of its strategy; it is not stranded.
            stranded = row.ticket is not None and row.ticket <= taken and (row.ticketed_at or row.created_at) < cutoff
            if not stranded:
                continue
            try:
                self._requeue(row, "requeued", retry_count=row.retry_count)
                requeued += 1
            except ConditionFailed:
                continue  # dispatched meanwhile
            except (BacklogContention, LedgerContention):
                contended += 1  # the next sweep tries again
            except ROW_ERRORS as exc:
                skips.record(row.request_id, UNEXPECTED, exc)
        result = {
            "recovered": recovered,
            "failed_after_retries": failed,
            "requeued": requeued,
            "contended": contended,
            "skipped": skips.count,
        }
        self._s.ledger.append(
            AuditEntry(
                action="memory.job.backlog_stale_sweep.completed",
                actor="system:backlog_stale_sweep",
                subject="job:backlog_stale_sweep",
                payload=result,
            )
        )
        return result

    def _requeue(self, seen: BacklogRow, action: str, retry_count: int) -> None:
        """Put a row back at the back of the queue as pending, if it is still as ``seen``."""
        now = timestamp(self._s.clock())
        expected: str | int | None
        if seen.status is BacklogStatus.DISPATCHED:
            condition, expected = "#s = :was AND dispatched_at = :seen", seen.dispatched_at
        else:  # a stranded pending row: unless someone dispatched it or gave it another ticket meanwhile
            condition, expected = "#s = :was AND ticket = :seen", seen.ticket

        recovered = seen.status is BacklogStatus.DISPATCHED
        # A recovered row re-enters pending now; a stranded one stays pending, as it was.
        changed_at = now if recovered else seen.status_changed_at
        counted = self._counters.update_item(
            moved((seen.status, seen.retry_count), (BacklogStatus.PENDING, retry_count)), seen.request_id
        )

        def write(ticket: int) -> tuple[AuditEntry, list[dict[str, Any]], BacklogRow]:
            row = seen.model_copy(
                update={
                    "status": BacklogStatus.PENDING,
                    "retry_count": retry_count,
                    "ticket": ticket,
                    "ticketed_at": now,
                    "dispatched_at": None,
                    "dispatched_to": None,
                    "status_changed_at": changed_at,
                }
            )
            entry = AuditEntry(
                action=f"reasoning.research.backlog.{action}",
                actor="system:backlog_stale_sweep",
                subject=f"backlog:{seen.request_id}",
                payload={"retry_count": retry_count},
            )
            update = {
                "Update": {
                    "TableName": self._table,
                    "Key": {"request_id": {"S": seen.request_id}},
                    "UpdateExpression": (
                        "SET #s = :pending, retry_count = :retries, ticket = :ticket, ticketed_at = :now"
                        + (", status_changed_at = :now" if recovered else "")
                        + " REMOVE dispatched_at, dispatched_to"
                    ),
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {"#s": "status"},
                    "ExpressionAttributeValues": items.to_item(
                        {
                            ":pending": "pending",
                            ":was": seen.status.value,
                            ":retries": retry_count,
                            ":ticket": ticket,
                            ":now": now,
                            ":seen": expected,
                        }
                    ),
                }
            }
            # A stranded row's old slot goes with it (a recovered row's went at its dispatch).
            released = (
                [self._tickets.release_item(seen.ticket)]
                if seen.ticket and seen.status is BacklogStatus.PENDING
                else []
            )
            return entry, [update, *released], row

        self._write_with_ticket(write, counted)

    # ---- reads ------------------------------------------------------------------------------------

    def get(self, request_id: str) -> BacklogRow | None:
        item = self._db.get_item(TableName=self._table, Key={"request_id": {"S": request_id}}, ConsistentRead=True).get(
            "Item"
        )
        return _row(item) if item else None

    def _by_status(self, status: BacklogStatus) -> dict[str, Any]:
        """The query of the rows in one status, oldest first."""
        return {
            "TableName": self._table,
            "IndexName": "by_status",
            "KeyConditionExpression": "#s = :s",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {":s": {"S": status.value}},
        }

    def _rows(self, status: BacklogStatus, skips: RowFailures | None = None) -> Iterator[BacklogRow]:
        """The rows in one status; one that cannot be read raises, or with ``skips`` is noted and passed over."""
        raw = query_items(self._db, self._by_status(status))
        return skips.readable(raw, _row) if skips else (_row(item) for item in raw)

    def view(self) -> BacklogView:
        """The observability view with the server-computed loop-health verdict (a fixed five requests)."""
        return BacklogStats(self._s).view()

    def read_view(self, actor: str) -> BacklogView:
        """The view, recorded as an admin read (``admin.reasoning.research.backlog_read``)."""
        view = self.view()
        self._s.ledger.append(
            AuditEntry(
                action="admin.reasoning.research.backlog_read",
                actor=actor,
                subject="backlog:all",
                payload={"health": view.loop_health},
            )
        )
        return view


_row = row_of


def _row_item(row: BacklogRow) -> dict[str, Any]:
    return items.to_item(row.model_dump(mode="json", exclude_none=True))
