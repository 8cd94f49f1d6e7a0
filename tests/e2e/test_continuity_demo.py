"""Conversation continuity through `flowledger serve`: the demo table, the CLI's source options, a restart.

One server for the module (a start costs seconds); the restart test stops it and starts it again on
the same data directory, so it runs last and leaves the fixture holding the new server.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RunningServer, launch_server
from tests.e2e.test_dev_server import token

pytestmark = pytest.mark.e2e

REGIONS = ("north", "south", "east", "west")


@dataclass
class Demo:
    server: RunningServer


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    holder = Demo(launch_server(tmp_path_factory.mktemp("continuity") / "data"))
    yield holder
    holder.server.stop()


def demo_table_id(server: RunningServer) -> str:
    """The demo table's id as the banner prints it for a user to copy."""
    found = re.findall(r"demo table\s+demo-sales\.csv (dc_[0-9A-Z]{26})", server.output())
    assert found, server.output()
    return str(found[-1])  # the last banner: a restarted server appends to the same log


def chat(server: RunningServer, *args: str) -> Any:
    done = server.cli("chat", "--data-dir", str(server.data_dir.path), *args)
    assert done.returncode == 0, done.stderr
    return done


def sources_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("  sources: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def session_of(stderr: str) -> str:
    found = re.search(r"\[session (ses_[0-9A-Z]{26}) ", stderr)
    assert found, stderr
    return found.group(1)


def headers(server: RunningServer, sub: str) -> dict[str, str]:
    bearer = token(server, "--sub", sub, "--scopes", "chat,documents")
    return {"Authorization": f"Bearer {bearer}", "Accept": "application/json"}


def ask(server: RunningServer, who: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{server.base_url}/api/chat", json=body, headers=who, timeout=120)
    assert response.status_code == 200, response.text
    outcome = dict(response.json())
    assert outcome["status"] == "SUCCESS", outcome
    return outcome


def test_the_banner_says_continuity_is_on_and_how_to_turn_it_off(demo: Demo) -> None:
    banner = demo.server.output()
    assert "continuity       on (the local default)" in banner
    assert "ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY=false" in banner
    table = demo_table_id(demo.server)
    assert f'"total amount by month" --select {table}' in banner


def test_the_demo_table_through_the_cli_reads_reruns_then_answers_from_history(demo: Demo) -> None:
    server, table = demo.server, demo_table_id(demo.server)
    first = chat(server, "total amount by month", "--select", table)
    assert "ANALYZING_TABLE" in first.stderr
    assert sources_line(first.stderr) == "  sources: demo-sales.csv v1 (selected, tabular, read) · decision tabular"
    assert f"[{table} v1]" in first.stdout  # the reference names the version read
    assert "2026-01" in first.stdout and "2026-05" in first.stdout
    session = session_of(first.stderr)

    second = chat(server, "--session", session, "now break that down by region")
    assert "ANALYZING_TABLE" in second.stderr
    assert "demo-sales.csv v1 (history, tabular, rerun)" in sources_line(second.stderr)
    assert "decision tabular" in sources_line(second.stderr)
    assert sum(region in second.stdout for region in REGIONS) >= 2, second.stdout

    third = chat(server, "--session", session, "what does that mean in simpler words?")
    assert "ANALYZING_TABLE" not in third.stderr
    assert sources_line(third.stderr).endswith("· decision history")
    assert "(history, reused)" in sources_line(third.stderr)


def test_a_document_uploaded_over_http_is_selectable_by_its_owner_only(demo: Demo) -> None:
    server = demo.server
    erin = headers(server, "erin")
    created = httpx.post(
        f"{server.base_url}/api/workspaces", json={"kind": "group", "name": "Erin's team"}, headers=erin, timeout=30
    )
    assert created.status_code == 201, created.text
    csv = b"region,amount\nnorth,10\nnorth,5\nsouth,7\n"
    upload = {
        "workspace_id": created.json()["workspace_id"],
        "file_name": "erin.csv",
        "kind": "csv",
        "content_base64": base64.b64encode(csv).decode(),
    }
    stored = httpx.post(f"{server.base_url}/api/documents", json=upload, headers=erin, timeout=30)
    assert stored.status_code == 201, stored.text
    document_id = stored.json()["document"]["document_id"]

    turn = {"query": "total amount by region", "selection_mode": "selected", "document_ids": [document_id]}
    outcome = ask(server, erin, turn)
    assert "ANALYZING_TABLE" in outcome["status_codes"]
    context = outcome["content"]["source_context"]
    assert [(s["file_name"], s["version"], s["outcome"]) for s in context["sources"]] == [("erin.csv", 1, "read")]
    assert "15" in outcome["content"]["text"]  # north: 10 + 5
    # Another user selecting it is refused in one line: the selection is reauthorised, not trusted.
    mallory = token(server, "--sub", "mallory", "--scopes", "chat,documents")
    refused = server.cli(
        "chat", "--data-dir", str(server.data_dir.path), "--token", mallory, "--select", document_id, "sum it"
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("flowledger: error: the server answered 404"), refused.stderr
    assert "Traceback" not in refused.stderr and "erin.csv" not in refused.stderr + refused.stdout


def test_a_restarted_server_keeps_one_demo_workspace_and_the_session_follows_up(demo: Demo) -> None:
    server, table = demo.server, demo_table_id(demo.server)
    first = chat(server, "total amount by month", "--select", table)
    session = session_of(first.stderr)

    data_dir = server.data_dir.path
    assert server.stop() == 0
    demo.server = server = launch_server(data_dir)
    assert "state            restored" in server.output()
    assert demo_table_id(server) == table

    listed = httpx.get(f"{server.base_url}/api/workspaces", headers=headers(server, "demo"), timeout=30)
    assert listed.status_code == 200, listed.text
    named = [w for w in listed.json()["workspaces"] if w["name"] == "Demo" and w["owner"] == "demo"]
    assert len(named) == 1, listed.json()

    follow_up = chat(server, "--session", session, "now break that down by region")
    assert "demo-sales.csv v1 (history, tabular, rerun)" in sources_line(follow_up.stderr)


def test_the_environment_variable_turns_continuity_off_and_a_selection_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY", "false")  # the server inherits it
    off = launch_server(tmp_path / "data")
    try:
        assert "continuity       off (ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY is set)" in off.output()
        refused = off.cli("chat", "--data-dir", str(off.data_dir.path), "--select", demo_table_id(off), "total?")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert refused.stderr.startswith("flowledger: error: the server answered 422"), refused.stderr
        plain = off.cli("chat", "--data-dir", str(off.data_dir.path), "what is the audit ledger?")
        assert plain.returncode == 0 and "sources:" not in plain.stderr, plain.stderr
    finally:
        off.stop()
