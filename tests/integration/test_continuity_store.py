"""The grounded refs of a session's latest grounded turn, on the runs table (moto): one item per
session, written only by the session's owner, never overwritten by an earlier turn finishing late."""

from __future__ import annotations

import pytest

from flowledger.chat.runs import RunStore
from flowledger.continuity.refs import GROUNDED_ITEM, GroundedRef, GroundedRefs, GroundedRefStore
from flowledger.errors import Forbidden, UndecodableItem
from flowledger.ids import new_id
from flowledger.services import Services
from tests.unit.test_continuity_refs import ref_fields


def session_of(services: Services, owner: str) -> str:
    session_id = new_id("ses_")
    RunStore(services).create(session_id, new_id("run_"), owner, "first question", "offline", True)
    return session_id


def grounded(session_id: str, run_id: str, count: int = 2) -> GroundedRefs:
    return GroundedRefs(
        session_id=session_id, run_id=run_id, refs=[GroundedRef.model_validate(ref_fields()) for _ in range(count)]
    )


def test_the_latest_grounded_turn_round_trips(services: Services) -> None:
    store = GroundedRefStore(services)
    session_id = session_of(services, "ann")
    assert store.get("ann", session_id) is None  # no grounded turn yet
    # Explicit times: two ids made in the same millisecond need not sort in the order they were made.
    first = grounded(session_id, new_id("run_", now_ms=1_000))
    assert store.put("ann", first) is True
    assert store.get("ann", session_id) == first
    second = grounded(session_id, new_id("run_", now_ms=2_000), count=100)
    assert store.put("ann", second) is True
    assert store.get("ann", session_id) == second
    # One item per session, beside the header: the runs listing and the header are untouched.
    page = RunStore(services).list_runs("ann", session_id, 10, None)
    assert [run.query for run in page.runs] == ["first question"]


def test_an_earlier_turn_finishing_late_does_not_replace_a_later_one(services: Services) -> None:
    store = GroundedRefStore(services)
    session_id = session_of(services, "ann")
    earlier, later = new_id("run_", now_ms=1_000), new_id("run_", now_ms=2_000)
    assert store.put("ann", grounded(session_id, later)) is True
    assert store.put("ann", grounded(session_id, earlier)) is False
    stored = store.get("ann", session_id)
    assert stored is not None and stored.run_id == later


def test_only_the_session_owner_writes_or_reads(services: Services) -> None:
    store = GroundedRefStore(services)
    session_id = session_of(services, "ann")
    store.put("ann", grounded(session_id, new_id("run_")))
    with pytest.raises(Forbidden):
        store.put("bob", grounded(session_id, new_id("run_")))
    with pytest.raises(Forbidden):
        store.get("bob", session_id)
    with pytest.raises(Forbidden):  # a session nobody used has no owner to write for
        store.put("bob", grounded(new_id("ses_"), new_id("run_")))
    stored = store.get("ann", session_id)
    assert stored is not None and len(stored.refs) == 2


def test_a_stored_item_that_no_longer_decodes_is_a_409_naming_the_session(services: Services) -> None:
    store = GroundedRefStore(services)
    session_id = session_of(services, "ann")
    store.put("ann", grounded(session_id, new_id("run_")))
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("runs"),
        Key={"session_id": {"S": session_id}, "run_id": {"S": GROUNDED_ITEM}},
        UpdateExpression="SET refs = :bad",
        ExpressionAttributeValues={":bad": {"L": [{"M": {"document_id": {"S": "x"}}}]}},
    )
    with pytest.raises(UndecodableItem) as caught:
        store.get("ann", session_id)
    assert caught.value.item == session_id
