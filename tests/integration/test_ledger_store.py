"""Audited writes on DynamoDB (moto in-process): atomic, cached, and all-or-nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from flowledger.errors import ConditionFailed, LedgerContention
from flowledger.ledger.audit import checkpoints_of, prove, take_checkpoint, verify_ledger
from flowledger.ledger.events import AuditEntry, event_id, seal
from flowledger.ledger.proofs import check_proof
from flowledger.ledger.store import Ledger, to_item
from flowledger.services import Services


@pytest.fixture
def services(services: Services) -> Services:
    services.clock = lambda: datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    return services


@pytest.fixture
def ledger(services: Services) -> Ledger:
    return services.ledger


@pytest.fixture
def calls(services: Services) -> Iterator[Counter[str]]:
    """DynamoDB operations made, counted with botocore's event hooks."""
    counter: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        counter[event_name.rsplit(".", 1)[-1]] += 1

    services.aws.dynamodb.meta.events.register("before-call.dynamodb.*", count)
    yield counter
    services.aws.dynamodb.meta.events.unregister("before-call.dynamodb.*", count)


def claim_put(services: Services, claim_id: str, condition: str | None = None) -> dict[str, Any]:
    put: dict[str, Any] = {
        "TableName": services.aws.table_name("claims_review"),
        "Item": {"claim_id": {"S": claim_id}, "status": {"S": "pending"}},
    }
    if condition:
        put["ConditionExpression"] = condition
    return {"Put": put}


def entry(subject: str, action: str = "reasoning.claims_pending_review.marked") -> AuditEntry:
    return AuditEntry(action=action, actor="arn:aws:iam::1:user/op", subject=subject, payload={"count": 1})


def claim_exists(services: Services, claim_id: str) -> bool:
    response = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("claims_review"), Key={"claim_id": {"S": claim_id}}
    )
    return "Item" in response


def test_domain_item_and_event_are_written_together(services: Services, ledger: Ledger) -> None:
    event = ledger.append(entry("claim:c1"), [claim_put(services, "c1")])
    assert claim_exists(services, "c1")
    assert ledger.event(event.chain_id, event.seq) == event
    assert event.seq == 1 and event.chain_id in ledger.chain_ids()


def test_a_warm_append_is_one_request_and_a_cold_one_adds_one_read(
    services: Services, calls: Counter[str], fresh_ledger: Any
) -> None:
    cold = fresh_ledger(services)
    cold.append(entry("claim:a"), [claim_put(services, "a")])
    assert calls == {"TransactWriteItems": 1, "Query": 1}
    calls.clear()
    cold.append(entry("claim:a"), [claim_put(services, "a2")])
    assert calls == {"TransactWriteItems": 1}


def test_a_stale_cached_head_retries_at_the_next_position(services: Services) -> None:
    first, second = (Ledger(services.aws.dynamodb, services.aws.table_name("ledger"), 1, services.clock) for _ in "12")
    first.append(entry("flow:x"))
    second.append(entry("flow:x"))  # second now caches seq 2
    third = first.append(entry("flow:x"))  # first's cache says seq 1: its write at 2 collides, then lands at 3
    assert third.seq == 3
    assert [e.seq for e in first.read_chain(third.chain_id)] == [1, 2, 3]


def test_a_writer_that_loses_its_position_moves_to_another_chain_and_stays(
    services: Services, calls: Counter[str], fresh_ledger: Any
) -> None:
    rival, writer = fresh_ledger(services), fresh_ledger(services)
    taken = writer.append(entry("flow:x"))
    for _ in range(2):  # the rival writes twice on the writer's chain, so the writer's cached head is stale
        rival._writer.chain = taken.chain_id
        rival.append(entry("flow:y"))
    moved = writer.append(entry("flow:x"))
    assert moved.chain_id != taken.chain_id
    calls.clear()
    again = writer.append(entry("flow:x"))
    assert again.chain_id == moved.chain_id and calls == {"TransactWriteItems": 1}


def test_a_failed_condition_on_the_callers_item_writes_nothing(services: Services, ledger: Ledger) -> None:
    ledger.append(entry("claim:dup"), [claim_put(services, "dup")])
    with pytest.raises(ConditionFailed) as caught:
        ledger.append(entry("claim:dup"), [claim_put(services, "dup", "attribute_not_exists(claim_id)")])
    assert caught.value.index == 0
    assert [e.seq for c in ledger.chain_ids() for e in ledger.read_chain(c)] == [1]


def test_contention_beyond_the_bound_leaves_neither_item_nor_event(services: Services) -> None:
    ledger = Ledger(
        services.aws.dynamodb,
        services.aws.table_name("ledger"),
        16,
        services.clock,
        max_attempts=3,
        sleep=lambda _: None,
    )
    rival = entry("claim:hot", action="reasoning.research.backlog.dispatched")

    def rival_takes_the_next_position(params: dict[str, Any], **_: Any) -> None:
        # Another writer lands on the position this append is about to claim, every time, on every chain.
        chain_id = params["TransactItems"][-1]["Put"]["Item"]["chain_id"]["S"]
        head = ledger.head(chain_id)
        event = seal(rival, chain_id, head.seq + 1, head.hash, services.clock())
        services.aws.dynamodb.put_item(TableName=services.aws.table_name("ledger"), Item=to_item(event))

    services.aws.dynamodb.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems", rival_takes_the_next_position
    )
    try:
        with pytest.raises(LedgerContention, match="nothing was written"):
            ledger.append(entry("claim:hot"), [claim_put(services, "hot")])
    finally:
        services.aws.dynamodb.meta.events.unregister(
            "before-parameter-build.dynamodb.TransactWriteItems", rival_takes_the_next_position
        )
    assert not claim_exists(services, "hot")
    written = {e.action for c in ledger.chain_ids() for e in ledger.read_chain(c)}
    assert written == {"reasoning.research.backlog.dispatched"}


def test_throttling_leaves_neither_item_nor_event(services: Services, ledger: Ledger) -> None:
    def throttled(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        # What DynamoDB answers every attempt while a partition is throttled (after botocore's retries).
        error = {
            "Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://dynamodb.us-east-1.amazonaws.com", 400, {}, None), error

    services.aws.dynamodb.meta.events.register("before-call.dynamodb.TransactWriteItems", throttled)
    try:
        with pytest.raises(ClientError, match="ThrottlingException"):
            ledger.append(entry("claim:slow"), [claim_put(services, "slow")])
    finally:
        services.aws.dynamodb.meta.events.unregister("before-call.dynamodb.TransactWriteItems", throttled)
    assert not claim_exists(services, "slow")
    assert [e for c in ledger.chain_ids() for e in ledger.read_chain(c)] == []


def test_checkpoint_verify_and_prove_over_the_stored_ledger(services: Services, ledger: Ledger) -> None:
    events = [ledger.append(entry(f"flow:{n % 5}")) for n in range(30)]
    store = checkpoints_of(services)
    first = take_checkpoint(ledger, store, services)
    assert first["events"] == 30
    assert take_checkpoint(ledger, store, services)["skipped"] == "no chain moved"
    report = verify_ledger(ledger, store)
    assert report.ok and report.events_checked == 30 and report.scanned_for_strays
    proof = prove(ledger, store, events[3].event_id)
    assert check_proof(proof.to_bytes()).event == events[3]


def test_verify_names_the_first_tampered_event(services: Services, ledger: Ledger) -> None:
    events = [ledger.append(entry("flow:one")) for _ in range(6)]
    take_checkpoint(ledger, checkpoints_of(services), services)
    victim = events[2]
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("ledger"),
        Key={"chain_id": {"S": victim.chain_id}, "seq": {"N": str(victim.seq)}},
        UpdateExpression="SET actor = :a",
        ExpressionAttributeValues={":a": {"S": "user:mallory"}},
    )
    report = verify_ledger(ledger, checkpoints_of(services))
    assert not report.ok
    assert [(f.where, f.problem) for f in report.findings] == [(f"{victim.chain_id}.3", "hash")]


def test_a_deleted_tail_is_caught_through_the_checkpoint(services: Services, ledger: Ledger) -> None:
    events = [ledger.append(entry("flow:tail")) for _ in range(4)]
    take_checkpoint(ledger, checkpoints_of(services), services)
    services.aws.dynamodb.delete_item(
        TableName=services.aws.table_name("ledger"), Key={"chain_id": {"S": events[-1].chain_id}, "seq": {"N": "4"}}
    )
    found = verify_ledger(ledger, checkpoints_of(services)).findings
    assert [(f.where, f.problem) for f in found] == [(f"{events[-1].chain_id}.4", "missing")]


def test_event_ids_name_their_position(ledger: Ledger) -> None:
    event = ledger.append(entry("flow:id"))
    assert event.event_id == event_id(event.chain_id, event.seq)


def test_append_all_chains_its_events_at_consecutive_positions_with_the_items(
    services: Services, ledger: Ledger, calls: Counter[str]
) -> None:
    ledger.append(entry("claim:first"))
    calls.clear()
    events = ledger.append_all([entry(f"claim:b{n}") for n in range(3)], [claim_put(services, "b")])
    assert calls == {"TransactWriteItems": 1}  # the head is cached: one request for the whole batch
    assert [e.seq for e in events] == [2, 3, 4] and len({e.chain_id for e in events}) == 1
    assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
    assert list(ledger.read_chain(events[0].chain_id))[1:] == events and claim_exists(services, "b")
    assert verify_ledger(ledger, checkpoints_of(services)).ok
    following = ledger.append(entry("claim:after"))
    assert (following.seq, following.prev_hash) == (5, events[-1].hash)  # the cache moved to the batch's end


def test_append_all_that_collides_with_a_rival_lands_whole_after_it(services: Services) -> None:
    first, rival = (Ledger(services.aws.dynamodb, services.aws.table_name("ledger"), 1, services.clock) for _ in "12")
    first.append(entry("flow:x"))
    rival.append(entry("flow:y"))  # takes seq 2, which first's cached head would give its batch
    events = first.append_all([entry("flow:x"), entry("flow:x")])
    assert [e.seq for e in events] == [3, 4]
    assert [e.seq for e in first.read_chain(events[0].chain_id)] == [1, 2, 3, 4]
    assert verify_ledger(first, checkpoints_of(services)).ok


def test_append_all_beyond_one_transaction_is_refused_before_anything_is_sent(
    services: Services, ledger: Ledger, calls: Counter[str]
) -> None:
    with pytest.raises(ValueError, match="exceed one transaction"):
        ledger.append_all([entry("claim:x")] * 51, [claim_put(services, f"c{n}") for n in range(50)])
    assert calls == {} and not claim_exists(services, "c0")
