"""The demo incident through `flowledger serve`: the question of the README gets a cited diagnosis."""

from __future__ import annotations

import json
from typing import Any

import httpx

from flowledger.diagnosis.demo_incident import DEMO_QUESTION, ERROR_CODE, FAILED_CHECKOUTS
from tests.e2e.test_dev_server import token


def test_the_demo_question_gets_a_cited_diagnosis_through_the_cli(server: Any) -> None:
    done = server.cli("chat", DEMO_QUESTION, "--data-dir", str(server.data_dir.path))
    assert done.returncode == 0, done.stderr
    assert "SUCCESS DIAGNOSIS via flowledger-offline-v1" in done.stderr
    for status in ("ROUTED_DIAGNOSIS", "QUERYING_DATABASE", "QUERYING_LOGS", "LOOKING_UP_KNOWLEDGE", "RELEASING"):
        assert status in done.stderr
    assert str(FAILED_CHECKOUTS) in done.stdout and ERROR_CODE in done.stdout
    assert "runbook" in done.stdout.lower()  # the runbook is a reference
    assert "obs-" not in done.stdout and "call_" not in done.stdout


def test_the_diagnosis_is_in_the_session_history_and_its_follow_up_sees_it(server: Any) -> None:
    bearer = token(server, "--sub", "demo-user", "--scopes", "chat")
    headers = {"Authorization": f"Bearer {bearer}", "Accept": "application/json"}
    first = httpx.post(f"{server.base_url}/api/chat", json={"query": DEMO_QUESTION}, headers=headers, timeout=120)
    assert first.status_code == 200, first.text
    body = first.json()
    assert (body["intent"], body["release_outcome"]) == ("DIAGNOSIS", "SUCCESS"), json.dumps(body)
    assert str(FAILED_CHECKOUTS) in body["content"]["text"]
    assert body["content"]["references"], "the runbook is cited"
