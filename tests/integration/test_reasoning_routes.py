"""The reasoning function end to end on moto: lifecycle, patient and admin views, access matrix."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from flowledger.reasoning.service import NARRATIVE_WINDOW_SECONDS
from flowledger.services import Services, bootstrap, utc_now

WRITER = {"sub": "agent-researcher", "scope": "reasoning.write", "patient_id": ""}
OTHER_WRITER = {"sub": "agent-critic", "scope": "reasoning.write", "patient_id": ""}
PATIENT = {"sub": "u-ann", "scope": "reasoning.read", "patient_id": "p-ann"}
OTHER_PATIENT = {"sub": "u-bob", "scope": "reasoning.read", "patient_id": "p-bob"}
ADMIN = "arn:aws:sts::123456789012:assumed-role/operator/jane"
SAFE_STEPS = [
    ("retrieval", "researcher", "Retrieved three guideline passages", 0.95),
    ("llm_prompt", "researcher", "Drafted an answer from the passages", 0.93),
    ("verdict", "critic", "Critic found the claim well supported", 0.97),
]

Call = Callable[..., tuple[int, Any, dict[str, str]]]


@pytest.fixture
def call(services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Call:
    handler = load_function("reasoning").handler

    def invoke(
        method: str,
        path: str,
        body: Any = None,
        who: dict[str, str] | None = None,
        user_arn: str | None = None,
        **query: str,
    ) -> tuple[int, Any, dict[str, str]]:
        event = rest_event(method, path, body=body, authorizer=who, user_arn=user_arn, query=query or None)
        response = handler(event, lambda_context)
        headers = {
            **(response.get("headers") or {}),
            **{k: v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()},
        }
        return response["statusCode"], json.loads(response["body"]), headers

    return invoke


def open_flow(
    call: Call, patient_id: str = "p-ann", summary: str = "Question about a lab trend", trace_id: str = "trace-1"
) -> str:
    status, body, _ = call(
        "POST",
        "/api/reasoning/flows",
        {
            "trigger_type": "user_question",
            "trigger_ref": "chat/run-1",
            "trigger_summary": summary,
            "trace_id": trace_id,
            "patient_id": patient_id,
        },
        WRITER,
    )
    assert status == 201, body
    return str(body["flow_id"])


def add_step(
    call: Call,
    flow_id: str,
    kind: str = "retrieval",
    agent: str = "researcher",
    summary: str = "Retrieved passages",
    confidence: float | None = 0.95,
    **extra: Any,
) -> tuple[int, Any]:
    status, body, _ = call(
        "POST",
        f"/api/reasoning/flows/{flow_id}/steps",
        {"step_kind": kind, "agent": agent, "summary_text": summary, "confidence": confidence, **extra},
        WRITER,
    )
    return status, body


def close(
    call: Call,
    flow_id: str,
    summary: str = "Recommended a follow-up test",
    state: str = "completed",
    who: dict[str, str] = WRITER,
) -> tuple[int, Any]:
    status, body, _ = call(
        "PATCH",
        f"/api/reasoning/flows/{flow_id}",
        {"state": state, "outcome": {"type": "recommendation_delivered", "summary": summary, "confidence": 0.94}},
        who,
    )
    return status, body


def completed_flow(call: Call) -> str:
    flow_id = open_flow(call)
    for kind, agent, summary, confidence in SAFE_STEPS:
        assert add_step(call, flow_id, kind, agent, summary, confidence)[0] == 201
    assert close(call, flow_id)[0] == 200
    return flow_id


def consent(call: Call, who: dict[str, str] = PATIENT, allowed: bool = True) -> None:
    assert call("PUT", "/api/reasoning/consent", {"reasoning_read": allowed}, who)[0] == 200


def ledger_actions(services: Services) -> list[tuple[str, str]]:
    events = [e for chain in services.ledger.chain_ids() for e in services.ledger.read_chain(chain)]
    return sorted((e.action, e.actor) for e in events)


def test_the_lifecycle_records_and_audits_every_write(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    first = add_step(call, flow_id)[1]
    second = add_step(call, flow_id, "verdict", "critic", "Checked the claim", 0.9, parent_step_ids=[first["step_id"]])[
        1
    ]
    assert second["parent_step_ids"] == [first["step_id"]]
    status, closed = close(call, flow_id)
    assert status == 200
    assert closed["flow_state"] == "completed" and closed["patient_safe_summary"] is True
    assert closed["step_count"] == 2 and closed["dimensions_snapshot"]["confidence"]["bucket"] == "high"
    assert ledger_actions(services) == sorted(
        [
            ("reasoning.flow.started", "user:agent-researcher"),
            ("reasoning.step.created", "user:agent-researcher"),
            ("reasoning.step.created", "user:agent-researcher"),
            ("reasoning.flow.completed", "user:agent-researcher"),
            # every confidence >= 0.9, a recommendation, safe summaries: the close extracts a pathway
            ("reasoning.pathway.extracted", "user:agent-researcher"),
        ]
    )
    completed = next(
        e
        for chain in services.ledger.chain_ids()
        for e in services.ledger.read_chain(chain)
        if e.action == "reasoning.flow.completed"
    )
    assert completed.payload["checked"] == 4 and completed.payload["unsafe"] == 0


def test_patient_reads_their_narrative_after_opting_in(call: Call, services: Services) -> None:
    flow_id = completed_flow(call)
    status, body, _ = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert (status, body["error"]) == (403, "consent_required")
    consent(call)
    status, narrative, _ = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert status == 200
    assert narrative["trigger_summary"] == "Question about a lab trend"
    assert [s["summary"] for s in narrative["steps"]] == [s[2] for s in SAFE_STEPS]
    assert narrative["steps"][2]["agent_label"] == "Critic"
    assert {a["label"] for a in narrative["radar"]} >= {"Evidence breadth", "Care team agreement", "Caution flags"}
    assert narrative["disclaimer"]
    text = json.dumps(narrative)
    assert "inputs" not in text and "back_refs" not in text
    assert ("patient.reasoning.flow.read", "user:u-ann") in ledger_actions(services)


def test_an_active_flow_answers_202_with_its_progress(call: Call) -> None:
    flow_id = open_flow(call)
    add_step(call, flow_id)
    consent(call)
    status, body, _ = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert (status, body) == (202, {"flow_id": flow_id, "state": "active", "steps_so_far": 1})


def test_an_unsafe_summary_keeps_the_flow_for_the_care_team(call: Call) -> None:
    flow_id = open_flow(call)
    add_step(call, flow_id, summary="Reviewed metformin 500mg")
    status, closed = close(call, flow_id)
    assert closed["patient_safe_summary"] is False and closed["dimensions_snapshot"]["risk"]["score"] >= 5
    consent(call)
    status, body, _ = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert (status, body["error"]) == (403, "ask_care_team")
    assert "metformin" not in json.dumps(body)


def test_pii_fields_are_sealed_at_rest_and_opened_for_admins(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    status, step = add_step(
        call,
        flow_id,
        inputs={"query": "ann's a1c values", "k": 3},
        outputs={"passages": ["p1"]},
        pii_fields={"inputs": ["query"]},
        back_refs={"llm_call_log_ref": "llm-7"},
    )
    assert status == 201
    raw = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("steps"), Key={"flow_id": {"S": flow_id}, "step_id": {"S": step["step_id"]}}
    )["Item"]
    # The plaintext phrase, not a fragment: "a1c" alone turns up in the item's hex hashes now and then.
    assert "ann's a1c values" not in json.dumps(raw)
    assert raw["inputs"]["M"]["k"] == {"N": "3"}
    status, page, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}/steps", user_arn=ADMIN)
    assert status == 200
    assert page["steps"][0]["inputs"] == {"query": {"__sealed__": True}, "k": 3}
    assert page["steps"][0]["back_refs"]["llm_call_log_ref"] == "llm-7"
    status, opened, _ = call(
        "GET",
        f"/admin/v1/reasoning/flows/{flow_id}/steps/{step['step_id']}/sealed",
        user_arn=ADMIN,
        side="inputs",
        field="query",
    )
    assert (status, opened["value"]) == (200, "ann's a1c values")
    assert ("admin.reasoning.step.sealed_field_opened", ADMIN) in ledger_actions(services)


def test_a_sealed_field_moved_to_another_step_does_not_open(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    _, a = add_step(call, flow_id, inputs={"q": "secret-a"}, pii_fields={"inputs": ["q"]})
    _, b = add_step(call, flow_id, inputs={"q": "secret-b"}, pii_fields={"inputs": ["q"]})
    table = services.aws.table_name("steps")
    stolen = services.aws.dynamodb.get_item(
        TableName=table, Key={"flow_id": {"S": flow_id}, "step_id": {"S": a["step_id"]}}
    )["Item"]["inputs"]
    services.aws.dynamodb.update_item(
        TableName=table,
        Key={"flow_id": {"S": flow_id}, "step_id": {"S": b["step_id"]}},
        UpdateExpression="SET inputs = :i",
        ExpressionAttributeValues={":i": stolen},
    )
    route = f"/admin/v1/reasoning/flows/{flow_id}/steps/{b['step_id']}/sealed"
    status, body, _ = call("GET", route, user_arn=ADMIN, side="inputs", field="q")
    # The stored item is at fault, not the request: a 409 naming the step, and nothing it holds.
    assert (status, body["error"]) == (409, "undecodable_item") and b["step_id"] in body["message"]
    assert "secret" not in json.dumps(body)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"parent_step_ids": ["st_01JD0000000000000000000000"]}, "unknown parent"),
        ({"pii_fields": {"inputs": ["missing"]}}, "pii_fields.inputs"),
    ],
)
def test_bad_steps_are_422(call: Call, extra: dict[str, Any], message: str) -> None:
    flow_id = open_flow(call)
    status, body = add_step(call, flow_id, **extra)
    assert status == 422 and message in json.dumps(body)


def test_a_step_that_names_itself_as_parent_is_a_cycle(call: Call) -> None:
    flow_id = open_flow(call)
    step_id = "st_01JD5Z7Q8X9Y0A1B2C3D4E5F6G"
    status, body = add_step(call, flow_id, step_id=step_id, parent_step_ids=[step_id])
    assert status == 422 and "cycle" in body["message"]


def test_a_step_can_join_several_parents(call: Call) -> None:
    flow_id = open_flow(call)
    a, b = add_step(call, flow_id)[1], add_step(call, flow_id, "graph_walk")[1]
    status, joined = add_step(call, flow_id, "verdict", parent_step_ids=[a["step_id"], b["step_id"]])
    assert status == 201 and joined["parent_step_ids"] == [a["step_id"], b["step_id"]]


def test_state_rules(call: Call, services: Services) -> None:
    flow_id = completed_flow(call)
    assert add_step(call, flow_id)[0] == 409
    assert close(call, flow_id)[0] == 409
    assert add_step(call, "fl_01JD0000000000000000000000")[0] == 404
    assert close(call, "fl_01JD0000000000000000000000")[0] == 404
    other = open_flow(call)
    status, body = add_step(call, other, inputs={"blob": "x" * (65 * 1024)})
    assert (status, body["error"]) == (413, "payload_too_large")
    retry = "st_01JD5Z7Q8X9Y0A1B2C3D4E5F6H"
    assert add_step(call, other, step_id=retry)[0] == 201
    assert add_step(call, other, step_id=retry)[0] == 409
    status, _, _ = call(
        "POST",
        f"/api/reasoning/flows/{other}/steps",
        {"step_kind": "x", "agent": "critic", "summary_text": "Hijack"},
        OTHER_WRITER,
    )
    assert status == 403
    assert close(call, other, who=OTHER_WRITER)[0] == 403


def test_a_flow_takes_at_most_20000_steps(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("flows"),
        Key={"flow_id": {"S": flow_id}},
        UpdateExpression="SET step_count = :n",
        ExpressionAttributeValues={":n": {"N": "19999"}},
    )
    assert add_step(call, flow_id)[0] == 201
    status, body = add_step(call, flow_id)
    assert status == 409 and "20000 steps" in body["message"]


def test_access_matrix_denies_without_data(call: Call) -> None:
    flow_id = completed_flow(call)
    consent(call)
    consent(call, OTHER_PATIENT, allowed=True)
    denied = [
        ("POST", "/api/reasoning/flows", {"trigger_type": "x", "trigger_ref": "r", "trigger_summary": "s"}, None, 401),
        (
            "POST",
            "/api/reasoning/flows",
            {"trigger_type": "x", "trigger_ref": "r", "trigger_summary": "s"},
            PATIENT,
            403,
        ),
        (
            "POST",
            f"/api/reasoning/flows/{flow_id}/steps",
            {"step_kind": "x", "agent": "y", "summary_text": "z"},
            PATIENT,
            403,
        ),
        (
            "PATCH",
            f"/api/reasoning/flows/{flow_id}",
            {"state": "aborted", "outcome": {"type": "error", "summary": "s"}},
            None,
            401,
        ),
        ("GET", f"/api/reasoning/flows/{flow_id}", None, None, 401),
        ("GET", f"/api/reasoning/flows/{flow_id}", None, WRITER, 403),
        ("GET", f"/api/reasoning/flows/{flow_id}", None, OTHER_PATIENT, 403),
        ("PUT", "/api/reasoning/consent", {"reasoning_read": True}, WRITER, 403),
        ("GET", f"/admin/v1/reasoning/flows/{flow_id}", None, PATIENT, 403),
        ("GET", "/admin/v1/reasoning/flows", None, None, 403),
    ]
    for method, path, body, who, expected in denied:
        query = {"trace_id": "trace-1"} if path.endswith("/flows") and method == "GET" else {}
        status, answer, _ = call(method, path, body, who, **query)
        assert status == expected, (method, path, who)
        assert set(answer) == {"error", "message", "request_id"}, answer


def test_narrative_reads_are_limited_to_30_per_5_minutes(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit counts in fixed 5-minute windows of the services' clock. The wall clock crosses a window
    # boundary mid-test about one run in fifty, so the function's clock runs at real speed from one
    # second into a window: all 31 reads fall in the same one.
    started, real = utc_now(), bootstrap()
    window_start = int(started.timestamp()) // NARRATIVE_WINDOW_SECONDS * NARRATIVE_WINDOW_SECONDS
    anchor = datetime.fromtimestamp(window_start + 1, UTC)
    anchored = dataclasses.replace(real, clock=lambda: anchor + (utc_now() - started))
    monkeypatch.setattr("flowledger.api.app.bootstrap", lambda: anchored)
    flow_id = completed_flow(call)
    consent(call)
    for _ in range(30):
        assert call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)[0] == 200
    status, body, headers = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert (status, body["error"]) == (429, "rate_limited")
    assert NARRATIVE_WINDOW_SECONDS - 60 <= int(headers["Retry-After"]) <= NARRATIVE_WINDOW_SECONDS - 1


def test_admin_lists_flows_by_trace_page_by_page(call: Call) -> None:
    flows = [open_flow(call, trace_id="trace-9") for _ in range(5)]
    open_flow(call, trace_id="trace-other")
    seen: list[str] = []
    cursor: str | None = None
    while True:
        query = {"trace_id": "trace-9", "limit": "2", **({"cursor": cursor} if cursor else {})}
        status, page, _ = call("GET", "/admin/v1/reasoning/flows", user_arn=ADMIN, **query)
        assert status == 200
        seen += [flow["flow_id"] for flow in page["flows"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == flows
    assert call("GET", "/admin/v1/reasoning/flows", user_arn=ADMIN, trace_id="trace-9", cursor="bad")[0] == 422


def test_metrics_are_emitted_as_emf_with_the_seed_names(call: Call, capsys: pytest.CaptureFixture[str]) -> None:
    completed_flow(call)
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    by_name = {m["Name"]: r for r in records for m in r["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert by_name["reasoning.flow.started"]["trigger_type"] == "user_question"
    assert by_name["reasoning.step.writes"]["agent"] in {"researcher", "critic"}
    completed = by_name["reasoning.flow.completed"]
    assert (completed["outcome_type"], completed["patient_safe_summary"]) == ("recommendation_delivered", "true")
    assert by_name["reasoning.flow.latency_ms"]["step_count_bucket"] == "1-3"


def test_a_flow_closed_without_a_snapshot_gets_a_fresh_radar(call: Call, services: Services) -> None:
    flow_id = completed_flow(call)
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("flows"),
        Key={"flow_id": {"S": flow_id}},
        UpdateExpression="REMOVE dimensions_snapshot",
    )
    consent(call)
    status, narrative, _ = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert status == 200
    radar = {axis["label"]: (axis["score"], axis["bucket"]) for axis in narrative["radar"]}
    # Recomputed now, the family's axes at close are unknown: not rated rather than a made-up middle.
    assert radar["Confidence"] == (7, "high") and radar["Established practice"] == (None, "not_rated")


def test_a_chat_turn_without_confidence_reads_not_rated_for_the_patient_and_the_admin(
    call: Call, services: Services
) -> None:
    flow_id = open_flow(call)
    for kind, summary in (("retrieval", "Retrieved three guideline passages"), ("llm_prompt", "Drafted an answer")):
        assert add_step(call, flow_id, kind, "chat", summary, confidence=None)[0] == 201
    outcome = {"type": "recommendation_delivered", "summary": "Answered the question"}
    status, closed, _ = call(
        "PATCH", f"/api/reasoning/flows/{flow_id}", {"state": "completed", "outcome": outcome}, WRITER
    )
    assert status == 200 and closed["patient_safe_summary"] is True
    unrated = {"score": None, "bucket": "not_rated"}
    # No step and no outcome carried a confidence: neither "Confidence low" nor a Risk of 7 derived from it.
    assert closed["dimensions_snapshot"]["confidence"] == closed["dimensions_snapshot"]["risk"] == unrated
    consent(call)
    status, narrative, _ = call("GET", f"/api/reasoning/flows/{flow_id}", who=PATIENT)
    assert status == 200
    radar = {axis["label"]: {"score": axis["score"], "bucket": axis["bucket"]} for axis in narrative["radar"]}
    assert radar["Confidence"] == radar["Caution flags"] == radar["Care team agreement"] == unrated
    assert radar["Evidence breadth"] == {"score": 3, "bucket": "medium"}  # two kinds of evidence: rated
    status, dag, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN)
    assert status == 200 and dag["dimensions"]["confidence"] == dag["dimensions"]["risk"] == unrated


def stored_items(services: Services) -> dict[str, int]:
    """How many items each table holds: a refused request leaves every count as it was."""
    dynamodb = services.aws.dynamodb
    return {
        name: dynamodb.scan(TableName=name, Select="COUNT")["Count"] for name in dynamodb.list_tables()["TableNames"]
    }


STEP = {"step_kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved passages"}
FLOW = {"trigger_type": "user_question", "trigger_ref": "chat/run-1", "trigger_summary": "Question about a lab trend"}
OUTCOME = {"type": "recommendation_delivered", "summary": "Recommended a follow-up test"}


@pytest.mark.parametrize(
    ("method", "path", "body", "who", "location"),
    [
        ("POST", "/api/reasoning/flows/{flow}/steps", {**STEP, "confidence": False}, WRITER, ["confidence"]),
        ("POST", "/api/reasoning/flows/{flow}/steps", {**STEP, "confidence": "0.5"}, WRITER, ["confidence"]),
        ("POST", "/api/reasoning/flows/{flow}/steps", {**STEP, "latency_ms": 12.0}, WRITER, ["latency_ms"]),
        ("POST", "/api/reasoning/flows/{flow}/steps", {**STEP, "latency_ms": "12"}, WRITER, ["latency_ms"]),
        ("POST", "/api/reasoning/flows/{flow}/steps", {**STEP, "agent": 7}, WRITER, ["agent"]),
        (
            "POST",
            "/api/reasoning/flows/{flow}/steps",
            {**STEP, "inputs": {"q": "x"}, "pii_fields": {"inputs": [True]}},
            WRITER,
            ["pii_fields", "inputs", 0],
        ),
        (
            "PATCH",
            "/api/reasoning/flows/{flow}",
            {"state": "completed", "outcome": {**OUTCOME, "confidence": False}},
            WRITER,
            ["outcome", "confidence"],
        ),
        ("PUT", "/api/reasoning/consent", {"reasoning_read": 0}, PATIENT, ["reasoning_read"]),
        ("PUT", "/api/reasoning/consent", {"reasoning_read": "true"}, PATIENT, ["reasoning_read"]),
        ("POST", "/api/reasoning/flows", {**FLOW, "trigger_ref": 5}, WRITER, ["trigger_ref"]),
    ],
    ids=[
        "confidence-false",
        "confidence-string",
        "latency-float",
        "latency-string",
        "agent-number",
        "pii-name-bool",
        "outcome-confidence-false",
        "consent-zero",
        "consent-string",
        "trigger-ref-number",
    ],
)
def test_a_mistyped_field_is_422_naming_it_and_writes_nothing(
    call: Call, services: Services, method: str, path: str, body: Any, who: dict[str, str], location: list[Any]
) -> None:
    flow_id = open_flow(call)
    before = stored_items(services)
    status, answer, _ = call(method, path.format(flow=flow_id), body, who)
    assert status == 422, answer  # a lax field would have taken it (201/200)
    assert answer["error"] == "validation_error"
    assert [f["loc"] for f in answer["fields"]] == [["body", *location]]
    assert stored_items(services) == before


def test_an_integer_is_a_valid_confidence(call: Call) -> None:
    flow_id = open_flow(call)
    status, step = add_step(call, flow_id, confidence=1)
    assert (status, step["confidence"]) == (201, 1.0)
    status, closed, _ = call(
        "PATCH",
        f"/api/reasoning/flows/{flow_id}",
        {"state": "completed", "outcome": {**OUTCOME, "confidence": 0}},
        WRITER,
    )
    assert (status, closed["outcome"]["confidence"]) == (200, 0.0)
