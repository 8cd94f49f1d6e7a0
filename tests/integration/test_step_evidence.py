"""Steps carry their evidence: what a tool ran and found, what a model call cost, bounded and sealed where declared.

Through the chat API (a diagnosis over a SQL database, a knowledge turn), then read back from the flow
service as the admin route serves it and from the stored items; the patient narrative (through the
reasoning route) and the dataset export carry none of it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flowledger.chat.models import Intent
from flowledger.diagnosis.observations import ObservationLedger
from flowledger.diagnosis.recording import DiagnosisRecording, tool_fields
from flowledger.diagnosis.sql_sources import SqliteReadOnlySource
from flowledger.diagnosis.tool_sql import QuerySqlTool
from flowledger.diagnosis.tools import ToolOutcome, ToolResult
from flowledger.identity import Principal
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.ports import Reply, ToolCall, Usage
from flowledger.reasoning.export import ExportWindow, closed_flow_records
from flowledger.reasoning.models import MAX_STEP_PAYLOAD_BYTES, StepCreate
from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
from flowledger.reasoning.service import FlowService
from flowledger.reasoning.step_evidence import MAX_RECORDED_CELL_CHARS, MAX_STEP_EVIDENCE_BYTES, payload_bytes
from flowledger.services import Services
from flowledger.store.envelope import SEALED_MARKER, is_sealed
from tests.integration.test_chat_use_case import Harness, knowledge_answer
from tests.integration.test_diagnosis_agent import Diagnosis, calls, draft, route, verdict

pytestmark = pytest.mark.anyio
ADMIN = Principal(kind="iam", id="arn:aws:iam::1:user/a")
WRITER = Principal(kind="user", id="service:chat", scopes=frozenset({"reasoning.write"}))
PATIENT = {"sub": "u-ann", "scope": "reasoning.read", "patient_id": "p-ann"}
NAME = "Jane Roe"  # what a patient row holds: never in a summary, a narrative, an export or a stored item
LONG_NOTE = "note " * 100  # 500 characters: recorded cut to 300
SQL = "SELECT name, note FROM patients WHERE city = 'Springfield' AND age > 40 ORDER BY id"


@pytest.fixture
def patients_db(tmp_path: Path) -> Path:
    """A database with a patient table of 50 rows, one note longer than a recorded cell."""
    path = tmp_path / "clinic.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE patients (id INTEGER, name TEXT, note TEXT, city TEXT, age INTEGER)")
        db.executemany(
            "INSERT INTO patients VALUES (?, ?, ?, 'Springfield', 50)",
            [(i, f"{NAME} {i}", LONG_NOTE if i == 1 else "ok") for i in range(1, 51)],
        )
    return path


def concluding(text: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return draft(lambda seen: [{"text": text, "observation_ids": [seen[0]["observation_id"]]}], lambda seen: text)


def stored_step(services: Services, flow_id: str, step_id: str) -> dict[str, Any]:
    _, records = FlowService(services).flow_with_steps(flow_id)
    return next(r for r in records if r["step_id"] == step_id)


async def test_a_sql_step_holds_its_statement_and_first_rows_sealed_and_says_what_was_cut(
    services: Services, scripted_openai: Any, patients_db: Path
) -> None:
    harness = Diagnosis(services, scripted_openai, tools=[QuerySqlTool(SqliteReadOnlySource(patients_db))])
    scripted_openai.script = [
        route(),
        calls(("query_sql", {"sql": SQL})),
        concluding("The patients table answered."),
        verdict(True),
    ]
    outcome = await harness.ask("json", "Which patients in Springfield are over forty?")
    assert outcome["status"] == "SUCCESS", outcome
    steps = harness.flow_steps(outcome)
    tool = next(s for s in steps if s.step_kind == "tool_call")
    # Opened (as the admin DAG serves it): the statement as it ran, and the first 20 of its 50 rows.
    assert tool.inputs["sql"].startswith("SELECT name, note FROM patients WHERE city = 'Springfield'")
    assert "LIMIT 200" in tool.inputs["sql"] and tool.inputs["sql_truncated"] is False
    assert tool.inputs["sql_shape"].startswith("SELECT name, note FROM patients WHERE city = '?' AND age > ?")
    assert tool.inputs["tables"] == ["patients"]
    assert tool.outputs["columns"] == ["name", "note"]
    assert (tool.outputs["total_rows"], tool.outputs["rows_truncated"]) == (50, True)
    rows = tool.outputs["first_rows"]
    assert len(rows) == 20 and rows[1] == [f"{NAME} 2", "ok"]
    assert len(rows[0][1]) == MAX_RECORDED_CELL_CHARS and rows[0][1].endswith("…")
    assert (tool.pii_fields.inputs, tool.pii_fields.outputs) == (["sql"], ["first_rows"])
    # Stored: the SQL text and the rows are sealed envelopes; the shape, counts and columns are open.
    stored = stored_step(services, tool.flow_id, tool.step_id)
    assert is_sealed(stored["inputs"]["sql"]) and is_sealed(stored["outputs"]["first_rows"])
    raw = json.dumps(stored, default=str)
    assert NAME not in raw and "Springfield" not in raw
    assert stored["outputs"]["total_rows"] == 50
    # No summary quotes any of it.
    summaries = json.dumps([s.summary_text for s in steps])
    assert NAME not in summaries and "SELECT" not in summaries and "Springfield" not in summaries


async def test_a_knowledge_turn_records_its_query_sealed_and_the_documents_it_read_and_cited(
    services: Services, scripted_openai: Any
) -> None:
    KnowledgeIndex(services).add_document("ledger.md", b"# Ledger\n\nThe audit ledger checkpoints every five minutes.")
    harness = Harness(services, scripted_openai)
    harness.use_case.recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(services), WRITER))
    harness.scripted.script = [route(Intent.KNOWLEDGE_QUERY.value), knowledge_answer()]
    outcome = await harness.ask("json", "how often does the ledger checkpoint?")
    cited = [r["document_id"] for r in outcome["content"]["references"]]
    assert cited
    flow = FlowService(services).flows_by_trace(outcome["session_id"], 10, None).flows[0]
    routing, answer = FlowService(services).admin_flow(ADMIN, flow.flow_id).steps
    assert routing.outputs == {"intent": "KNOWLEDGE_QUERY", "attempts": 1, "total_tokens": 18}
    assert answer.inputs == {"query": "how often does the ledger checkpoint?"}
    assert answer.outputs["cited_document_ids"] == cited
    assert set(cited) <= set(answer.outputs["retrieved_document_ids"])
    assert (answer.outputs["total_tokens"], answer.outputs["finish_reason"]) == (18, "stop")
    assert answer.outputs["release_outcome"] == "SUCCESS"
    stored = stored_step(services, flow.flow_id, answer.step_id)
    assert is_sealed(stored["inputs"]["query"]) and "ledger" not in json.dumps(stored, default=str)


def sql_observation(rows: int, cell: str) -> Any:
    """A query_sql observation as the tool makes it, with ``rows`` rows of ten ``cell`` columns."""
    details = {
        "statement": SQL + " LIMIT 200",
        "tables": ["patients"],
        "columns": [f"c{i}" for i in range(10)],
        "rows": [[cell] * 10 for _ in range(rows)],
        "more_rows": False,
    }
    result = ToolResult(ToolOutcome.OK, "{}", rows=rows, details=details)
    return ObservationLedger("run_x").record("query_sql", {"sql": SQL}, result)


def test_a_step_stays_within_its_bound_whatever_the_tool_returned() -> None:
    inputs, outputs, pii = tool_fields(sql_observation(200, "x" * 5000))
    assert payload_bytes(inputs, outputs) <= MAX_STEP_EVIDENCE_BYTES < MAX_STEP_PAYLOAD_BYTES
    assert (outputs["total_rows"], outputs["rows_truncated"]) == (200, True)
    # 20 rows of ten 300-character cells do not fit: the rows are halved, and the step says so.
    assert len(outputs["first_rows"]) == 10 and outputs["first_rows_truncated"] is True
    assert all(len(cell) == MAX_RECORDED_CELL_CHARS for row in outputs["first_rows"] for cell in row)
    # The API takes it, sealed fields included.
    StepCreate(
        step_kind="tool_call", agent="a", summary_text="Called a tool", inputs=inputs, outputs=outputs, pii_fields=pii
    )


def test_a_long_statement_is_cut_at_4_kb_and_says_so() -> None:
    long_sql = "SELECT " + ", ".join(f"column_{i}" for i in range(1000)) + " FROM patients"  # noqa: S608 (never run)
    result = ToolResult(ToolOutcome.REFUSED, "refused: too long")
    inputs, outputs, pii = tool_fields(ObservationLedger("run_x").record("query_sql", {"sql": long_sql}, result))
    assert len(inputs["sql"]) == 4096 and inputs["sql_truncated"] is True
    assert outputs["reason"] == "refused: too long" and pii["outputs"] == ["reason"]


@pytest.fixture
def patient_get(services: Services, load_function: Any, rest_event: Any, lambda_context: Any) -> Any:
    """A GET or PUT on the reasoning function as the patient, through its Lambda handler: (status, body)."""
    handler = load_function("reasoning").handler

    def invoke(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = handler(rest_event(method, path, body=body, authorizer=PATIENT), lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return invoke


def test_the_narrative_and_the_export_carry_no_step_evidence(services: Services, patient_get: Any) -> None:
    recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(services), WRITER))
    with recorder.flow("user_question", "chat/run-e", "A question about a lab trend", patient_id="p-ann") as flow:
        recording = DiagnosisRecording(flow, "run_e", None)
        reply = Reply(tool_calls=(ToolCall("c1", "query_sql", {"sql": SQL}),), usage=Usage(11, 7), model="m")
        recording.model_call("run_e/model-1", reply, 12, 1024)
        recording.tool_call(sql_observation(3, NAME), 5)
        flow.outcome("recommendation_delivered", "Answered the question", 0.9)
    flow_id = flow.flow_id
    assert patient_get("PUT", "/api/reasoning/consent", {"reasoning_read": True})[0] == 200
    status, narrative = patient_get("GET", f"/api/reasoning/flows/{flow_id}")
    assert status == 200, narrative
    shown = json.dumps(narrative)
    assert [s["summary"] for s in narrative["steps"]] == [
        "The model proposed 1 tool call",
        "Called query_sql: ok, 3 results",
    ]
    for leaked in (NAME, "SELECT", "Springfield", "first_rows", "total_tokens", "run_e/model-1", SEALED_MARKER):
        assert leaked not in shown
    records = [r for r in closed_flow_records(services, ExportWindow()) if r.flow.flow_id == flow_id]
    assert len(records) == 1
    exported = records[0].model_dump_json()
    for leaked in (NAME, "SELECT", "Springfield", "first_rows", "total_tokens", SEALED_MARKER, "p-ann"):
        assert leaked not in exported


def test_evidence_that_cannot_be_recorded_never_fails_the_step(services: Services) -> None:
    recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(services), WRITER))
    odd = ToolResult(ToolOutcome.OK, "{}", rows=1, details={"columns": ["a"], "rows": 5})  # rows is not a list
    with recorder.flow("user_question", "chat/run-odd", "A question") as flow:
        observation = ObservationLedger("run_odd").record("query_sql", {}, odd)
        DiagnosisRecording(flow, "run_odd", None).tool_call(observation, 1)
    (step,) = FlowService(services).admin_flow(ADMIN, flow.flow_id or "").steps
    assert (step.summary_text, step.inputs, step.outputs) == (
        "Called query_sql: ok, 1 result",
        {"tool": "query_sql"},
        {"observation_id": "run_odd/obs-1"},
    )
