"""The audit function's admin routes, invoked with API Gateway events against moto."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.ledger.audit import checkpoints_of, take_checkpoint
from flowledger.ledger.events import GENESIS_HASH, AuditEntry, AuditEvent, seal
from flowledger.ledger.store import to_item
from flowledger.services import Services

ADMIN = "arn:aws:sts::123456789012:assumed-role/operator/jane"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def stored(services: Services) -> list[AuditEvent]:
    ticks = iter(range(1000))
    services.clock = lambda: T0 + timedelta(minutes=next(ticks))
    return [
        services.ledger.append(AuditEntry(action=action, actor="user:a", subject=f"flow:{n % 3}"))
        for n, action in enumerate(["reasoning.flow.started", "reasoning.step.created"] * 5)
    ]


@pytest.fixture
def get(load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Callable[..., tuple[int, Any]]:
    handler = load_function("audit").handler

    def call(path: str, user_arn: str | None = ADMIN, **query: str) -> tuple[int, Any]:
        response = handler(rest_event("GET", path, user_arn=user_arn, query=query or None), lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return call


def test_admin_reads_every_event_page_by_page(stored: list[AuditEvent], get: Any) -> None:
    seen, cursor, pages = [], None, 0
    while True:
        status, body = get("/admin/v1/audit/events", limit="3", **({"cursor": cursor} if cursor else {}))
        assert status == 200 and len(body["events"]) <= 3
        seen += [event["event_id"] for event in body["events"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(event.event_id for event in stored) and pages >= 4


def test_subject_action_and_since_filter(stored: list[AuditEvent], get: Any) -> None:
    _, by_subject = get("/admin/v1/audit/events", subject="flow:1")
    assert {e["subject"] for e in by_subject["events"]} == {"flow:1"} and len(by_subject["events"]) == 3
    _, by_action = get("/admin/v1/audit/events", action="reasoning.step.created")
    assert len(by_action["events"]) == 5
    _, recent = get("/admin/v1/audit/events", since=(T0 + timedelta(minutes=7)).isoformat())
    assert sorted(e["event_id"] for e in recent["events"]) == sorted(e.event_id for e in stored[7:])


def test_a_subjects_events_come_page_by_page_in_time_order_from_every_chain(
    stored: list[AuditEvent], get: Any, services: Services
) -> None:
    # Another writer thread appends to the chain it picks: the index still lists it in order.
    mine = [e for e in stored if e.subject == "flow:1"]
    other = ThreadPoolExecutor(1).submit(
        services.ledger.append, AuditEntry(action="reasoning.flow.closed", actor="user:b", subject="flow:1")
    )
    mine.append(other.result())
    seen, cursor = [], None
    while True:
        query = {"subject": "flow:1", "limit": "1"} | ({"cursor": cursor} if cursor else {})
        status, body = get("/admin/v1/audit/events", **query)
        assert status == 200 and len(body["events"]) <= 1
        seen += [event["event_id"] for event in body["events"]]
        if (cursor := body["next_cursor"]) is None:
            break
    assert seen == [e.event_id for e in mine]
    _, filtered = get("/admin/v1/audit/events", subject="flow:1", action="reasoning.step.created", since=mine[1].at)
    assert [e["event_id"] for e in filtered["events"]] == [mine[2].event_id]


def test_bad_input_is_422_and_missing_iam_is_403(stored: list[AuditEvent], get: Any) -> None:
    assert get("/admin/v1/audit/events", cursor="not-a-cursor")[0] == 422
    assert get("/admin/v1/audit/events", subject="flow:1", cursor="WzAsIDBd")[0] == 422  # a chain cursor
    assert get("/admin/v1/audit/events", limit="0")[0] == 422
    assert get("/admin/v1/audit/events", user_arn=None)[0] == 403


def test_latest_checkpoint_is_404_until_one_is_taken(stored: list[AuditEvent], get: Any, services: Services) -> None:
    assert get("/admin/v1/audit/checkpoints/latest")[0] == 404
    taken = take_checkpoint(services.ledger, checkpoints_of(services), services)
    status, body = get("/admin/v1/audit/checkpoints/latest")
    assert status == 200 and body["checkpoint_id"] == taken["checkpoint_id"]
    assert sum(head["seq"] for head in body["heads"]) == len(stored)


@pytest.mark.parametrize("since", ["1700000000", "0.5", "yesterday"])
def test_since_takes_iso_8601_only(stored: list[AuditEvent], get: Any, since: str) -> None:
    status, body = get("/admin/v1/audit/events", since=since)
    assert (status, body["error"]) == (422, "validation_error")
    assert [f["loc"] for f in body["fields"]] == [["query", "since"]]


def test_since_takes_an_iso_8601_date_time(stored: list[AuditEvent], get: Any) -> None:
    status, _ = get("/admin/v1/audit/events", since="2026-01-01T00:00:00Z")
    assert status == 200


def all_event_ids(get: Any, **query: str) -> list[str]:
    """Every event id the listing serves, page by page (3 a page)."""
    seen, cursor = [], None
    while True:
        status, body = get("/admin/v1/audit/events", limit="3", **query, **({"cursor": cursor} if cursor else {}))
        assert status == 200, body
        seen += [event["event_id"] for event in body["events"]]
        if (cursor := body["next_cursor"]) is None:
            return seen


def test_an_event_under_a_chain_id_outside_the_ledgers_is_never_served(
    stored: list[AuditEvent], get: Any, services: Services
) -> None:
    entry = AuditEntry(action="reasoning.flow.started", actor="user:mallory", subject="flow:1")
    stray = seal(entry, "chain-016", 1, GENESIS_HASH, T0 + timedelta(minutes=3, seconds=30))
    services.aws.dynamodb.put_item(TableName=services.aws.table_name("ledger"), Item=to_item(stray))
    assert all_event_ids(get, subject="flow:1") == [e.event_id for e in stored if e.subject == "flow:1"]
    assert sorted(all_event_ids(get)) == sorted(e.event_id for e in stored)


def test_a_malformed_item_is_skipped_by_both_listings_not_a_500(
    stored: list[AuditEvent], get: Any, services: Services
) -> None:
    table = services.aws.table_name("ledger")
    victim = next(e for e in stored if e.subject == "flow:1")
    key = {"chain_id": {"S": victim.chain_id}, "seq": {"N": str(victim.seq)}}
    item = services.aws.dynamodb.get_item(TableName=table, Key=key)["Item"]
    services.aws.dynamodb.put_item(TableName=table, Item=item | {"seq": {"N": f"{victim.seq}.5"}})  # no position
    services.aws.dynamodb.put_item(TableName=table, Item=item | {"note": {"S": "hidden"}})  # an extra attribute
    served = [e for e in stored if e != victim]
    assert all_event_ids(get, subject="flow:1") == [e.event_id for e in served if e.subject == "flow:1"]
    assert sorted(all_event_ids(get)) == sorted(e.event_id for e in served)
