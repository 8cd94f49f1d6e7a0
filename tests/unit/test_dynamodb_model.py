"""The DynamoDB model behind ``bench/ledger_scale.py`` keeps the semantics its figures rest on.

Rivals on one chain: one commits, the other is cancelled and its prepare billed; a partition key past its
1,000 WCU/s is throttled as botocore reports it; and one writer costs one transaction per audited write.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from botocore.exceptions import ClientError

from flowledger.errors import LedgerContention
from flowledger.ledger.events import AuditEntry
from flowledger.ledger.store import Ledger
from tests.bench_modules import bench_module


@pytest.fixture(scope="module")
def model() -> ModuleType:
    return bench_module("dynamodb_model")


def audited_write(n: int) -> tuple[AuditEntry, list[dict[str, Any]]]:
    entry = AuditEntry(action="reasoning.claims_pending_review.marked", actor="user:a", subject=f"claim:c{n}")
    return entry, [{"Put": {"TableName": "claims_review", "Item": {"claim_id": {"S": f"c{n}"}}}}]


def run(model: ModuleType, *tasks: Callable[[Any, Any], None]) -> Any:
    """Run each task (given the engine and the client) in a simulated writer of its own; the client after."""
    engine = model.Engine()
    client = model.ModelDynamoDB(engine, seed=7)
    for task in tasks:
        engine.spawn(lambda task=task: task(engine, client))
    engine.run()
    return client


def test_rivals_on_a_chain_one_commits_the_other_is_cancelled_and_its_prepare_billed(model: ModuleType) -> None:
    outcomes: list[str] = []

    def writer(n: int) -> Callable[[Any, Any], None]:
        def write(engine: Any, client: Any) -> None:
            # One chain, one attempt: both read the empty chain's head, both take position 1.
            ledger = Ledger(client, "ledger", 1, engine.clock, max_attempts=1, sleep=engine.sleep)
            try:
                ledger.append(*audited_write(n))
                outcomes.append("committed")
            except LedgerContention:
                outcomes.append("contention")

        return write

    meter = run(model, writer(1), writer(2)).meter

    assert sorted(outcomes) == ["committed", "contention"]
    assert meter.committed == 1
    assert sum(meter.cancelled.values()) == 1
    assert set(meter.cancelled) <= {"ConditionalCheckFailed", "TransactionConflict"}
    # Two items under 1 KB each: 2 WCU apiece committed, 1 apiece for the cancelled prepare.
    assert (meter.wcu_committed, meter.wcu_cancelled) == (4, 2)


def test_a_failed_condition_cancels_with_one_reason_per_item_in_order(model: ModuleType) -> None:
    errors: list[ClientError] = []
    event = {"chain_id": {"S": "chain-000"}, "seq": {"N": "1"}}
    put = {"Put": {"TableName": "ledger", "Item": event, "ConditionExpression": "attribute_not_exists(seq)"}}
    claim = {"Put": {"TableName": "claims_review", "Item": {"claim_id": {"S": "c"}}}}

    def write_twice(engine: Any, client: Any) -> None:
        client.transact_write_items(TransactItems=[put])
        try:
            client.transact_write_items(TransactItems=[claim, put])
        except ClientError as exc:
            errors.append(exc)

    run(model, write_twice)

    (error,) = errors
    assert error.response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in error.response["CancellationReasons"]] == ["None", "ConditionalCheckFailed"]


def test_a_partition_key_past_1000_wcu_per_second_is_throttled(model: ModuleType) -> None:
    codes: list[str] = []
    padding = {"S": "x" * 3900}  # a 4 KB item: 8 WCU a committed transaction, so 125 empty a full bucket

    def writer(seq: int) -> Callable[[Any, Any], None]:
        def write(engine: Any, client: Any) -> None:
            item = {"chain_id": {"S": "chain-000"}, "seq": {"N": str(seq)}, "pad": padding}
            try:
                client.transact_write_items(TransactItems=[{"Put": {"TableName": "ledger", "Item": item}}])
                codes.append("None")
            except ClientError as exc:
                codes.extend(reason["Code"] for reason in exc.response["CancellationReasons"])

        return write

    meter = run(model, *(writer(seq) for seq in range(1, 201))).meter

    # All 200 at once: the bucket holds 1,000 WCU and refills 1,000 WCU/s, a few units in a transaction's time.
    assert 125 <= codes.count("None") <= 130
    assert codes.count("ThrottlingError") == 200 - codes.count("None") == meter.throttled["TransactWriteItems"]
    assert meter.wcu_committed == 8 * codes.count("None")  # throttled requests are not billed


def test_a_condition_on_a_lease_reads_names_numbers_and_alternatives(model: ModuleType) -> None:
    free = "attribute_not_exists(chain_id) OR #until < :now OR holder = :me"
    names = {"#until": "until"}
    held = {"chain_id": {"S": "chain-001"}, "holder": {"S": "a"}, "until": {"N": "100.5"}}

    def holds(item: dict[str, Any] | None, now: str, me: str) -> bool:
        return bool(model.evaluate_condition(free, item, names, {":now": {"N": now}, ":me": {"S": me}}))

    assert holds(None, "1", "b")
    assert not holds(held, "100.25", "b")  # numbers compare as numbers, not as text
    assert holds(held, "100.75", "b")
    assert holds(held, "1", "a")


@pytest.mark.parametrize("leased", [False, True], ids=["today", "leased"])
def test_one_writer_costs_one_transaction_per_write_after_the_first(model: ModuleType, leased: bool) -> None:
    def write(engine: Any, client: Any) -> None:
        leases: dict[str, Any] = {}
        if leased:
            from flowledger.ledger.leases import ChainLeases

            leases["leases"] = ChainLeases(client, "ledger_leases")
        ledger = Ledger(client, "ledger", 16, engine.clock, sleep=engine.sleep, **leases)
        for n in range(20):
            ledger.append(*audited_write(n))

    meter = run(model, write).meter

    # The first write reads the head (and claims a lease); every write is then one transaction that commits.
    assert dict(meter.calls) == {"Query": 1, "TransactWriteItems": 20} | ({"PutItem": 1} if leased else {})
    assert meter.committed == 20
    assert not meter.cancelled
