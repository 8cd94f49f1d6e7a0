"""A deeper request's place in the queue, as the deeper-request route answers it: the pending requests a
ticket pull serves up to and including it, never more than the backlog's pending count, whatever ticket
numbers earlier requests used up (served, or pulled out of order by trigger type)."""

from __future__ import annotations

from typing import Any

from tests.integration.test_research_routes import Call, call, enqueue, pull

__all__ = ["call"]  # the fixture, shared with the research routes' tests


def pending(call: Call) -> int:
    status, view = call("GET", "/admin/v1/reasoning/research/backlog")
    assert status == 200, view
    return int(view["status_distribution"]["pending"])


def queued(call: Call, key: str, trigger_type: str = "user_question") -> dict[str, Any]:
    status, row = enqueue(call, key, trigger_type)
    assert status in (200, 201), row
    return dict(row)


def test_the_place_counts_what_waits_ahead_not_the_tickets_ever_issued(call: Call) -> None:
    assert [queued(call, key)["place_in_queue"] for key in ("key-a-0001", "key-b-0001", "key-c-0001")] == [1, 2, 3]
    pull(call)  # a is served
    d = queued(call, "key-d-0001")
    assert (d["ticket"], d["place_in_queue"], pending(call)) == (4, 3, 3)
    e = queued(call, "key-e-0001", trigger_type="lab_trend")
    assert e["place_in_queue"] == 4
    assert pull(call, "lab_trend")["request_id"] == e["request_id"]  # out of order: its ticket is spent unused
    f = queued(call, "key-f-0001")
    assert (f["ticket"], f["place_in_queue"], pending(call)) == (6, 4, 4)
    # A request no longer waiting has no place; a replay of its key says so.
    assert queued(call, "key-a-0001")["place_in_queue"] is None
