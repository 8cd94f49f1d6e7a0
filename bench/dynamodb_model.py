"""A discrete-event model of Amazon DynamoDB as the audit ledger uses it, for ``ledger_scale.py``.

The ledger's own code (``flowledger.ledger.store.Ledger``) runs against ``ModelDynamoDB``, a stand-in for a
boto3 low-level DynamoDB client, in simulated time: each writer is a greenlet, and every request and every
``sleep`` hands control to a hub that resumes greenlets in order of simulated time. So thousands of writers
run in one thread, reproducibly (seeded), and the figures are the model's, not this machine's.

What the model keeps of DynamoDB (each rule is stated where it is applied):

* items per table and partition key, with conditions evaluated on committed state;
* TransactWriteItems as two phases: a prepare that evaluates conditions and takes the items, a commit that
  writes them; a transaction that finds an item taken is cancelled (TransactionConflict);
* latency drawn per request from a lognormal (``Latencies``);
* billing (WCU, RCU, index writes) and a token bucket per partition key (``Capacity``), with throttling as
  the SDK sees it, including its own retries of throttled single-item requests (``SdkRetries``).

What it leaves out: the network and the caller's CPU (zero time), partition splits and adaptive capacity
(every partition key is its own partition, see ``Capacity``), index throttling (index writes are billed and
metered, not limited), eventually consistent reads, TTL, and the SDK's retry quota.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from statistics import NormalDist
from typing import Any

import greenlet
from botocore.exceptions import ClientError
from ledger import item_size

from flowledger.store.tables import TABLES, Index, TableSpec

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

Item = dict[str, Any]  # one DynamoDB item, low-level attribute values ({"S": ...}, {"N": ...})
KeyValue = str | Decimal | bytes  # a key attribute's value, comparable within its type
Partition = tuple[str, KeyValue]  # (table, partition key value)
ItemId = tuple[str, KeyValue, KeyValue | None]  # (table, partition key value, sort key value)


# -- The engine -----------------------------------------------------------------------------------------------


class Engine:
    """Simulated time on greenlets: tasks run until they sleep, and the hub resumes them in time order.

    The hub is the greenlet that made the engine; ``run`` must be called from it. Ties in time run in the
    order they were scheduled, so a run is a pure function of its seeds.
    """

    def __init__(self) -> None:
        self._hub = greenlet.getcurrent()
        self._queue: list[tuple[float, int, greenlet.greenlet]] = []
        self._order = itertools.count()
        self._now = 0.0

    def now(self) -> float:
        """Simulated seconds since the start."""
        return self._now

    def clock(self) -> datetime:
        """The simulated time as the ledger reads it: a UTC datetime."""
        return EPOCH + timedelta(seconds=self._now)

    def spawn(self, task: Callable[[], object], delay: float = 0.0) -> None:
        """Start ``task`` in a greenlet of its own ``delay`` simulated seconds from now."""
        self._push(self._now + max(delay, 0.0), greenlet.greenlet(task, parent=self._hub))

    def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` of simulated time (the ledger's ``sleep``)."""
        current = greenlet.getcurrent()
        if current is self._hub:
            raise RuntimeError("sleep() suspends a simulated task; the hub cannot sleep")
        self._push(self._now + max(seconds, 0.0), current)
        self._hub.switch()

    def run(self) -> None:
        """Run every task to its end. An exception in a task ends the run and propagates here."""
        if greenlet.getcurrent() is not self._hub:
            raise RuntimeError("run() belongs to the greenlet that made the engine")
        while self._queue:
            at, _, task = heapq.heappop(self._queue)
            self._now = at
            task.switch()

    def _push(self, at: float, task: greenlet.greenlet) -> None:
        heapq.heappush(self._queue, (at, next(self._order), task))


# -- Assumptions: latency, capacity, the SDK's retries ------------------------------------------------------------

# Latency. AWS states "single-digit millisecond" latency for single-item reads and writes (the DynamoDB
# developer guide; Elhemali et al., "Amazon DynamoDB: A Scalable, Predictably Performant, and Fully Managed
# NoSQL Database Service", USENIX ATC 2022). Idziorek et al., "Distributed Transactions at Scale in Amazon
# DynamoDB" (USENIX ATC 2023) shows TransactWriteItems latency a small multiple of a single write's, and flat
# from 100k to 1M transactions/s, but its latency axes carry no values. So every figure below is an
# assumption of ours: 4 ms median and 9 ms p99 for a single-item request, and 12 ms median, 25 ms p99 for a
# transaction, to match the 10-25 ms commonly measured in-Region. ``ledger_scale.py`` can set each of them.
_Z99 = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class Latencies:
    """Service time of each request: a lognormal with this median and 99th percentile (seconds)."""

    single_median: float = 0.004  # GetItem, Query, PutItem, DeleteItem
    single_p99: float = 0.009
    transact_median: float = 0.012  # TransactWriteItems
    transact_p99: float = 0.025
    # Fractions of a transaction's service time at which it is prepared and committed; the reply comes at 1.
    prepare_at: float = 0.4
    commit_at: float = 0.9

    def draw(self, rng: random.Random, transaction: bool) -> float:
        median, p99 = (
            (self.transact_median, self.transact_p99) if transaction else (self.single_median, self.single_p99)
        )
        sigma = math.log(p99 / median) / _Z99 if p99 > median else 0.0
        return rng.lognormvariate(math.log(median), sigma)


@dataclass(frozen=True)
class Capacity:
    """Throughput limits, per partition key.

    DynamoDB holds a table's items in partitions, each serving at most 1,000 WCU/s and 3,000 RCU/s, and
    splits a busy partition until one key's items are alone; one key's writes can never exceed the
    partition's limit. The model gives every partition key a partition of its own from the start: the
    best case for spreading, and the exact case for a hot key such as a chain. The bucket holds one second
    of capacity (DynamoDB's burst, for an on-demand or amply provisioned table), full at the start.
    """

    partition_wcu: float = 1000.0
    partition_rcu: float = 3000.0
    burst_seconds: float = 1.0


@dataclass(frozen=True)
class SdkRetries:
    """The SDK's own retries of a throttled single-item request (``ProvisionedThroughputExceededException``).

    The defaults are the ledger's client: ``flowledger.store.aws`` makes it with botocore's standard retry
    mode and ``max_attempts=4``, and botocore (1.44) backs a throttling error off ``random() * min(1 s *
    2**i, 20 s)`` before retry ``i`` (0-based). Botocore's legacy DynamoDB mode (10 attempts) is a matter of
    setting these. A transaction cancelled for throttling (``TransactionCanceledException`` with
    ``ThrottlingError`` reasons) is never retried by botocore, in either mode: the caller sees it.
    """

    max_attempts: int = 4
    throttle_base_seconds: float = 1.0
    max_backoff_seconds: float = 20.0

    def delay(self, rng: random.Random, retry: int) -> float:
        return rng.random() * min(self.throttle_base_seconds * 2.0**retry, self.max_backoff_seconds)


# -- Billing ----------------------------------------------------------------------------------------------------


def write_units(size: int) -> int:
    """Write units of one item write: 1 per started KB, at least 1."""
    return max(1, math.ceil(size / 1024))


def read_units(size: int) -> int:
    """Read units of a strongly consistent read: 1 per started 4 KB, at least 1."""
    return max(1, math.ceil(size / 4096))


@dataclass
class ModelMeter:
    """Everything the model did, counted as DynamoDB would bill and report it; ``reset`` starts a window."""

    calls: Counter[str] = field(default_factory=Counter)  # API calls by operation (not SDK attempts)
    throttled: Counter[str] = field(default_factory=Counter)  # throttled attempts by operation (not billed)
    committed: int = 0  # transactions
    cancelled: Counter[str] = field(default_factory=Counter)  # cancelled transactions by reason
    wcu_committed: int = 0  # committed transactions: 2 WCU per KB per item
    wcu_cancelled: int = 0  # cancelled transactions' prepare: 1 WCU per KB per item
    wcu_single: int = 0  # PutItem and DeleteItem, failed conditional ones included
    wcu_single_failed: int = 0  # of which failed conditions
    wcu_index: int = 0  # global secondary index writes of committed writes
    rcu: int = 0
    meter_rule_wcu: int = 0  # bench/ledger.py Meter's rule: 2 WCU per KB of each Put of each transaction sent
    partition_wcu: Counter[Partition] = field(default_factory=Counter)  # base-table WCU by partition key
    index_partition_wcu: Counter[tuple[str, str, KeyValue]] = field(default_factory=Counter)  # (table, index, key)

    def reset(self) -> None:
        fresh = ModelMeter()
        self.__dict__.update(fresh.__dict__)

    def copy(self) -> ModelMeter:
        copied = ModelMeter()
        for name, value in self.__dict__.items():
            setattr(copied, name, value.copy() if isinstance(value, Counter) else value)
        return copied

    @property
    def wcu_total(self) -> int:
        return self.wcu_committed + self.wcu_cancelled + self.wcu_single + self.wcu_index


# -- Condition expressions ---------------------------------------------------------------------------------------

_FUNCTION = re.compile(r"(attribute_not_exists|attribute_exists)\s*\(\s*([#\w.]+)\s*\)", re.IGNORECASE)
_COMPARISON = re.compile(r"([#:\w.]+)\s*(<>|<=|>=|=|<|>)\s*([#:\w.]+)")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
Clause = tuple[str, str, str]  # ("exists" | "not_exists", path, "") or (operator, left, right)


def parse_condition(expression: str) -> list[list[Clause]]:
    """A condition as OR of ANDs of clauses; no parentheses, no NOT (the ledger needs neither)."""
    alternatives = []
    for alternative in re.split(r"\s+OR\s+", expression.strip(), flags=re.IGNORECASE):
        clauses: list[Clause] = []
        for text in re.split(r"\s+AND\s+", alternative.strip(), flags=re.IGNORECASE):
            if function := _FUNCTION.fullmatch(text.strip()):
                kind = "not_exists" if function[1].lower() == "attribute_not_exists" else "exists"
                clauses.append((kind, function[2], ""))
            elif comparison := _COMPARISON.fullmatch(text.strip()):
                clauses.append((comparison[2], comparison[1], comparison[3]))
            else:
                raise NotImplementedError(f"condition clause not modelled: {text!r}")
        alternatives.append(clauses)
    return alternatives


def _comparable(value: Mapping[str, Any] | None) -> tuple[str, Any] | None:
    if not value:
        return None
    kind, inner = next(iter(value.items()))
    return kind, Decimal(inner) if kind == "N" else inner


def evaluate_condition(expression: str, item: Item | None, names: Mapping[str, str], values: Mapping[str, Any]) -> bool:
    """Whether ``expression`` holds for ``item`` (None: no item), with DynamoDB's placeholders."""
    return any(all(_holds(clause, item, names, values) for clause in clauses) for clauses in _parsed(expression))


def _holds(clause: Clause, item: Item | None, names: Mapping[str, str], values: Mapping[str, Any]) -> bool:
    kind, left, right = clause
    if kind == "not_exists":
        return item is None or names.get(left, left) not in item
    if kind == "exists":
        return item is not None and names.get(left, left) in item
    a, b = _operand(left, item, names, values), _operand(right, item, names, values)
    if a is None or b is None:  # a missing attribute: the comparison is false
        return False
    if a[0] != b[0]:  # values of different types are never equal, nor ordered
        return kind == "<>"
    return _COMPARE[kind](a[1], b[1])


def _operand(token: str, item: Item | None, names: Mapping[str, str], values: Mapping[str, Any]) -> Any:
    if token.startswith(":"):
        return _comparable(values[token])
    return _comparable(item.get(names.get(token, token)) if item is not None else None)


_PARSED: dict[str, list[list[Clause]]] = {}


def _parsed(expression: str) -> list[list[Clause]]:
    if expression not in _PARSED:
        _PARSED[expression] = parse_condition(expression)
    return _PARSED[expression]


# -- Errors, shaped as botocore raises them ---------------------------------------------------------------------

_REASON_MESSAGES = {
    "None": None,
    "ConditionalCheckFailed": "The conditional request failed",
    "TransactionConflict": "Transaction is ongoing for the item",
    "ThrottlingError": "Throughput exceeds the current capacity of your table or index.",
}


def client_error(code: str, message: str, operation: str, **extra: Any) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400, "RetryAttempts": 0},
        **extra,
    }
    return ClientError(response, operation)


def cancellation(reasons: list[str]) -> ClientError:
    """A ``TransactionCanceledException`` with one reason per item, in order."""
    listed = [{"Code": code} | ({"Message": m} if (m := _REASON_MESSAGES[code]) else {}) for code in reasons]
    message = f"Transaction cancelled, please refer cancellation reasons for specific reasons [{', '.join(reasons)}]"
    return client_error("TransactionCanceledException", message, "TransactWriteItems", CancellationReasons=listed)


# -- The model ---------------------------------------------------------------------------------------------------


def default_tables() -> list[TableSpec]:
    """Every table, keyed and indexed as deployed (``flowledger.store.tables``)."""
    return list(TABLES)


@dataclass
class _Write:
    """One item of a request: a Put (``item``), a Delete or a ConditionCheck, and its condition."""

    kind: str
    table: str
    key: ItemId
    item: Item | None
    condition: str | None
    names: Mapping[str, str]
    values: Mapping[str, Any]
    size: int = field(init=False)  # bytes of the item written (0 for a Delete or a ConditionCheck)

    def __post_init__(self) -> None:
        self.size = item_size(self.item) if self.item is not None else 0


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens, self.at = tokens, at


class ModelDynamoDB:
    """A boto3 low-level DynamoDB client's methods, served by the model in simulated time.

    One instance is the service, shared by every writer (each writer's SDK retries run in its own task).
    Table names are the logical ones (``ledger``, ``claims_review``, ``ledger_leases``).
    """

    def __init__(
        self,
        engine: Engine,
        tables: Iterable[TableSpec] | None = None,
        latencies: Latencies | None = None,
        capacity: Capacity | None = None,
        retries: SdkRetries | None = None,
        seed: int = 0,
        meter: ModelMeter | None = None,
    ) -> None:
        self._engine = engine
        self._specs = {spec.name: spec for spec in (default_tables() if tables is None else tables)}
        self.latencies = latencies or Latencies()
        self.capacity = capacity or Capacity()
        self.retries = retries or SdkRetries()
        self._rng = random.Random(seed)
        self.meter = meter if meter is not None else ModelMeter()
        self._items: dict[Partition, dict[KeyValue | None, Item]] = {}
        self._newest: dict[Partition, KeyValue] = {}  # the running max sort key of each partition: its head
        self._held: dict[ItemId, int] = {}  # items taken by a prepared transaction, until its commit
        self._transactions = itertools.count(1)
        self._write_buckets: dict[Partition, _Bucket] = {}
        self._read_buckets: dict[Partition, _Bucket] = {}

    # -- The client's methods --------------------------------------------------------------------------------

    def transact_write_items(self, TransactItems: list[Mapping[str, Any]], **_: Any) -> dict[str, Any]:
        """Prepare at ``prepare_at`` of the service time, commit at ``commit_at``, answer at its end.

        The prepare evaluates every condition against committed state and takes every item; an item that
        another prepared transaction holds cancels this one (TransactionConflict at that index), as does a
        condition that fails (ConditionalCheckFailed). A cancellation is answered at the same time as a
        commit would be. No two items of one transaction may be the same item (ValidationException).
        """
        self.meter.calls["TransactWriteItems"] += 1
        writes = [self._transact_write(entry) for entry in TransactItems]
        self.meter.meter_rule_wcu += sum(2 * write_units(w.size) for w in writes if w.kind == "Put")
        if len({w.key for w in writes}) != len(writes):
            raise client_error(
                "ValidationException",
                "Transaction request cannot include multiple operations on one item",
                "TransactWriteItems",
            )
        service = self.latencies.draw(self._rng, transaction=True)
        self._engine.sleep(service * self.latencies.prepare_at)

        current = [self._stored(w.key) for w in writes]
        # DynamoDB bills a write by the larger of the item before and after, and a ConditionCheck by the item
        # checked: per KB, at least 1.
        units = [write_units(max(w.size, item_size(c) if c else 0)) for w, c in zip(writes, current, strict=True)]
        committed_cost = self._by_partition(writes, [2 * u for u in units])
        short = self._short(self._write_buckets, committed_cost, self.capacity.partition_wcu)
        if short:
            # Throttled at admission: not billed, and not retried by botocore (a TransactionCanceledException).
            self.meter.throttled["TransactWriteItems"] += 1
            self._engine.sleep(service * (1 - self.latencies.prepare_at))
            raise cancellation(["ThrottlingError" if (w.table, w.key[1]) in short else "None" for w in writes])

        reasons = []
        for write, item in zip(writes, current, strict=True):
            if write.key in self._held:
                reasons.append("TransactionConflict")
            elif write.condition and not evaluate_condition(write.condition, item, write.names, write.values):
                reasons.append("ConditionalCheckFailed")
            else:
                reasons.append("None")
        if any(reason != "None" for reason in reasons):
            # The model's assumption, from the two-phase protocol: DynamoDB bills the prepare of a cancelled
            # transaction, 1 WCU per KB per item (half a committed one's 2), against the same partitions.
            cost = self._by_partition(writes, units)
            self._consume(self._write_buckets, cost)
            self._bill_partitions(cost)
            self.meter.wcu_cancelled += sum(units)
            self.meter.cancelled[
                "TransactionConflict" if "TransactionConflict" in reasons else "ConditionalCheckFailed"
            ] += 1
            self._engine.sleep(service * (1 - self.latencies.prepare_at))
            raise cancellation(reasons)

        self._consume(self._write_buckets, committed_cost)
        self._bill_partitions(committed_cost)
        self.meter.wcu_committed += 2 * sum(units)
        transaction = next(self._transactions)
        for write in writes:
            self._held[write.key] = transaction
        self._engine.sleep(service * (self.latencies.commit_at - self.latencies.prepare_at))
        for write in writes:
            del self._held[write.key]
            if write.kind == "Put" and write.item is not None:
                self._apply_put(write.table, write.key, write.item, write.size)
            elif write.kind == "Delete":
                self._apply_delete(write.key)
        self.meter.committed += 1
        self._engine.sleep(service * (1 - self.latencies.commit_at))
        return {}

    def put_item(
        self,
        TableName: str,
        Item: Item,
        ConditionExpression: str | None = None,
        ExpressionAttributeNames: Mapping[str, str] | None = None,
        ExpressionAttributeValues: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        key = self._item_id(TableName, Item)
        write = _Write(
            "Put",
            TableName,
            key,
            Item,
            ConditionExpression,
            ExpressionAttributeNames or {},
            ExpressionAttributeValues or {},
        )
        return self._single_write("PutItem", write)

    def delete_item(
        self,
        TableName: str,
        Key: Item,
        ConditionExpression: str | None = None,
        ExpressionAttributeNames: Mapping[str, str] | None = None,
        ExpressionAttributeValues: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        key = self._item_id(TableName, Key)
        write = _Write(
            "Delete",
            TableName,
            key,
            None,
            ConditionExpression,
            ExpressionAttributeNames or {},
            ExpressionAttributeValues or {},
        )
        return self._single_write("DeleteItem", write)

    def get_item(
        self,
        TableName: str,
        Key: Item,
        ProjectionExpression: str | None = None,
        ExpressionAttributeNames: Mapping[str, str] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        key = self._item_id(TableName, Key)

        def read() -> dict[str, Any]:
            item = self._stored(key)
            return {"Item": _project(item, ProjectionExpression, ExpressionAttributeNames)} if item else {}

        return self._single_read("GetItem", (TableName, key[1]), lambda: self._stored(key), read)

    def query(
        self,
        TableName: str,
        KeyConditionExpression: str,
        ExpressionAttributeValues: Mapping[str, Any],
        ScanIndexForward: bool = True,
        Limit: int | None = None,
        ProjectionExpression: str | None = None,
        ExpressionAttributeNames: Mapping[str, str] | None = None,
        **rest: Any,
    ) -> dict[str, Any]:
        """Only the head read: the newest item of one partition (``chain_id = :c``, descending, ``Limit=1``)."""
        spec = self._specs[TableName]
        match = re.fullmatch(r"\s*([#\w]+)\s*=\s*(:\w+)\s*", KeyConditionExpression)
        name = match and (ExpressionAttributeNames or {}).get(match[1], match[1])
        if not match or name != spec.partition.name or ScanIndexForward or Limit != 1 or set(rest) - {"ConsistentRead"}:
            raise NotImplementedError(
                f"only the head read (newest item of a partition) is modelled: {KeyConditionExpression!r}"
            )
        partition = (TableName, _key_value(ExpressionAttributeValues[match[2]]))

        def newest() -> Item | None:
            sort = self._newest.get(partition)
            return None if sort is None else self._items[partition][sort]

        def read() -> dict[str, Any]:
            item = newest()
            if item is None:
                return {"Items": [], "Count": 0, "ScannedCount": 0}
            answer: dict[str, Any] = {
                "Items": [_project(item, ProjectionExpression, ExpressionAttributeNames)],
                "Count": 1,
                "ScannedCount": 1,
            }
            if len(self._items[partition]) > 1:  # Limit reached with items left: DynamoDB says where to go on
                answer["LastEvaluatedKey"] = {k: item[k] for k in _key_names(spec)}
            return answer

        return self._single_read("Query", partition, newest, read)

    # -- Single-item requests, with the SDK's retries ----------------------------------------------------------

    def _single_write(self, operation: str, write: _Write) -> dict[str, Any]:
        """Applied halfway through its service time, atomically; throttled attempts are retried by the SDK."""
        self.meter.calls[operation] += 1
        partition = (write.table, write.key[1])
        for attempt in range(self.retries.max_attempts):
            service = self.latencies.draw(self._rng, transaction=False)
            self._engine.sleep(service / 2)
            current = self._stored(write.key)
            units = write_units(max(write.size, item_size(current) if current else 0))
            if self._short(self._write_buckets, {partition: units}, self.capacity.partition_wcu):
                self._throttled(operation, attempt, service)
                continue
            if write.key in self._held:  # a prepared transaction has the item: refused, not retried by botocore
                self._engine.sleep(service / 2)
                raise client_error("TransactionConflictException", "Transaction is ongoing for the item", operation)
            self._consume(self._write_buckets, {partition: units})
            self._bill_partitions({partition: units})
            self.meter.wcu_single += units  # a failed condition is billed too
            if write.condition and not evaluate_condition(write.condition, current, write.names, write.values):
                self.meter.wcu_single_failed += units
                self._engine.sleep(service / 2)
                raise client_error("ConditionalCheckFailedException", "The conditional request failed", operation)
            if write.kind == "Put" and write.item is not None:
                self._apply_put(write.table, write.key, write.item, write.size)
            else:
                self._apply_delete(write.key)
            self._engine.sleep(service / 2)
            return {}
        raise self._throughput_exceeded(operation)

    def _single_read(
        self,
        operation: str,
        partition: Partition,
        weighed: Callable[[], Item | None],
        read: Callable[[], dict[str, Any]],
    ) -> dict[str, Any]:
        """A strongly consistent read of committed state halfway through its service time: 1 RCU per 4 KB."""
        self.meter.calls[operation] += 1
        for attempt in range(self.retries.max_attempts):
            service = self.latencies.draw(self._rng, transaction=False)
            self._engine.sleep(service / 2)
            item = weighed()
            units = read_units(item_size(item) if item else 0)  # DynamoDB weighs the whole item, not the projection
            if self._short(self._read_buckets, {partition: units}, self.capacity.partition_rcu):
                self._throttled(operation, attempt, service)
                continue
            self._consume(self._read_buckets, {partition: units})
            self.meter.rcu += units
            answer = read()
            self._engine.sleep(service / 2)
            return answer
        raise self._throughput_exceeded(operation)

    def _throttled(self, operation: str, attempt: int, service: float) -> None:
        """A throttled attempt: not billed; the SDK backs off before the next one (if any)."""
        self.meter.throttled[operation] += 1
        self._engine.sleep(service / 2)
        if attempt + 1 < self.retries.max_attempts:
            self._engine.sleep(self.retries.delay(self._rng, attempt))

    @staticmethod
    def _throughput_exceeded(operation: str) -> ClientError:
        return client_error(
            "ProvisionedThroughputExceededException",
            "The level of configured provisioned throughput for the table was exceeded.",
            operation,
        )

    # -- State -----------------------------------------------------------------------------------------------

    def _transact_write(self, entry: Mapping[str, Any]) -> _Write:
        (kind, body), *more = entry.items()
        if more or kind not in ("Put", "Delete", "ConditionCheck"):
            raise NotImplementedError(f"transaction item not modelled: {sorted(entry)}")
        item = body.get("Item") if kind == "Put" else None
        key = self._item_id(body["TableName"], item if item is not None else body["Key"])
        names, values = body.get("ExpressionAttributeNames", {}), body.get("ExpressionAttributeValues", {})
        return _Write(kind, body["TableName"], key, item, body.get("ConditionExpression"), names, values)

    def _item_id(self, table: str, item: Mapping[str, Any]) -> ItemId:
        spec = self._specs[table]
        sort = _key_value(item[spec.sort.name]) if spec.sort else None
        return table, _key_value(item[spec.partition.name]), sort

    def _stored(self, key: ItemId) -> Item | None:
        partition = self._items.get((key[0], key[1]))
        return None if partition is None else partition.get(key[2])

    def _apply_put(self, table: str, key: ItemId, item: Item, size: int) -> None:
        partition = (table, key[1])
        self._items.setdefault(partition, {})[key[2]] = item
        newest = self._newest.get(partition)
        if key[2] is not None and (newest is None or key[2] > newest):  # type: ignore[operator]
            self._newest[partition] = key[2]
        self._bill_indexes(table, item, size)

    def _apply_delete(self, key: ItemId) -> None:
        partition = (key[0], key[1])
        items = self._items.get(partition, {})
        items.pop(key[2], None)
        if key[2] is not None and self._newest.get(partition) == key[2]:
            sorts = [sort for sort in items if sort is not None]
            if sorts:
                self._newest[partition] = max(sorts)
            else:
                del self._newest[partition]

    def _bill_indexes(self, table: str, item: Item, size: int) -> None:
        """A committed write to an item that carries an index's keys writes that index too (1 WCU per KB).

        The index entry is the table's keys, the index's keys and the projected attributes. (An update that
        changes an index key would write the index twice; the ledger's items are never updated.)
        """
        spec = self._specs[table]
        for index in spec.indexes:
            if index.partition.name not in item or (index.sort and index.sort.name not in item):
                continue
            projected = size if index.include is None else item_size(_index_entry(spec, index, item))
            units = write_units(projected)
            self.meter.wcu_index += units
            self.meter.index_partition_wcu[(table, index.name, _key_value(item[index.partition.name]))] += units

    # -- Capacity ------------------------------------------------------------------------------------------------

    @staticmethod
    def _by_partition(writes: list[_Write], units: list[int]) -> dict[Partition, int]:
        cost: Counter[Partition] = Counter()
        for write, unit in zip(writes, units, strict=True):
            cost[(write.table, write.key[1])] += unit
        return dict(cost)

    def _short(self, buckets: dict[Partition, _Bucket], cost: Mapping[Partition, int], rate: float) -> set[Partition]:
        """The partitions whose bucket (refilled to now) holds fewer tokens than ``cost`` asks of them."""
        now, depth = self._engine.now(), rate * self.capacity.burst_seconds
        short = set()
        for partition, units in cost.items():
            bucket = buckets.get(partition)
            if bucket is None:
                bucket = buckets[partition] = _Bucket(depth, now)
            bucket.tokens = min(depth, bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens < units:
                short.add(partition)
        return short

    @staticmethod
    def _consume(buckets: dict[Partition, _Bucket], cost: Mapping[Partition, int]) -> None:
        for partition, units in cost.items():  # refilled to now by _short, just before
            buckets[partition].tokens -= units

    def _bill_partitions(self, cost: Mapping[Partition, int]) -> None:
        for partition, units in cost.items():
            self.meter.partition_wcu[partition] += units


def _key_value(value: Mapping[str, Any]) -> KeyValue:
    kind, inner = next(iter(value.items()))
    if kind == "N":
        return Decimal(inner)
    if kind in ("S", "B"):
        return inner  # type: ignore[no-any-return]
    raise ValueError(f"a key attribute is S, N or B, not {kind}")


def _key_names(spec: TableSpec) -> list[str]:
    return [spec.partition.name, *([spec.sort.name] if spec.sort else [])]


def _index_entry(spec: TableSpec, index: Index, item: Item) -> Item:
    """What an index that projects ``index.include`` holds of ``item``."""
    names = {
        *_key_names(spec),
        index.partition.name,
        *([index.sort.name] if index.sort else []),
        *(index.include or ()),
    }
    return {name: value for name, value in item.items() if name in names}


def _project(item: Item, projection: str | None, names: Mapping[str, str] | None) -> Item:
    if not projection:
        return item
    wanted = {(names or {}).get(token.strip(), token.strip()) for token in projection.split(",")}
    return {name: value for name, value in item.items() if name in wanted}
