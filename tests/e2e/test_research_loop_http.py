"""The research loop through `flowledger serve`, as an operator drives it: a signed deeper-research request
over HTTP, the backlog consumer job run from the CLI against the server's store, then the completed row's
flow read back over the signed admin route: the researcher's steps, recorded under its own principal."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from flowledger.config import load_settings
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.research.backlog import Backlog, request_id_for
from flowledger.services import build_services
from tests.e2e.conftest import FLOWLEDGER, clean_env
from tests.e2e.test_concurrency import Signer

pytestmark = pytest.mark.e2e
KEY = "e2e-loop-00000001"
QUESTION = "How are audit events chained and checkpointed in the ledger?"


@pytest.fixture(scope="module")
def loop_server(tmp_path_factory: pytest.TempPathFactory, launch: Callable[..., Any]) -> Iterator[Any]:
    """A server of its own with the loop as `flowledger serve` runs it (every flag at its local default)."""
    running = launch(tmp_path_factory.mktemp("loop") / "data")
    yield running
    running.stop()


def signed(server: Any, client: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else b""
    response = client.request(method, path, content=data, headers=Signer(server).headers(method, path, data))
    return response


def test_an_operator_request_is_researched_and_its_flow_read_back(loop_server: Any) -> None:
    assert "research loop    on" in loop_server.output()  # the banner says what runs
    with httpx.Client(base_url=loop_server.base_url, timeout=60) as client:
        created = signed(
            loop_server,
            client,
            "POST",
            "/admin/v1/reasoning/research/deeper-request",
            {
                "idempotency_key": KEY,
                "trigger_type": "user_question",
                "trigger_ref": "ops/audit-ledger",
                "reason": "operator_request",
                "question_framing": QUESTION,
            },
        )
        assert created.status_code == 201, created.text
        # The consumer as the scheduler runs it, from the CLI (the server's own tick may win the row first).
        environment = {**clean_env(), "BACKLOG_CONSUMER_ENABLED": "true", "REASONING_FLOW_CAPTURE_ENABLED": "true"}
        job = subprocess.run(
            [*FLOWLEDGER, "jobs", "run", "backlog_consumer", "--data-dir", str(loop_server.data_dir.path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**environment, "PATH": os.environ.get("PATH", "")},
        )
        assert job.returncode == 0, job.stderr
        endpoints = loop_server.data_dir.endpoints()
        store = build_services(
            load_settings(aws_endpoint_url=endpoints.aws_endpoint_url, aws_region=endpoints.region),
            EMBEDDED_CREDENTIALS,
        )
        row = Backlog(store).get(request_id_for(KEY))
        assert row is not None and row.status.value == "completed", row
        assert row.completed_flow_id is not None
        flow = signed(loop_server, client, "GET", f"/admin/v1/reasoning/flows/{row.completed_flow_id}")
        assert flow.status_code == 200, flow.text
        body = flow.json()
        assert body["flow"]["created_by"] == "service:research"
        assert (body["flow"]["trigger_type"], body["flow"]["trigger_ref"]) == ("user_question", "ops/audit-ledger")
        steps = signed(loop_server, client, "GET", f"/admin/v1/reasoning/flows/{row.completed_flow_id}/steps").json()
        assert [s["step_kind"] for s in steps["steps"]] == ["retrieval", "llm_prompt", "verdict"]
        assert all(QUESTION not in s["summary_text"] for s in steps["steps"])
        view = signed(loop_server, client, "GET", "/admin/v1/reasoning/research/backlog").json()
        assert view["status_distribution"]["completed"] == 1 and view["status_distribution"]["pending"] == 0
