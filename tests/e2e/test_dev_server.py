"""The dev server over real HTTP: what `make run` gives a developer."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.credentials import Credentials

from flowledger.store.tables import TABLES
from tests.signing import sigv4_headers

pytestmark = pytest.mark.e2e


def signed_headers(server: Any, method: str, path: str, secret: str | None = None) -> dict[str, str]:
    return sigv4_headers(server.data_dir.admin_credentials(), method, f"{server.base_url}{path}", secret=secret)


def token(server: Any, *args: str) -> str:
    result = server.cli("token", "--data-dir", str(server.data_dir.path), *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_health_answers_200_and_says_the_store_is_durable(server: Any) -> None:
    answer = httpx.get(f"{server.base_url}/health").json()
    assert answer == {"status": "ok", "model": "offline", "store": {"durable": True}}


def test_me_is_401_without_a_token_and_200_with_one(server: Any) -> None:
    assert httpx.get(f"{server.base_url}/api/me").status_code == 401
    assert httpx.get(f"{server.base_url}/api/me", headers={"Authorization": "Bearer x.y.z"}).status_code == 401
    bearer = token(server, "--sub", "erin", "--scopes", "documents", "--patient-id", "p-3")
    response = httpx.get(f"{server.base_url}/api/me", headers={"Authorization": f"Bearer {bearer}"})
    assert response.status_code == 200
    assert response.json() == {"kind": "user", "principal": "erin", "scopes": ["documents"], "patient_id": "p-3"}


def test_admin_route_needs_a_correct_signature(server: Any) -> None:
    url = f"{server.base_url}/admin/v1/me"
    assert httpx.get(url).status_code == 403
    assert httpx.get(url, headers=signed_headers(server, "GET", "/admin/v1/me", secret="wrong")).status_code == 403
    bearer = token(server, "--sub", "erin", "--scopes", "chat")
    assert httpx.get(url, headers={"Authorization": f"Bearer {bearer}"}).status_code == 403
    response = httpx.get(url, headers=signed_headers(server, "GET", "/admin/v1/me"))
    assert response.status_code == 200
    assert response.json()["principal"] == server.data_dir.admin_credentials().principal_arn


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_a_stock_sigv4_client_can_call_admin_routes(server: Any) -> None:
    credentials = server.data_dir.admin_credentials()
    result = subprocess.run(
        [
            "curl",
            "-sf",
            "--aws-sigv4",
            f"aws:amz:{credentials.region}:execute-api",
            "--user",
            f"{credentials.access_key_id}:{credentials.secret_access_key}",
            f"{server.base_url}/admin/v1/me",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert credentials.principal_arn in result.stdout


def test_openapi_and_docs_are_served(server: Any) -> None:
    document = httpx.get(f"{server.base_url}/openapi.json").json()
    assert {"/health", "/api/me", "/admin/v1/me"} <= set(document["paths"])
    docs = httpx.get(f"{server.base_url}/docs")
    assert docs.status_code == 200 and "<html" in docs.text.lower()


def test_local_json_lets_boto3_see_the_embedded_store(server: Any) -> None:
    endpoints = server.data_dir.endpoints()
    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoints.aws_endpoint_url,
        region_name=endpoints.region,
        aws_access_key_id="any",
        aws_secret_access_key="any",
    )
    names = set(client.list_tables()["TableNames"])
    assert {endpoints.tables[spec.name] for spec in TABLES} <= names


def test_jobs_run_reaches_the_local_server_through_its_data_dir(server: Any) -> None:
    result = server.cli("jobs", "run", "heartbeat", "--data-dir", str(server.data_dir.path))
    assert result.returncode == 0, result.stderr
    assert '"job": "heartbeat"' in result.stdout


def test_a_taken_port_fails_with_one_clear_line(server: Any) -> None:
    result = server.cli("serve", "--port", str(server.port), "--data-dir", str(server.data_dir.path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"flowledger: error: port {server.port} on 127.0.0.1 is already in use; pick another with --port"
    )


def test_checkpoint_job_verify_and_the_latest_checkpoint_route(server: Any) -> None:
    data_dir = str(server.data_dir.path)
    assert server.cli("jobs", "run", "ledger_checkpoint", "--data-dir", data_dir).returncode == 0
    verified = server.cli("audit", "verify", "--data-dir", data_dir)
    assert verified.returncode == 0 and "ledger verified" in verified.stdout
    path = "/admin/v1/audit/checkpoints/latest"
    assert httpx.get(f"{server.base_url}{path}").status_code == 403
    response = httpx.get(f"{server.base_url}{path}", headers=signed_headers(server, "GET", path))
    assert response.status_code == 200 and len(response.json()["root"]) == 64


def test_an_agent_records_over_http_and_the_patient_reads_it(server: Any) -> None:
    from flowledger.reasoning.recorder import HttpTransport, ReasoningFlowRecorder

    writer = token(server, "--sub", "agent-e2e", "--scopes", "reasoning.write")
    recorder = ReasoningFlowRecorder(HttpTransport(server.base_url, writer))
    with recorder.flow("user_question", "e2e/1", "Question about a lab trend", patient_id="p-e2e") as flow:
        first = flow.step("retrieval", "researcher", "Retrieved three passages", confidence=0.95)
        flow.step("verdict", "critic", "Checked the claim", parents=[first], confidence=0.94)
        flow.outcome("recommendation_delivered", "Recommended a follow-up test", 0.93)
    patient = {
        "Authorization": "Bearer "
        + token(server, "--sub", "ann", "--scopes", "reasoning.read", "--patient-id", "p-e2e")
    }
    url = f"{server.base_url}/api/reasoning/flows/{flow.flow_id}"
    assert httpx.get(url, headers=patient).json()["error"] == "consent_required"
    assert (
        httpx.put(
            f"{server.base_url}/api/reasoning/consent", json={"reasoning_read": True}, headers=patient
        ).status_code
        == 200
    )
    narrative = httpx.get(url, headers=patient).json()
    assert [s["summary"] for s in narrative["steps"]] == ["Retrieved three passages", "Checked the claim"]


def test_the_recorded_flow_became_a_pathway_that_matches_and_counts_a_reuse(server: Any) -> None:
    # The flow above closed with every confidence >= 0.9 and a recommendation: it seeded a pathway.
    backfill = server.cli("jobs", "run", "pathway_embedding_backfill", "--data-dir", str(server.data_dir.path))
    assert backfill.returncode == 0, backfill.stderr
    path = "/admin/v1/reasoning/pathways/match?trigger_type=user_question&trigger_ref=e2e/1"
    found = httpx.get(f"{server.base_url}{path}", headers=signed_headers(server, "GET", path)).json()
    best = found["candidates"][0]
    assert (best["reason"], best["pathway"]["trigger_ref"]) == ("exact_ref+semantic", "e2e/1")
    hit = f"/admin/v1/reasoning/pathways/{best['pathway']['pathway_id']}/hit"
    assert httpx.post(f"{server.base_url}{hit}", headers=signed_headers(server, "POST", hit)).json()["hit_count"] == 1
    inspect = server.cli("pathways", "inspect", "--data-dir", str(server.data_dir.path))
    assert inspect.returncode == 0, inspect.stderr
    assert "1 active, 1 embedded" in inspect.stdout and "user_question" in inspect.stdout


def test_chat_streams_over_http_and_the_cli_prints_the_answer(server: Any) -> None:
    bearer = token(server, "--sub", "chat-user", "--scopes", "chat")
    kinds = []
    with httpx.stream(
        "POST",
        f"{server.base_url}/api/chat",
        json={"query": "How does the audit ledger work?"},
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=60,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        kinds = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "start" and kinds[-2:] == ["content", "done"]
    answer = server.cli(
        "chat", "What must a patient do before reading a narrative?", "--data-dir", str(server.data_dir.path)
    )
    assert answer.returncode == 0, answer.stderr
    assert "Patient narratives and consent" in answer.stdout and "flowledger-offline-v1" in answer.stderr
    small_talk = server.cli("chat", "hello", "--data-dir", str(server.data_dir.path))
    assert small_talk.returncode == 0, small_talk.stderr
    assert (
        "(Not checked against any document: this is a conversational answer, not a sourced one.)" in small_talk.stdout
    )


def test_the_research_sdk_drives_the_backlog_through_signed_calls(server: Any) -> None:
    import asyncio

    from flowledger.research.client import MemoryClient

    credentials = server.data_dir.admin_credentials()

    async def loop() -> tuple[Any, Any, Any]:
        client = MemoryClient(
            server.base_url, credentials.region, Credentials(credentials.access_key_id, credentials.secret_access_key)
        )
        queued = await client.enqueue_deeper_research(
            idempotency_key="e2e-key-001",
            trigger_type="user_question",
            trigger_ref="e2e/1",
            reason="no_evidence_hits",
            question_framing="Find any evidence at all.",
        )
        pulled = await client.pull_next_research_request()
        done = await client.complete_research_request(pulled["request"]["request_id"], error="engine_gave_up")
        await client.aclose()
        return queued, pulled, done

    queued, pulled, done = asyncio.run(loop())
    assert pulled["request"]["request_id"] == queued["request_id"]
    assert done["status"] == "failed_voluntary"
    status = server.cli("backlog", "status", "--json", "--data-dir", str(server.data_dir.path))
    assert status.returncode == 0 and '"failed_voluntary": 1' in status.stdout


def test_ctrl_c_stops_everything_cleanly(tmp_path: Path, launch: Callable[..., Any]) -> None:
    own = launch(tmp_path / "data")  # a server of its own: the session's serves the other modules
    assert own.stop(signal.SIGINT) == 0
    output = own.output()
    assert "dev token" in output and "flowledger: stopped" in output
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{own.base_url}/health", timeout=2)
