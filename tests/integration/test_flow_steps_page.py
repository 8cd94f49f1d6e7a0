"""The admin flow page's routes through the reasoning function on moto: the flow's overview, its steps a
page at a time (sealed fields stay sealed), and one sealed field opened as an audited read."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from flowledger.ids import new_id
from flowledger.ledger.events import AuditEvent
from flowledger.reasoning import steps_page
from flowledger.services import Services
from tests.integration import test_reasoning_routes as reasoning
from tests.integration.test_reasoning_routes import ADMIN, PATIENT, WRITER, Call, add_step, close, consent, open_flow

call = reasoning.call  # the reasoning function's handler on moto, as a fixture here too

PHI = "ann's a1c values"
MARKER = {"__sealed__": True}


def steps_route(flow_id: str) -> str:
    return f"/admin/v1/reasoning/flows/{flow_id}/steps"


def sealed_route(flow_id: str, step_id: str) -> str:
    return f"/admin/v1/reasoning/flows/{flow_id}/steps/{step_id}/sealed"


def events(services: Services, action: str) -> list[AuditEvent]:
    found = [e for chain in services.ledger.chain_ids() for e in services.ledger.read_chain(chain)]
    return [e for e in found if e.action == action]


def batch_in_reverse_id_order(call: Call, flow_id: str, count: int) -> list[str]:
    """``count`` steps in one batch whose ids sort opposite to their order: key order is not creation order."""
    ids = sorted((new_id("st_") for _ in range(count)), reverse=True)
    steps = [
        {
            "step_id": step_id,
            "step_kind": "retrieval",
            "agent": "researcher",
            "summary_text": f"Step {n}",
            "parent_step_ids": [ids[n - 1]] if n else [],
        }
        for n, step_id in enumerate(ids)
    ]
    status, body, _ = call("POST", f"/api/reasoning/flows/{flow_id}/steps:batch", {"steps": steps}, WRITER)
    assert status == 201, body
    return ids


def read_all(call: Call, flow_id: str, limit: int) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        query = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
        status, page, _ = call("GET", steps_route(flow_id), user_arn=ADMIN, **query)
        assert status == 200, page
        pages.append(page["steps"])
        cursor = page["next_cursor"]
        if not cursor:
            return pages


def test_steps_come_in_creation_order_a_page_at_a_time_each_page_audited(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    ids = batch_in_reverse_id_order(call, flow_id, 7)
    pages = read_all(call, flow_id, 3)
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [s["step_id"] for p in pages for s in p] == ids
    assert pages[0][1]["parent_step_ids"] == [ids[0]] and pages[0][0]["summary_text"] == "Step 0"
    reads = events(services, "admin.reasoning.flow.steps_read")
    assert [(e.subject, e.actor, e.payload["steps"]) for e in reads] == [
        (f"flow:{flow_id}", ADMIN, n) for n in (3, 3, 1)
    ]
    # One page holds them all at the default size.
    assert [len(p) for p in read_all(call, flow_id, 1000)] == [7]


def test_a_page_of_large_steps_ends_early_with_a_cursor(
    call: Call, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow_id = open_flow(call)
    for n in range(4):
        assert add_step(call, flow_id, summary=f"Step {n}", outputs={"text": "x" * 1000})[0] == 201
    # A bound of about two such steps: a page stops there, whatever the limit, and the rest follow.
    monkeypatch.setattr(steps_page, "MAX_PAGE_BYTES", 3000)
    pages = read_all(call, flow_id, 1000)
    assert [len(p) for p in pages] == [2, 2]
    assert [s["summary_text"] for p in pages for s in p] == [f"Step {n}" for n in range(4)]


@pytest.mark.parametrize("limit", ["0", "1001", "x"])
def test_a_limit_outside_1_to_1000_is_a_422(call: Call, limit: str) -> None:
    flow_id = open_flow(call)
    status, body, _ = call("GET", steps_route(flow_id), user_arn=ADMIN, limit=limit)
    assert status == 422, body


def cursor_of(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


def test_only_a_cursor_the_route_issued_for_this_flow_is_taken(call: Call) -> None:
    flow_id, other = open_flow(call), open_flow(call)
    batch_in_reverse_id_order(call, flow_id, 3)
    batch_in_reverse_id_order(call, other, 3)
    _, first, _ = call("GET", steps_route(flow_id), user_arn=ADMIN, limit="1")
    issued = first["next_cursor"]
    assert call("GET", steps_route(flow_id), user_arn=ADMIN, limit="1", cursor=issued)[0] == 200
    key = json.loads(base64.urlsafe_b64decode(issued))
    refused = [
        "not-a-cursor!",
        cursor_of(["a", "list"]),
        cursor_of({**key, "flow_id": other}),
        cursor_of({**key, "step_id": "st_x"}),
        cursor_of({**key, "extra": 1}),
    ]
    for cursor in refused:
        status, body, _ = call("GET", steps_route(flow_id), user_arn=ADMIN, cursor=cursor)
        assert (status, body["error"]) == (422, "invalid_input"), (cursor, body)
    # A cursor of this flow does not read another flow's steps.
    status, body, _ = call("GET", steps_route(other), user_arn=ADMIN, cursor=issued)
    assert status == 422


def test_a_sealed_field_stays_sealed_in_the_page_and_opens_as_an_audited_read(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    status, step = add_step(
        call,
        flow_id,
        inputs={"query": PHI, "k": 3},
        outputs={"rows": [{"a1c": 7.1}], "name": "Ann Example"},
        pii_fields={"inputs": ["query"], "outputs": ["name"]},
        back_refs={"llm_call_log_ref": "llm-7"},
    )
    assert status == 201, step
    status, page, _ = call("GET", steps_route(flow_id), user_arn=ADMIN)
    assert status == 200
    (shown,) = page["steps"]
    assert shown["inputs"] == {"query": MARKER, "k": 3}
    assert shown["outputs"] == {"rows": [{"a1c": 7.1}], "name": MARKER}
    assert shown["pii_fields"] == {"inputs": ["query"], "outputs": ["name"]}
    assert shown["back_refs"]["llm_call_log_ref"] == "llm-7"
    assert PHI not in json.dumps(page) and "Ann Example" not in json.dumps(page)
    (read,) = events(services, "admin.reasoning.flow.steps_read")
    assert read.payload == {"steps": 1, "sealed_fields": 2, "first_page": True}

    status, opened, _ = call(
        "GET", sealed_route(flow_id, step["step_id"]), user_arn=ADMIN, side="inputs", field="query"
    )
    assert status == 200, opened
    assert opened == {"flow_id": flow_id, "step_id": step["step_id"], "side": "inputs", "field": "query", "value": PHI}
    (event,) = events(services, "admin.reasoning.step.sealed_field_opened")
    assert (event.subject, event.actor) == (f"flow:{flow_id}", ADMIN)
    assert event.refs == {"step_id": step["step_id"]} and event.payload == {"side": "inputs", "field": "query"}
    every_event = [e for chain in services.ledger.chain_ids() for e in services.ledger.read_chain(chain)]
    assert not any(PHI in e.model_dump_json() for e in every_event)


def test_a_field_whose_name_is_not_a_token_is_audited_by_its_names_digest(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    _, step = add_step(call, flow_id, inputs={"patient name": PHI}, pii_fields={"inputs": ["patient name"]})
    route = sealed_route(flow_id, step["step_id"])
    status, opened, _ = call("GET", route, user_arn=ADMIN, side="inputs", field="patient name")
    assert (status, opened["value"]) == (200, PHI)
    (event,) = events(services, "admin.reasoning.step.sealed_field_opened")
    assert event.payload["field"] == "sha256:" + hashlib.sha256(b"patient name").hexdigest()[:32]


def test_only_a_sealed_field_that_is_there_opens(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    _, step = add_step(call, flow_id, inputs={"query": PHI, "k": 3}, pii_fields={"inputs": ["query"]})
    route = sealed_route(flow_id, step["step_id"])
    for side, field in (("inputs", "k"), ("inputs", "missing"), ("outputs", "query")):
        status, body, _ = call("GET", route, user_arn=ADMIN, side=side, field=field)
        assert status == 404, (side, field, body)
    assert call("GET", sealed_route(flow_id, new_id("st_")), user_arn=ADMIN, side="inputs", field="query")[0] == 404
    assert call("GET", route, user_arn=ADMIN, side="elsewhere", field="query")[0] == 422
    assert call("GET", route, user_arn=ADMIN, side="inputs")[0] == 422
    assert events(services, "admin.reasoning.step.sealed_field_opened") == []


def test_the_flow_route_is_the_flow_and_its_radar_without_steps(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    add_step(call, flow_id, inputs={"query": PHI}, pii_fields={"inputs": ["query"]})
    status, active, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN)
    assert status == 200, active
    assert set(active) == {"flow", "dimensions", "first_steps"} and active["first_steps"] is None
    assert active["flow"]["step_count"] == 1 and active["flow"]["flow_state"] == "active"
    # No snapshot yet: computed from the step's confidence (0.95 of 1 is 7 of 7).
    assert active["dimensions"]["confidence"]["score"] == 7
    assert close(call, flow_id)[0] == 200
    _, closed, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN)
    assert closed["dimensions"] == closed["flow"]["dimensions_snapshot"]
    assert PHI not in json.dumps(closed)
    reads = events(services, "admin.reasoning.flow.read")
    assert [(e.actor, e.payload) for e in reads] == [(ADMIN, {"steps": 1})] * 2
    assert call("GET", "/admin/v1/reasoning/flows/fl_" + "0" * 26, user_arn=ADMIN)[0] == 404
    assert call("GET", steps_route("fl_" + "0" * 26), user_arn=ADMIN)[0] == 404


def test_the_flow_read_with_steps_carries_the_first_page_as_the_steps_route_answers_it(
    call: Call, services: Services
) -> None:
    """The flow page's one first read: the flow and its first page, both audited in one transaction."""
    flow_id = open_flow(call)
    ids = batch_in_reverse_id_order(call, flow_id, 4)
    add_step(call, flow_id, inputs={"query": PHI}, pii_fields={"inputs": ["query"]})
    status, both, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN, steps="3")
    assert status == 200, both
    assert both["flow"]["step_count"] == 5
    chained = [e for chain in services.ledger.chain_ids() for e in services.ledger.read_chain(chain)]
    assert [e.action for e in chained if e.action.startswith("admin.")] == [
        "admin.reasoning.flow.read",
        "admin.reasoning.flow.steps_read",
    ]
    read, first = (e for e in chained if e.action.startswith("admin."))
    assert (read.payload, first.payload) == ({"steps": 5}, {"steps": 3, "sealed_fields": 0, "first_page": True})
    assert (first.chain_id, first.seq) == (read.chain_id, read.seq + 1)  # written together, one transaction
    _, alone, _ = call("GET", steps_route(flow_id), user_arn=ADMIN, limit="3")
    assert both["first_steps"]["steps"] == alone["steps"]
    assert [s["step_id"] for s in both["first_steps"]["steps"]] == ids[:3]
    # Its cursor goes on where it stopped, through the steps route; the sealed field stays sealed there too.
    _, rest, _ = call("GET", steps_route(flow_id), user_arn=ADMIN, cursor=both["first_steps"]["next_cursor"])
    assert [s["step_id"] for s in rest["steps"]][:1] == [ids[3]] and rest["next_cursor"] is None
    assert rest["steps"][-1]["inputs"] == {"query": MARKER}
    assert PHI not in json.dumps(both) + json.dumps(rest)
    # The whole flow in one read: no cursor, and the sealed field counted as the steps route counts it.
    _, whole, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN, steps="1000")
    assert len(whole["first_steps"]["steps"]) == 5 and whole["first_steps"]["next_cursor"] is None
    assert events(services, "admin.reasoning.flow.steps_read")[-1].payload["sealed_fields"] == 1


@pytest.mark.parametrize("steps", ["-1", "1001", "x"])
def test_a_flow_read_asking_for_steps_outside_0_to_1000_is_a_422_and_writes_nothing(
    call: Call, services: Services, steps: str
) -> None:
    flow_id = open_flow(call)
    status, body, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN, steps=steps)
    assert (status, body["error"]) == (422, "validation_error"), body
    missing = call("GET", "/admin/v1/reasoning/flows/fl_" + "0" * 26, user_arn=ADMIN, steps="5")
    assert missing[0] == 404
    assert events(services, "admin.reasoning.flow.read") == events(services, "admin.reasoning.flow.steps_read") == []


@pytest.mark.parametrize(
    ("who", "arn"), [(None, None), (PATIENT, None), (WRITER, None)], ids=["anonymous", "patient", "writer"]
)
def test_the_page_routes_need_an_iam_principal_before_anything_is_validated(
    call: Call, services: Services, who: dict[str, str] | None, arn: str | None
) -> None:
    flow_id = open_flow(call)
    _, step = add_step(call, flow_id, inputs={"query": PHI}, pii_fields={"inputs": ["query"]})
    requests: list[tuple[str, dict[str, str]]] = [
        (f"/admin/v1/reasoning/flows/{flow_id}", {"steps": "500"}),
        (f"/admin/v1/reasoning/flows/{flow_id}", {"steps": "-1"}),  # 403, not 422
        (steps_route(flow_id), {}),
        (steps_route(flow_id), {"limit": "0", "cursor": "bad"}),  # 403, not 422: the caller comes first
        (sealed_route(flow_id, step["step_id"]), {"side": "inputs", "field": "query"}),
        (sealed_route(flow_id, step["step_id"]), {"side": "nowhere"}),
    ]
    for path, query in requests:
        status, body, _ = call("GET", path, who=who, user_arn=arn, **query)
        assert status in (401, 403), (path, query, status, body)
        assert PHI not in json.dumps(body)
    assert events(services, "admin.reasoning.step.sealed_field_opened") == []
    assert events(services, "admin.reasoning.flow.steps_read") == []
    assert events(services, "admin.reasoning.flow.read") == []


def test_a_close_and_the_narrative_read_the_steps_without_their_payloads(call: Call, services: Services) -> None:
    """A 20,000-step flow closes, and its narrative is read, without up to 64 KB of inputs and outputs a step."""
    flow_id = open_flow(call)
    _, step = add_step(call, flow_id, inputs={"query": PHI}, pii_fields={"inputs": ["query"]})
    # Payloads no reader of a close could use: were they read, the close would be a 409 naming the step.
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("steps"),
        Key={"flow_id": {"S": flow_id}, "step_id": {"S": step["step_id"]}},
        UpdateExpression="SET inputs = :x, outputs = :x",
        ExpressionAttributeValues={":x": {"S": "not a map"}},
    )
    status, closed = close(call, flow_id)
    assert (status, closed["step_count"]) == (200, 1), closed
    consent(call)
    status, narrative, _ = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert (status, len(narrative["steps"])) == (200, 1), narrative
