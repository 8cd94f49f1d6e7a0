"""Audited writes against the locked moto server: throughput, requests and write units per write.

Write units are computed from the items sent, with DynamoDB's sizing rules (moto reports no
consumed capacity): a transactional write costs 2 units per started KB of each item.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flowledger.config import load_settings
from flowledger.ledger.events import AuditEntry
from flowledger.ledger.store import Ledger
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

SHARDS = 16
WRITES = {1: 300, 8: 480}
PARTITION_WCU = 1000


def attribute_size(value: dict[str, Any]) -> int:
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        return len(inner.lstrip("-").replace(".", "")) // 2 + 2
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    if kind == "B":
        return len(inner)
    # A set is the sum of its elements' sizes (DynamoDB's item size rules).
    if kind == "SS":
        return sum(len(element.encode()) for element in inner)
    if kind == "NS":
        return sum(attribute_size({"N": element}) for element in inner)
    if kind == "BS":
        return sum(len(element) for element in inner)
    raise ValueError(kind)


def item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


class Meter:
    """Counts requests and transactional write units on one client through botocore's hooks."""

    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.write_units = 0
        self.per_transaction: list[int] = []
        self.items_per_transaction: list[int] = []
        client.meta.events.register("before-parameter-build.dynamodb.*", self._count)

    def _count(self, event_name: str, params: dict[str, Any], **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        self.calls[operation] += 1
        if operation == "TransactWriteItems":
            # Put items are priced by their size; Update and ConditionCheck items by the caller.
            units = sum(
                2 * math.ceil(item_size(entry["Put"]["Item"]) / 1024)
                for entry in params["TransactItems"]
                if "Put" in entry
            )
            self.write_units += units
            self.per_transaction.append(units)
            self.items_per_transaction.append(len(params["TransactItems"]))


def run(endpoint: str, threads: int, total: int, run_id: str) -> tuple[float, list[Meter]]:
    settings = load_settings(aws_endpoint_url=endpoint, resource_prefix=f"bench{run_id}", ledger_shards=SHARDS)
    aws = build_services(settings, EMBEDDED_CREDENTIALS).aws
    for table in ("ledger", "claims_review"):
        create_table(aws, table_spec(table))
    meters: list[Meter] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def writer(number: int) -> None:
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        meter = Meter(services.aws.dynamodb)
        with lock:
            meters.append(meter)
        ledger = Ledger(
            services.aws.dynamodb, services.aws.table_name("ledger"), SHARDS, services.clock, max_attempts=100
        )
        table = services.aws.table_name("claims_review")
        start.wait()
        for n in range(total // threads):
            claim = f"claim-{number}-{n}"
            item = {
                "claim_id": {"S": claim},
                "status": {"S": "pending"},
                "reason": {"S": "claim_rejected"},
                "created_at": {"S": "2026-11-30T12:00:00.000000Z"},
            }
            ledger.append(
                AuditEntry(
                    action="reasoning.claims_pending_review.marked",
                    actor="arn:aws:iam::1:role/op",
                    subject=f"claim:{claim}",
                    payload={"retry_count": 0},
                ),
                [{"Put": {"TableName": table, "Item": item}}],
            )

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(writer, n) for n in range(threads)]
        start.wait()
        began = time.perf_counter()
        for future in futures:
            future.result()
        elapsed = time.perf_counter() - began
    return total / elapsed, meters


def main() -> int:
    server = LockedMotoServer()
    endpoint = server.start()
    try:
        print(f"audited writes (one domain item + its event), {SHARDS} chains, locked moto server")
        print(
            f"{'threads':>7} {'writes/s':>9} {'requests/write':>15} {'reads/write':>12} "
            f"{'WCU/write':>10} {'WCU/txn median':>15}   (per write: all attempts, cancelled ones included)"
        )
        failed = False
        for threads, total in WRITES.items():
            rate, meters = run(endpoint, threads, total, f"{threads}t{int(time.time())}")
            calls = sum((m.calls for m in meters), Counter())
            units = sum(m.write_units for m in meters)
            per_txn = [u for m in meters for u in m.per_transaction]
            requests = sum(calls.values()) / total
            print(
                f"{threads:>7} {rate:>9.0f} {requests:>15.2f} {calls['Query'] / total:>12.2f} "
                f"{units / total:>10.2f} {statistics.median(per_txn):>15.0f}"
            )
            failed |= statistics.median(per_txn) > 4
        event_units = 2  # a transactional put of one event item under 1 KB
        per_chain = PARTITION_WCU // event_units
        print("target: 1 transaction of at most 4 WCU per audited write (+1 read when the head is not cached)")
        print("  plus 1 WCU per write on the by_subject index (its keys and action: well under 1 KB)")
        print(
            f"each chain is one partition key ({PARTITION_WCU} WCU/s) and each audited write puts {event_units} WCU "
            f"on it: {per_chain}/s a chain counting write units alone; a chain also takes one append per "
            "transaction round trip, and writers sharing one cancel each other: bench/ledger_scale.py models that"
        )
        return 1 if failed else 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
