"""From an answer to its flow through `flowledger serve`: the flow id a turn names in its start and done
events, its JSON answer, the runs history and the CLI is a flow the admin route reads once the turn ends."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.e2e.test_dev_server import signed_headers, token

pytestmark = pytest.mark.e2e
FLOW_ID = re.compile(r"^fl_[0-9A-Z]{26}$")


def admin_flow(server: Any, flow_id: str) -> httpx.Response:
    path = f"/admin/v1/reasoning/flows/{flow_id}"
    return httpx.get(f"{server.base_url}{path}", headers=signed_headers(server, "GET", path), timeout=30)


def streamed(server: Any, bearer: str, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The turn's events by kind, as the stream sent them."""
    with httpx.stream(
        "POST", f"{server.base_url}/api/chat", json=body, headers={"Authorization": f"Bearer {bearer}"}, timeout=60
    ) as response:
        frames = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    return {frame["type"]: frame for frame in frames}


def test_a_turn_names_one_flow_in_its_events_answer_and_history_and_the_flow_exists(server: Any) -> None:
    bearer = token(server, "--sub", "flow-link-user", "--scopes", "chat")
    events = streamed(server, bearer, {"query": "How does the audit ledger work?"})
    flow_id = events["start"]["flow_id"]
    assert FLOW_ID.match(flow_id) and events["done"]["flow_id"] == flow_id
    session_id = events["start"]["session_id"]
    read = admin_flow(server, flow_id)
    assert read.status_code == 200, read.text
    assert read.json()["flow"]["trace_id"] == session_id  # the flow page links back to this conversation

    answer = httpx.post(
        f"{server.base_url}/api/chat",
        json={"query": "hello", "session_id": session_id},
        headers={"Authorization": f"Bearer {bearer}", "Accept": "application/json"},
        timeout=60,
    ).json()
    assert FLOW_ID.match(answer["flow_id"]) and answer["flow_id"] != flow_id
    assert admin_flow(server, answer["flow_id"]).status_code == 200

    runs = httpx.get(
        f"{server.base_url}/api/chat/sessions/{session_id}/runs", headers={"Authorization": f"Bearer {bearer}"}
    ).json()["runs"]
    assert [run["flow_id"] for run in runs] == [answer["flow_id"], flow_id]  # newest first


def test_the_cli_prints_the_flow_with_its_console_link(server: Any) -> None:
    done = server.cli("chat", "hello", "--data-dir", str(server.data_dir.path))
    assert done.returncode == 0, done.stderr
    found = re.search(r"  flow: (fl_[0-9A-Z]{26})  (\S+)\n", done.stderr)
    assert found, done.stderr
    assert found.group(2) == f"{server.base_url}/console/flows/{found.group(1)}"
    assert admin_flow(server, found.group(1)).status_code == 200
