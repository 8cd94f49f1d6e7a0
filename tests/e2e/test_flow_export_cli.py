"""`flowledger flows export --data-dir` against a running `flowledger serve`: flows recorded over HTTP by a
writer's token, closed, then exported from the server's store as raw records and as DPO pairs, and the raw
file read back by `flowledger flows lint`."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowledger.reasoning.dataset import HIDDEN_SUMMARY, read_records

pytestmark = pytest.mark.e2e
PATIENT = "pt-e2e-MARKER-55"
TRIGGER_SUMMARY = "A question whose summary MARKER stays in the store"
SECRET = "secret MARKER input"


@pytest.fixture(scope="module")
def export_server(tmp_path_factory: pytest.TempPathFactory, launch: Callable[..., Any]) -> Iterator[Any]:
    running = launch(tmp_path_factory.mktemp("export") / "data")
    yield running
    running.stop()


def record_flow(
    client: httpx.Client, trigger_type: str, outcome: str, summaries: list[str], state: str = "completed"
) -> str:
    opened = client.post(
        "/api/reasoning/flows",
        json={
            "trigger_type": trigger_type,
            "trigger_ref": "e2e/export",
            "trigger_summary": TRIGGER_SUMMARY,
            "patient_id": PATIENT,
        },
    )
    assert opened.status_code == 201, opened.text
    flow_id = str(opened.json()["flow_id"])
    parents: list[str] = []
    for kind, summary in zip(("graph_walk", "llm_prompt", "verdict"), summaries, strict=True):
        step = client.post(
            f"/api/reasoning/flows/{flow_id}/steps",
            json={
                "step_kind": kind,
                "agent": "critic",
                "summary_text": summary,
                "inputs": {"claim": SECRET},
                "pii_fields": {"inputs": ["claim"]},
                "back_refs": {"llm_call_log_ref": "llm-e2e"} if kind == "llm_prompt" else {},
                "parent_step_ids": parents,
            },
        )
        assert step.status_code == 201, step.text
        parents = [step.json()["step_id"]]
    closed = client.patch(
        f"/api/reasoning/flows/{flow_id}",
        json={"state": state, "outcome": {"type": outcome, "summary": "Checked the claim"}},
    )
    assert closed.status_code == 200, closed.text
    return flow_id


def test_export_through_the_cli_from_a_running_server(export_server: Any, tmp_path: Path) -> None:
    token = export_server.cli(
        "token", "--sub", "agent-export", "--scopes", "reasoning.write", "--data-dir", str(export_server.data_dir.path)
    )
    assert token.returncode == 0, token.stderr
    headers = {"Authorization": f"Bearer {token.stdout.strip()}"}
    with httpx.Client(base_url=export_server.base_url, headers=headers, timeout=30) as client:
        accepted = record_flow(
            client, "claim_review", "claim_created", ["Followed 2 citations", "Judged it", "Accepted"]
        )
        rejected = record_flow(
            client, "claim_review", "no_action", ["Followed 2 citations", "Reviewed metformin 500mg", "Rejected"]
        )
        aborted = record_flow(client, "user_question", "error", ["Looked", "Asked", "Stopped"], state="aborted")
    data_dir = str(export_server.data_dir.path)
    out = tmp_path / "flows.jsonl"

    raw = export_server.cli("flows", "export", "--data-dir", data_dir, "--out", str(out))

    assert raw.returncode == 0, raw.stderr
    assert raw.stderr.splitlines()[-1] == f"flowledger: 3 flows written to {out}"
    assert [p.name for p in tmp_path.iterdir()] == ["flows.jsonl"]  # the temporary file was renamed, not left
    data = out.read_bytes()
    for marker in (PATIENT, TRIGGER_SUMMARY, SECRET, "metformin", "llm-e2e"):
        assert marker.encode() not in data, marker
    records = [record for _, record in read_records(io.BytesIO(data))]
    assert [r.flow.flow_id for r in records] == [accepted, rejected, aborted]  # close order
    assert records[1].steps[1].summary_text == HIDDEN_SUMMARY
    lint = export_server.cli("flows", "lint", str(out))
    assert lint.returncode == 0, lint.stdout + lint.stderr

    dpo = export_server.cli("flows", "export", "--format", "dpo", "--data-dir", data_dir, "--outcome", "completed")
    assert dpo.returncode == 0, dpo.stderr
    assert "1 pair written to stdout from 2 flows" in dpo.stderr.splitlines()[-1]
    (pair,) = [json.loads(line) for line in dpo.stdout.splitlines()]
    assert set(pair) == {"prompt", "chosen", "rejected", "metadata"}
    assert (pair["metadata"]["chosen_flow_id"], pair["metadata"]["rejected_flow_id"]) == (accepted, rejected)
    assert PATIENT not in dpo.stdout and TRIGGER_SUMMARY not in dpo.stdout

    empty = export_server.cli("flows", "export", "--data-dir", data_dir, "--until", "2000-01-01", "--quiet")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert empty.stderr.splitlines()[-1] == "flowledger: 0 flows written to stdout"

    # otel-export reads the same window from the store; the spans are those of the exported file's flows.
    from_store, from_file = tmp_path / "store.otlp.jsonl", tmp_path / "file.otlp.jsonl"
    spans = export_server.cli("flows", "otel-export", "--data-dir", data_dir, "--out", str(from_store))
    assert spans.returncode == 0, spans.stderr
    assert spans.stdout.strip() == f"wrote 3 flows as 12 spans in 1 request to {from_store}"
    again = export_server.cli("flows", "otel-export", "--input", str(out), "--out", str(from_file))
    assert again.returncode == 0, again.stderr
    assert from_store.read_bytes() == from_file.read_bytes()
    for marker in (PATIENT, TRIGGER_SUMMARY, SECRET, "metformin"):
        assert marker.encode() not in from_store.read_bytes(), marker
    aborted_only = export_server.cli(
        "flows", "otel-export", "--data-dir", data_dir, "--outcome", "aborted", "--out", "-", "--json"
    )
    assert aborted_only.returncode == 0, aborted_only.stderr
    assert json.loads(aborted_only.stderr)["flows"] == 1 and aborted in aborted_only.stdout
    both = export_server.cli("flows", "otel-export", "--input", str(out), "--since", "2026-01-01", "--out", "-")
    assert both.returncode == 2 and "--since chooses flows of the store" in both.stderr
