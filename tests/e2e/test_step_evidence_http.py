"""The demo diagnosis through `flowledger serve`: its flow's steps hold what each tool ran and found.

The chat goes through HTTP with a bearer token; the flow is found through the signed admin trace
search and its steps read through the signed steps route, where the declared PII fields read as sealed
and one opens through its own audited route. The server's own store holds those fields as sealed
envelopes. The CLI's export of the same flow carries none of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowledger.config import load_settings
from flowledger.diagnosis.demo_incident import DEMO_QUESTION, ERROR_CODE
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.reasoning.service import FlowService
from flowledger.services import build_services
from flowledger.store.envelope import SEALED_MARKER, is_sealed
from tests.e2e.test_concurrency import Signer
from tests.e2e.test_dev_server import token

pytestmark = pytest.mark.e2e


def stored_steps(server: Any, flow_id: str) -> list[dict[str, Any]]:
    """The flow's step items as the server stored them (sealed fields still sealed)."""
    endpoints = server.data_dir.endpoints()
    settings = load_settings(aws_endpoint_url=endpoints.aws_endpoint_url, aws_region=endpoints.region)
    return FlowService(build_services(settings, EMBEDDED_CREDENTIALS)).flow_with_steps(flow_id)[1]


def signed_get(server: Any, path: str) -> Any:
    response = httpx.get(f"{server.base_url}{path}", headers=Signer(server).headers("GET", path), timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def tool_step(steps: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    return next(s for s in steps if s["step_kind"] == "tool_call" and s["inputs"].get("tool") == tool)


def test_the_demo_diagnosis_records_what_each_tool_ran_and_found(server: Any, tmp_path: Path) -> None:
    bearer = token(server, "--sub", "evidence-user", "--scopes", "chat")
    headers = {"Authorization": f"Bearer {bearer}", "Accept": "application/json"}
    answer = httpx.post(f"{server.base_url}/api/chat", json={"query": DEMO_QUESTION}, headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["release_outcome"] == "SUCCESS", body
    found = signed_get(server, f"/admin/v1/reasoning/flows?trace_id={body['session_id']}")
    (flow,) = [f for f in found["flows"] if f["trigger_ref"] == f"chat/{body['run_id']}"]
    steps = signed_get(server, f"/admin/v1/reasoning/flows/{flow['flow_id']}/steps?limit=100")["steps"]
    sealed = {SEALED_MARKER: True}  # how the steps route shows a sealed field

    sql = tool_step(steps, "query_sql")
    assert sql["inputs"]["sql_shape"].startswith("SELECT failure_code, COUNT(*) AS failed_orders")
    assert "status = '?'" in sql["inputs"]["sql_shape"] and sql["inputs"]["tables"] == ["orders"]
    assert sql["outputs"]["columns"] == ["failure_code", "failed_orders", "first_failure", "last_failure"]
    assert sql["outputs"]["total_rows"] >= 1 and sql["outputs"]["rows_truncated"] is False
    assert sql["inputs"]["sql"] == sealed and sql["outputs"]["first_rows"] == sealed
    opened = signed_get(
        server, f"/admin/v1/reasoning/flows/{flow['flow_id']}/steps/{sql['step_id']}/sealed?side=inputs&field=sql"
    )
    assert opened["value"].startswith("SELECT failure_code") and "LIMIT 200" in opened["value"]

    logs = tool_step(steps, "query_logs")
    assert logs["inputs"]["log_group"].startswith("/flowledger/demo/")
    assert logs["inputs"]["start"] < logs["inputs"]["end"] and logs["inputs"]["term_count"] >= 1
    assert logs["outputs"]["total_lines"] >= 1
    assert logs["inputs"]["terms"] == sealed and logs["outputs"]["matched_lines"] == sealed

    knowledge = tool_step(steps, "lookup_knowledge")
    assert knowledge["outputs"]["document_ids"]
    assert knowledge["inputs"]["query"] == sealed and knowledge["outputs"]["documents"] == sealed

    model = next(s for s in steps if s["step_kind"] == "model_call")
    assert model["outputs"]["finish_reason"] == "tool_calls" and model["outputs"]["usage_source"] == "none"
    assert model["outputs"]["model"] == "flowledger-offline-v1"
    assert model["back_refs"]["llm_call_log_ref"] == f"{body['run_id']}/model-1"
    # What the tools found (the error code in rows, lines and excerpts) is stored sealed only.
    stored = stored_steps(server, flow["flow_id"])
    assert is_sealed(tool_step(stored, "query_sql")["inputs"]["sql"])
    assert is_sealed(tool_step(stored, "query_logs")["outputs"]["matched_lines"])
    assert ERROR_CODE not in json.dumps(stored, default=str) + json.dumps(steps)

    out = tmp_path / "flows.jsonl"
    exported = server.cli("flows", "export", "--data-dir", str(server.data_dir.path), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    (record,) = [r for r in records if r["flow"]["flow_id"] == flow["flow_id"]]
    text = json.dumps(record)
    for leaked in (SEALED_MARKER, "first_rows", "sql_shape", "matched_lines", "total_tokens", "failure_code"):
        assert leaked not in text
