"""The ledger on DynamoDB: one chain per shard, events keyed (chain_id, seq).

An audited write is one ``TransactWriteItems``: the caller's items plus the event, which is
conditional on its position being free. Two writers can never take the same position (no fork),
and a writer only ever extends the head it read (no gap).

Chains belong to writers, not to subjects: each writer (a thread of a process) leases a chain of its
own (``ledger/leases.py``) and appends to it, so a warm writer's cached head is current: one request
and no read per write, and no writer cancels another's. Without a lease (none free, or leases off) a
writer appends to the chain it last used and moves to another at random when a rival takes its
position. (Chains picked by subject would make every writer's cache stale under concurrency, and cost
a failed write plus a head read on most appends.) A subject's events are found through the
``by_subject`` index.
"""

from __future__ import annotations

import logging
import math
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from botocore.exceptions import ClientError
from pydantic import ValidationError

from flowledger.errors import ConditionFailed, LedgerContention
from flowledger.ledger.chain import GENESIS, Malformed, Position, Stored, position_of
from flowledger.ledger.events import (
    GENESIS_HASH,
    TIMESTAMP_PATTERN,
    AuditEntry,
    AuditEvent,
    parse_timestamp,
    seal,
    timestamp,
)
from flowledger.ledger.leases import ChainLeases
from flowledger.store import items
from flowledger.store.backoff import backoff_seconds
from flowledger.store.paging import query_items, scan_items

logger = logging.getLogger("flowledger.ledger")

MAX_ATTEMPTS = 8
TRANSACT_ITEMS_LIMIT = 100  # DynamoDB's TransactWriteItems limit: items per transaction
BASE_BACKOFF_SECONDS = 0.002
MAX_BACKOFF_SECONDS = 0.02
# Codes of a cancelled transaction that another writer caused: worth a retry at a fresh position.
_CONTENDED = {"ConditionalCheckFailed", "TransactionConflict"}


def to_item(event: AuditEvent) -> dict[str, Any]:
    """The DynamoDB item of an event (low-level attribute values)."""
    return items.to_item(event.model_dump())


def from_item(item: Mapping[str, Any]) -> AuditEvent:
    """The event stored in a DynamoDB item; raises if the item is not a well-formed event."""
    return AuditEvent.model_validate(items.from_item(item))


def decode(item: Mapping[str, Any]) -> Stored:
    """The event stored in an item, or what is wrong with it: never raises."""
    try:
        return from_item(item)
    except ValidationError as exc:
        return Malformed(_seq_text(item), _validation_reason(exc))
    except (ValueError, TypeError, KeyError, AttributeError, StopIteration, ArithmeticError) as exc:
        return Malformed(_seq_text(item), f"an attribute cannot be read ({type(exc).__name__})")


def _seq_text(item: Mapping[str, Any]) -> str:
    seq = item.get("seq")
    return str(seq.get("N", "?")) if isinstance(seq, Mapping) else "?"


def _validation_reason(exc: ValidationError) -> str:
    """Which attributes are wrong and how, in one line; the stored values are not echoed."""
    reasons = []
    for error in exc.errors():
        name = ".".join(str(part) for part in error["loc"]) or "the item"
        if error["type"] == "extra_forbidden":
            reasons.append(f"unexpected attribute {name}")
        elif error["type"] == "missing":
            reasons.append(f"missing attribute {name}")
        else:
            reasons.append(f"{name}: {error['msg']}")
    shown = "; ".join(reasons[:3])
    return shown if len(reasons) <= 3 else f"{shown}; and {len(reasons) - 3} more"


_TIMESTAMP = re.compile(TIMESTAMP_PATTERN)  # what ``timestamp`` writes


class _Head(NamedTuple):
    """A chain's last position and its time: the next event may not be earlier."""

    seq: int
    hash: str
    at: str


_GENESIS_HEAD = _Head(0, GENESIS_HASH, "")


class SubjectCursor(NamedTuple):
    """Where a subject's next page of events starts: after this event."""

    at: str
    chain_id: str
    seq: int

    def key(self, subject: str) -> dict[str, Any]:
        return {
            "subject": {"S": subject},
            "at": {"S": self.at},
            "chain_id": {"S": self.chain_id},
            "seq": {"N": str(self.seq)},
        }


class Ledger:
    """Appends audited writes and reads chains back."""

    def __init__(
        self,
        dynamodb: Any,
        table_name: str,
        shards: int,
        clock: Callable[[], datetime],
        max_attempts: int = MAX_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        leases: ChainLeases | None = None,
    ) -> None:
        self._db = dynamodb
        self._table = table_name
        self.shards = shards
        self._chains = tuple(f"chain-{n:03d}" for n in range(shards))
        self._clock = clock
        self._max_attempts = max_attempts
        self._sleep = sleep
        self._heads: dict[str, _Head] = {}
        self._lock = threading.Lock()
        self._leases = leases
        # Per thread (a writer): .chain, the chain it appends to; .holder, its lease holder id; .until, when its
        # lease on .chain ends (None: it holds none); .claim_after, when a writer that found no free chain tries again.
        self._writer = threading.local()

    def chain_ids(self) -> list[str]:
        """The ledger's chains, ``chain-000`` to ``chain-{shards - 1}``: no other chain id is an audit chain."""
        return list(self._chains)

    def append(self, entry: AuditEntry, domain_items: Sequence[Mapping[str, Any]] = ()) -> AuditEvent:
        """Write ``domain_items`` (``TransactWriteItems`` entries) and the event for ``entry`` atomically.

        Raises :class:`ConditionFailed` when a condition on a caller's item fails, and
        :class:`LedgerContention` when the chain position stays contended; either way nothing
        is written.
        """
        return self.append_all([entry], domain_items)[0]

    def append_all(
        self, entries: Sequence[AuditEntry], domain_items: Sequence[Mapping[str, Any]] = ()
    ) -> list[AuditEvent]:
        """Write ``domain_items`` and one event per entry in one transaction, all or nothing.

        The events take consecutive positions of one chain, each chained to the one before, and
        each ``Put`` is conditional on its position being free, so a batch cannot fork or gap a
        chain; the errors are :meth:`append`'s. Items beyond DynamoDB's transaction limit are refused.
        """
        if not entries:
            raise ValueError("append_all needs at least one entry")
        if len(domain_items) + len(entries) > TRANSACT_ITEMS_LIMIT:
            raise ValueError(f"{len(domain_items) + len(entries)} items exceed one transaction")
        chain_id = self._writer_chain()
        for attempt in range(self._max_attempts):
            head = self._cached_head(chain_id)
            at, prev_hash, events = self._not_before(head.at), head.hash, []
            for offset, entry in enumerate(entries, start=1):
                events.append(seal(entry, chain_id, head.seq + offset, prev_hash, at))
                prev_hash = events[-1].hash
            puts = [
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": to_item(e),
                        "ConditionExpression": "attribute_not_exists(seq)",
                    }
                }
                for e in events
            ]
            try:
                self._db.transact_write_items(TransactItems=[*domain_items, *puts])
            except ClientError as exc:
                if not self._contended(exc, len(domain_items)):
                    raise
                self._forget(chain_id)
                chain_id = self._move_writer(chain_id)
                self._sleep(backoff_seconds(attempt, BASE_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS))
                continue
            last = events[-1]
            self._remember(chain_id, _Head(last.seq, last.hash, last.at))
            return events
        raise LedgerContention(
            f"the audit chains stayed contended after {self._max_attempts} attempts; "
            "nothing was written, retry the request"
        )

    def _not_before(self, head_at: str) -> datetime:
        """Now, or the head's time when this writer's clock is behind it: ``at`` never goes backwards in a chain."""
        now = self._clock()
        if _TIMESTAMP.fullmatch(head_at) and head_at > timestamp(now):
            return parse_timestamp(head_at)
        return now

    def _writer_chain(self) -> str:
        """The chain this writer appends to: its leased chain (claimed or renewed when due), else its last one."""
        writer = self._writer
        chain_id: str | None = getattr(writer, "chain", None)
        if self._leases is None:
            if chain_id is None:
                chain_id = writer.chain = random.choice(self._chains)  # noqa: S311 - load spreading
            return chain_id
        now = self._leases.now()
        until: float | None = getattr(writer, "until", None)
        if chain_id is not None and until is not None:
            if now < until - self._leases.seconds / 2:
                return chain_id
            renewed = self._leases.renew(self._holder(), chain_id, now)
            if renewed is not None:
                writer.until = renewed
                return chain_id
            self._forget(chain_id)  # another writer holds it now, and has likely moved its head
        elif chain_id is not None and now < getattr(writer, "claim_after", math.inf):
            # Sharing a chain until the next try at a free one; a chain set on the writer from outside (a tool or
            # a test that places events) has no next try, and stays.
            return chain_id
        return self._claim(now, avoid=chain_id)

    def _holder(self) -> str:
        holder: str | None = getattr(self._writer, "holder", None)
        if holder is None:
            holder = self._writer.holder = secrets.token_hex(8)
        return holder

    def _claim(self, now: float, avoid: str | None) -> str:
        """Lease a free chain for this writer; share a random one, and try again a lease later, when none is free."""
        assert self._leases is not None
        writer = self._writer
        others = self._other_chains(avoid)
        claimed = self._leases.claim(self._holder(), others, now)
        if claimed is None:
            writer.chain, writer.until = random.choice(others), None  # noqa: S311 - load spreading
            writer.claim_after = now + self._leases.seconds
        else:
            writer.chain, writer.until = claimed
        self._forget(writer.chain)  # a head cached for the chain may be another writer's old one
        return str(writer.chain)

    def _move_writer(self, lost: str) -> str:
        """A rival took this writer's position: go to another chain (the lost one when it is the only one).

        With leases the writer gives its lease back and claims another chain: the rival is a writer whose
        lease on this chain is newer, or one that shares it for want of a free chain.
        """
        if self._leases is not None:
            if getattr(self._writer, "until", None) is not None:
                self._leases.release(self._holder(), lost)
            return self._claim(self._leases.now(), avoid=lost)
        chain_id: str = random.choice(self._other_chains(lost))  # noqa: S311 - load spreading
        self._writer.chain = chain_id
        self._forget(chain_id)  # a head cached when this writer was last there is likely stale by now
        return chain_id

    def _other_chains(self, avoid: str | None) -> list[str]:
        """Every chain but ``avoid`` (the one a writer just lost), or all of them when it is the only one."""
        return [chain_id for chain_id in self._chains if chain_id != avoid] or list(self._chains)

    def _contended(self, exc: ClientError, domain_count: int) -> bool:
        """True when another writer took the position; raises if the caller's own condition failed."""
        if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
            return False
        reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
        for index, code in enumerate(reasons[:domain_count]):
            if code == "ConditionalCheckFailed":
                raise ConditionFailed(f"the condition on item {index} of the write did not hold", index) from None
        return any(code in _CONTENDED for code in reasons)

    def _cached_head(self, chain_id: str) -> _Head:
        with self._lock:
            cached = self._heads.get(chain_id)
        return cached if cached is not None else self._read_head(chain_id)

    def _remember(self, chain_id: str, head: _Head) -> None:
        with self._lock:
            current = self._heads.get(chain_id)
            if current is None or head.seq > current.seq:
                self._heads[chain_id] = head

    def _forget(self, chain_id: str) -> None:
        with self._lock:
            self._heads.pop(chain_id, None)

    def head(self, chain_id: str) -> Position:
        """The chain's last stored position (one strongly consistent read)."""
        head = self._read_head(chain_id)
        return Position(head.seq, head.hash) if head.seq else GENESIS

    def _read_head(self, chain_id: str) -> _Head:
        response = self._db.query(
            TableName=self._table,
            KeyConditionExpression="chain_id = :c",
            ExpressionAttributeValues={":c": {"S": chain_id}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
            ProjectionExpression="seq, #h, #at",
            ExpressionAttributeNames={"#h": "hash", "#at": "at"},
        )
        items = response.get("Items", [])
        if not items:
            return _GENESIS_HEAD
        head = items[0]
        return _Head(int(head["seq"]["N"]), head["hash"]["S"], head.get("at", {}).get("S", ""))

    def read_chain(self, chain_id: str, after_seq: int = 0, until_seq: int | None = None) -> Iterator[AuditEvent]:
        """The chain's events in order, from ``after_seq + 1`` (to ``until_seq``), page by page."""
        condition = "chain_id = :c AND seq > :s"
        values: dict[str, Any] = {":c": {"S": chain_id}, ":s": {"N": str(after_seq)}}
        if until_seq is not None:
            condition = "chain_id = :c AND seq BETWEEN :s AND :u"
            values = {":c": {"S": chain_id}, ":s": {"N": str(after_seq + 1)}, ":u": {"N": str(until_seq)}}
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        for item in query_items(self._db, request):
            yield from_item(item)

    def stored_items(self, chain_id: str, after_seq: int = 0) -> Iterator[Stored]:
        """Every item under ``chain_id`` in key order, each an event or :class:`Malformed`: for verification.

        From the start (``after_seq`` 0) this reads the whole partition, so items under keys that are
        no chain position (0, negative, fractional) come too.
        """
        condition = "chain_id = :c" + (" AND seq > :s" if after_seq else "")
        values: dict[str, Any] = {":c": {"S": chain_id}} | ({":s": {"N": str(after_seq)}} if after_seq else {})
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        for item in query_items(self._db, request):
            yield decode(item)

    def foreign_positions(self) -> Iterator[tuple[str, str]]:
        """``(chain_id, seq)`` of every item under a chain id that is not one of :meth:`chain_ids`.

        DynamoDB cannot list partition keys, so this is a keys-only, strongly consistent scan of the
        whole table: it reads (and costs) as much as the table holds, and returns only the strays.
        """
        known = set(self.chain_ids())
        request = {
            "TableName": self._table,
            "ProjectionExpression": "chain_id, seq",
            "ConsistentRead": True,
        }
        for item in scan_items(self._db, request):
            chain_id = item["chain_id"]["S"]
            if chain_id not in known:
                yield chain_id, item["seq"]["N"]

    @staticmethod
    def _served(item: Mapping[str, Any]) -> AuditEvent | None:
        """The event an item holds, or None (logged) when it is not a well-formed one: the routes skip it."""
        stored = decode(item)
        if isinstance(stored, AuditEvent):
            return stored
        chain_id = item.get("chain_id", {}).get("S", "?")
        logger.warning("ledger item %s.%s is malformed and not served: %s", chain_id, stored.seq_text, stored.reason)
        return None

    def event(self, chain_id: str, seq: int) -> AuditEvent | None:
        response = self._db.get_item(
            TableName=self._table, ConsistentRead=True, Key={"chain_id": {"S": chain_id}, "seq": {"N": str(seq)}}
        )
        return from_item(response["Item"]) if "Item" in response else None

    def subject_page(
        self, subject: str, limit: int, action: str | None, since: str | None, start: SubjectCursor | None
    ) -> tuple[list[AuditEvent], SubjectCursor | None]:
        """Up to ``limit`` of a subject's events in time order, and where the next page starts (None at the end)."""
        condition = "subject = :subject" + (" AND #at >= :since" if since else "")
        values: dict[str, Any] = {":subject": {"S": subject}}
        names = {"#at": "at"} if since else {}
        if since:
            values[":since"] = {"S": since}
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_subject",
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "Limit": max(limit, 100),
        }
        if action:
            names["#action"] = "action"
            values[":action"] = {"S": action}
            request["FilterExpression"] = "#action = :action"
        if names:
            request["ExpressionAttributeNames"] = names
        if start is not None:
            request["ExclusiveStartKey"] = start.key(subject)
        keys: list[dict[str, Any]] = []
        cursor: SubjectCursor | None = None
        known = set(self.chain_ids())
        for item in query_items(self._db, request):
            if item["chain_id"]["S"] not in known or position_of(item["seq"]["N"]) is None:
                continue  # not an audit chain's event: `flowledger audit verify` reports it
            if len(keys) == limit:
                last = keys[-1]
                cursor = SubjectCursor(last["at"]["S"], last["chain_id"]["S"], int(last["seq"]["N"]))
                break
            keys.append(item)
        return self._events([(k["chain_id"]["S"], int(k["seq"]["N"])) for k in keys]), cursor

    def _events(self, positions: list[tuple[str, int]]) -> list[AuditEvent]:
        """The events at these positions, in the order given (BatchGetItem, 100 keys a request)."""
        found: dict[tuple[str, int], AuditEvent] = {}
        for start in range(0, len(positions), 100):
            pending: dict[str, Any] = {
                self._table: {
                    "Keys": [
                        {"chain_id": {"S": chain_id}, "seq": {"N": str(seq)}}
                        for chain_id, seq in positions[start : start + 100]
                    ],
                    "ConsistentRead": True,
                }
            }
            while pending:
                response = self._db.batch_get_item(RequestItems=pending)
                for item in response.get("Responses", {}).get(self._table, []):
                    if (event := self._served(item)) is not None:
                        found[(event.chain_id, event.seq)] = event
                pending = response.get("UnprocessedKeys") or {}
        return [found[position] for position in positions if position in found]

    def query_page(
        self, chain_id: str, after_seq: int, limit: int, filters: Mapping[str, str], since: str | None
    ) -> tuple[list[AuditEvent], int | None]:
        """Up to ``limit`` matching events after ``after_seq``, and the seq to resume after (None at the end)."""
        clauses, names = [], {}
        values: dict[str, Any] = {":c": {"S": chain_id}, ":s": {"N": str(after_seq)}}
        for position, (attribute, wanted) in enumerate(sorted(filters.items())):
            names[f"#f{position}"] = attribute
            values[f":f{position}"] = {"S": wanted}
            clauses.append(f"#f{position} = :f{position}")
        if since is not None:
            names["#at"] = "at"
            values[":since"] = {"S": since}
            clauses.append("#at >= :since")
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "chain_id = :c AND seq > :s",
            "ExpressionAttributeValues": values,
            "Limit": max(limit, 100),
        }
        if clauses:
            request["FilterExpression"] = " AND ".join(clauses)
            request["ExpressionAttributeNames"] = names
        found: list[AuditEvent] = []
        while True:
            response = self._db.query(**request)
            for item in response.get("Items", []):
                if (event := self._served(item)) is None:
                    continue
                found.append(event)
                if len(found) == limit:
                    return found, found[-1].seq
            if "LastEvaluatedKey" not in response:
                return found, None
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
