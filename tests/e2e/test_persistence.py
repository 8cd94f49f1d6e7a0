"""`flowledger serve --data-dir D` keeps every table and bucket across restarts; `--reset` starts empty."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.signing import sigv4_headers

pytestmark = pytest.mark.e2e


def signed(server: Any, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    headers = sigv4_headers(server.data_dir.admin_credentials(), method, f"{server.base_url}{path}", body)
    return {**headers, "Content-Type": "application/json"}


def cli(server: Any, *args: str) -> str:
    result = server.cli(*args, "--data-dir", str(server.data_dir.path))
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def verified_counts(server: Any) -> str:
    """The counts line of `audit verify`: events, chains, checkpoints."""
    last = cli(server, "audit", "verify").strip().splitlines()[-1]
    assert last.startswith("ledger verified"), last
    return last


def test_a_restart_keeps_flows_steps_backlog_documents_and_checkpoints(
    tmp_path: Path, launch: Callable[..., Any]
) -> None:
    data_dir = tmp_path / "data"
    document = tmp_path / "notes" / "restart.md"
    document.parent.mkdir()
    document.write_text("# Restart notes\n\nThe embedded store is saved in the data directory.\n")
    first = launch(data_dir)
    writer = {
        "Authorization": "Bearer " + cli(first, "token", "--sub", "agent-p", "--scopes", "reasoning.write").strip()
    }
    opened = httpx.post(
        f"{first.base_url}/api/reasoning/flows",
        json={"trigger_type": "user_question", "trigger_ref": "persist/1", "trigger_summary": "A question"},
        headers=writer,
    )
    assert opened.status_code == 201, opened.text
    flow_id = opened.json()["flow_id"]
    for summary in ("Retrieved two passages", "Checked the claim"):
        step = httpx.post(
            f"{first.base_url}/api/reasoning/flows/{flow_id}/steps",
            json={"step_kind": "retrieval", "agent": "researcher", "summary_text": summary},
            headers=writer,
        )
        assert step.status_code == 201, step.text
    body = (
        b'{"idempotency_key": "persist-key-1", "trigger_type": "user_question", "trigger_ref": "persist/1",'
        b' "reason": "no_evidence_hits", "question_framing": "Find evidence."}'
    )
    path = "/admin/v1/reasoning/research/deeper-request"
    queued = httpx.post(f"{first.base_url}{path}", content=body, headers=signed(first, "POST", path, body))
    assert queued.status_code == 201, queued.text
    added = first.cli("knowledge", "add", str(document), "--data-dir", str(data_dir))
    assert added.returncode == 0, added.stderr
    cli(first, "jobs", "run", "ledger_checkpoint")
    latest = "/admin/v1/audit/checkpoints/latest"
    checkpoint = httpx.get(f"{first.base_url}{latest}", headers=signed(first, "GET", latest)).json()
    before = verified_counts(first)
    assert first.stop(signal.SIGINT) == 0

    second = launch(data_dir, port=first.port)  # the same port at once: a just-closed socket is free
    assert re.search(r"state +restored \d+ tables", second.output())
    assert verified_counts(second) == before  # the same events, chains and checkpoints
    dag = f"/admin/v1/reasoning/flows/{flow_id}/steps"
    page = httpx.get(f"{second.base_url}{dag}", headers=signed(second, "GET", dag)).json()
    assert [s["summary_text"] for s in page["steps"]] == ["Retrieved two passages", "Checked the claim"]
    # A token minted before the restart still verifies: the signing key is part of the data dir.
    assert httpx.get(f"{second.base_url}/api/me", headers=writer).status_code == 200
    assert httpx.get(f"{second.base_url}{latest}", headers=signed(second, "GET", latest)).json() == checkpoint
    pull = "/admin/v1/reasoning/research/backlog/next"
    pulled = httpx.post(f"{second.base_url}{pull}", content=b"{}", headers=signed(second, "POST", pull, b"{}"))
    assert pulled.json()["request"]["request_id"] == queued.json()["request_id"]
    assert "Restart notes" in cli(second, "knowledge", "list")
    assert second.stop(signal.SIGTERM) == 0

    third = launch(data_dir, "--reset")
    assert "reset: started empty" in third.output()
    assert httpx.get(f"{third.base_url}/api/me", headers=writer).status_code == 401  # a new signing key
    assert httpx.get(f"{third.base_url}{dag}", headers=signed(third, "GET", dag)).status_code == 404
    assert "Restart notes" not in cli(third, "knowledge", "list")
    assert third.stop() == 0
