"""16 writers on 4 chains against the locked moto server: no gap, no fork, one event per item."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.ledger.chain import verify_chain
from flowledger.ledger.events import AuditEntry
from flowledger.ledger.store import Ledger
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

WRITERS = 16
WRITES_EACH = 10
SHARDS = 4


@pytest.mark.usefixtures("clean_environment")
def test_concurrent_audited_writes_keep_every_chain_whole(locked_moto: str) -> None:
    settings = load_settings(aws_endpoint_url=locked_moto, resource_prefix="ledgerconc", ledger_shards=SHARDS)
    aws = build_services(settings, EMBEDDED_CREDENTIALS).aws
    for table in ("ledger", "claims_review"):
        create_table(aws, table_spec(table))
    start = threading.Barrier(WRITERS)

    def writer(number: int) -> None:
        # Each writer is its own process in production: its own client and its own head cache.
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        ledger = Ledger(
            services.aws.dynamodb, services.aws.table_name("ledger"), SHARDS, services.clock, max_attempts=200
        )
        start.wait()
        for n in range(WRITES_EACH):
            claim_id = f"w{number}-{n}"
            put = {
                "Put": {"TableName": services.aws.table_name("claims_review"), "Item": {"claim_id": {"S": claim_id}}}
            }
            ledger.append(
                AuditEntry(
                    action="reasoning.claims_pending_review.marked",
                    actor=f"writer:{number}",
                    subject=f"claim:{n % 8}",
                    refs={"claim_id": claim_id},
                ),
                [put],
            )

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(writer, range(WRITERS)))

    reader = Ledger(aws.dynamodb, aws.table_name("ledger"), SHARDS, lambda: None)  # type: ignore[arg-type,return-value]
    events = []
    for chain_id in reader.chain_ids():
        chain = list(reader.read_chain(chain_id))
        assert [e.seq for e in chain] == list(range(1, len(chain) + 1)), f"{chain_id} has a gap"
        assert verify_chain(chain_id, chain).bad is None, f"{chain_id} forked or broke"
        events += chain
    items = aws.dynamodb.scan(TableName=aws.table_name("claims_review"))["Items"]
    per_item = Counter(event.refs["claim_id"] for event in events)
    assert len(items) == WRITERS * WRITES_EACH
    assert per_item == {item["claim_id"]["S"]: 1 for item in items}
    assert len({e.chain_id for e in events}) > 1


@pytest.mark.usefixtures("clean_environment")
def test_writers_that_lease_their_chains_never_cancel_each_other(locked_moto: str) -> None:
    chains = 2 * WRITERS  # the setting's advice: twice the writers that append at once
    settings = load_settings(aws_endpoint_url=locked_moto, resource_prefix="ledgerlease", ledger_shards=chains)
    aws = build_services(settings, EMBEDDED_CREDENTIALS).aws
    for table in ("ledger", "ledger_leases", "claims_review"):
        create_table(aws, table_spec(table))
    start = threading.Barrier(WRITERS)
    cancelled: list[str] = []

    def count_cancelled(http_response: object, parsed: dict[str, Any], **_: object) -> None:
        if "Error" in parsed:
            cancelled.append(parsed["Error"].get("Code", "?"))

    def writer(number: int) -> None:
        services = build_services(settings, EMBEDDED_CREDENTIALS)  # its own process: client, head cache, lease
        services.aws.dynamodb.meta.events.register("after-call.dynamodb.TransactWriteItems", count_cancelled)
        start.wait()
        for n in range(WRITES_EACH):
            claim_id = f"w{number}-{n}"
            put = {
                "Put": {"TableName": services.aws.table_name("claims_review"), "Item": {"claim_id": {"S": claim_id}}}
            }
            entry = AuditEntry(
                action="reasoning.claims_pending_review.marked", actor=f"writer:{number}", subject=f"claim:{claim_id}"
            )
            services.ledger.append(entry, [put])

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(writer, range(WRITERS)))

    reader = Ledger(aws.dynamodb, aws.table_name("ledger"), chains, lambda: None)  # type: ignore[arg-type,return-value]
    writers_of: dict[str, set[str]] = {}
    for chain_id in reader.chain_ids():
        chain = list(reader.read_chain(chain_id))
        assert [e.seq for e in chain] == list(range(1, len(chain) + 1)), f"{chain_id} has a gap"
        assert verify_chain(chain_id, chain).bad is None, f"{chain_id} forked or broke"
        for event in chain:
            writers_of.setdefault(event.actor, set()).add(chain_id)
    assert cancelled == []  # no writer ever lost a race: each appended to a chain of its own
    assert len(writers_of) == WRITERS
    assert all(len(chain_ids) == 1 for chain_ids in writers_of.values())
    assert len(set().union(*writers_of.values())) == WRITERS  # sixteen writers, sixteen chains
