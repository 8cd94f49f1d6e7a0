"""The erasure canary, through `flowledger serve`: a patient's unique strings planted through the public routes
(a flow with sealed fields, their narrative and consent, a chat turn, an upload, OTLP spans with message
contents, one of them still waiting for its parent) are found nowhere after the patient is erased: not in any
table, bucket or object version the store serves, not in any file of its data directory (journal, snapshot),
not in the server's log, in no form (plain, JSON, base64). Another patient's strings all still read back
through the routes, and `flowledger audit verify` passes."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowledger.cli.store import services as store_services
from flowledger.otlp.ingest import flow_id_of as otlp_flow_id
from flowledger.store.tables import BUCKETS, TABLES
from tests.e2e.conftest import RunningServer
from tests.e2e.test_step_batch_http import token
from tests.signing import sigv4_headers

ANN, BOB = "p-canary-ann", "p-canary-bob"  # patients of this test alone on the suite's shared server
CANARIES = {ANN: "cnry-ann-4c1f9e", BOB: "cnry-bob-77a2d0"}
WHERE = ("flow", "step", "sealed", "chat", "upload", "span", "waiting")  # one canary per place, per patient


def canary(patient: str, where: str) -> str:
    return f"{CANARIES[patient]}-{where}"


def forms(text: str) -> list[bytes]:
    """``text`` as it could sit in a file: plain (and so inside JSON, being ASCII), and base64 at each of the
    three alignments a longer base64 string could put it in (the whole groups only)."""
    found = [text.encode(), json.dumps(text).encode()]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + text.encode())
        found.append(encoded[4 if shift else 0 : -4])  # the groups made of the text alone
    return found


@pytest.fixture
def served(server: RunningServer) -> RunningServer:
    """The suite's shared server: what other tests wrote there is no canary, and its files are searched whole."""
    return server


class Client:
    def __init__(self, server: RunningServer, bearer: str) -> None:
        self.server, self.headers = server, {"Authorization": f"Bearer {bearer}"}

    def send(self, method: str, path: str, body: Any = None, **extra: str) -> httpx.Response:
        return httpx.request(
            method, self.server.base_url + path, json=body, headers={**self.headers, **extra}, timeout=60
        )


def admin(server: RunningServer, method: str, path: str, body: Any = None, **query: str) -> httpx.Response:
    url = str(httpx.URL(f"{server.base_url}{path}", params=query or None))
    content = json.dumps(body).encode() if body is not None else b""
    headers = sigv4_headers(server.data_dir.admin_credentials(), method, url, content)
    if body is not None:
        headers["Content-Type"] = "application/json"
    return httpx.request(method, url, content=content, headers=headers, timeout=120)


def otlp_body(patient: str, trace_id: str) -> dict[str, Any]:
    """A model call's span with the patient's message, and a tool span whose parent has not arrived (it waits)."""
    now = time.time_ns()

    def attributes(values: dict[str, str]) -> list[dict[str, Any]]:
        return [{"key": key, "value": {"stringValue": value}} for key, value in values.items()]

    messages = json.dumps([{"role": "user", "parts": [{"content": canary(patient, "span")}]}])
    spans = [
        {
            "traceId": trace_id,
            "spanId": "a1" * 8,
            "name": "chat smollm2",
            "kind": 3,
            "startTimeUnixNano": str(now - 2_000_000),
            "endTimeUnixNano": str(now - 1_000_000),
            "attributes": attributes(
                {"gen_ai.operation.name": "chat", "gen_ai.request.model": "smollm2", "gen_ai.input.messages": messages}
            ),
        },
        {
            "traceId": trace_id,
            "spanId": "b2" * 8,
            "parentSpanId": "c3" * 8,  # never sent: the span waits in otlp_waiting, sealed
            "name": "execute_tool lookup",
            "kind": 1,
            "startTimeUnixNano": str(now - 900_000),
            "endTimeUnixNano": str(now - 800_000),
            "attributes": attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.arguments": json.dumps({"q": canary(patient, "waiting")}),
                }
            ),
        },
    ]
    resource = attributes({"service.name": "care-bot", "flowledger.patient_id": patient})
    return {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]}


def plant(server: RunningServer, patient: str, writer: Client) -> dict[str, str]:
    """Every personal field of ``patient``, through the public routes; the ids that find them again."""
    sub = f"u-{patient}"
    user = Client(
        server, token(server, "--sub", sub, "--scopes", "chat,documents,reasoning.read", "--patient-id", patient)
    )
    start = {
        "trigger_type": "user_question",
        "trigger_ref": "chat/run-1",
        "trigger_summary": f"Question {canary(patient, 'flow')}",
        "patient_id": patient,
    }
    flow = writer.send("POST", "/api/reasoning/flows", start)
    assert flow.status_code == 201, flow.text
    flow_id = flow.json()["flow_id"]
    step_body = {
        "step_kind": "retrieval",
        "agent": "researcher",
        "summary_text": f"Read {canary(patient, 'step')}",
        "inputs": {"query": canary(patient, "sealed"), "k": 3},
        "pii_fields": {"inputs": ["query"]},
    }
    step = writer.send("POST", f"/api/reasoning/flows/{flow_id}/steps", step_body)
    assert step.status_code == 201, step.text
    closing = {"state": "completed", "outcome": {"type": "no_action", "summary": "Nothing to do", "confidence": 0.9}}
    assert writer.send("PATCH", f"/api/reasoning/flows/{flow_id}", closing).status_code == 200
    assert user.send("PUT", "/api/reasoning/consent", {"reasoning_read": True}).status_code == 200
    assert user.send("GET", f"/api/reasoning/flows/{flow_id}").status_code in (200, 403)  # the narrative, read
    chat = user.send("POST", "/api/chat", {"query": f"What is {canary(patient, 'chat')}?"}, Accept="application/json")
    assert chat.status_code == 200, chat.text
    content = base64.b64encode(f"My notes: {canary(patient, 'upload')}".encode()).decode()
    upload = {
        "session_id": chat.json()["session_id"],
        "file_name": "notes.txt",
        "kind": "text",
        "content_base64": content,
    }
    document = user.send("POST", "/api/documents", upload)
    assert document.status_code == 201, document.text
    trace_id = ("ca" if patient == ANN else "cb") * 16
    spans = writer.send("POST", "/api/otlp/v1/traces", otlp_body(patient, trace_id))
    assert spans.status_code == 200, spans.text
    return {
        "flow_id": flow_id,
        "step_id": step.json()["step_id"],
        "session_id": chat.json()["session_id"],
        "document_id": document.json()["document"]["document_id"],
        "sub": sub,
    }


def data_files(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield path, path.read_bytes()


def served_data(server: RunningServer) -> bytes:
    """Every item of every table and every version of every object, as the store serves them."""
    services = store_services(str(server.data_dir.path))
    aws = services.aws
    raw = {"default": lambda value: value.decode("latin-1")}  # binary attributes as their bytes
    parts = [json.dumps(aws.dynamodb.scan(TableName=aws.table_name(t.name))["Items"], **raw).encode() for t in TABLES]
    for bucket in BUCKETS:
        name = aws.bucket_name(bucket.name)
        listed = aws.s3.list_object_versions(Bucket=name)
        for version in listed.get("Versions", []):
            body = aws.s3.get_object(Bucket=name, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
            parts += [version["Key"].encode(), body]
    return b"\n".join(parts)


def found_in(blob: bytes, patient: str) -> list[str]:
    return [where for where in WHERE if any(form in blob for form in forms(canary(patient, where)))]


def test_an_erased_patients_canaries_are_nowhere_and_everyone_elses_still_read(served: RunningServer) -> None:
    writer = Client(served, token(served, "--sub", "care-agent", "--scopes", "reasoning.write"))
    planted = {patient: plant(served, patient, writer) for patient in (ANN, BOB)}
    # Planted where the store keeps them in the clear (sealed fields, spans and chat texts are ciphertext already).
    assert set(found_in(served_data(served), ANN)) >= {"flow", "step", "upload"}
    assert "chat" not in found_in(served_data(served), ANN)  # sealed under her key

    while (
        erased := admin(served, "POST", f"/admin/v1/subjects/{ANN}/erasure", {"reason": "gdpr_art17_request"})
    ).status_code == 202:
        pass
    assert erased.status_code == 200, erased.text
    counts = erased.json()["counts"]
    assert (counts["flows"], counts["sessions"], counts["documents"], counts["waiting_spans"]) == (3, 1, 1, 1), counts

    # Nowhere: not in what the store serves, not in any file of the data directory, not in the server's log.
    assert found_in(served_data(served), ANN) == []
    for path, content in data_files(served.data_dir.path):
        assert found_in(content, ANN) == [], path
    assert found_in(served.output().encode(), ANN) == []
    # Bob's are all there, read back through the routes.
    bob = planted[BOB]
    sealed = admin(
        served,
        "GET",
        f"/admin/v1/reasoning/flows/{bob['flow_id']}/steps/{bob['step_id']}/sealed",
        side="inputs",
        field="query",
    )
    assert sealed.json()["value"] == canary(BOB, "sealed")
    bob_user = Client(served, token(served, "--sub", bob["sub"], "--scopes", "chat,documents", "--patient-id", BOB))
    runs = bob_user.send("GET", f"/api/chat/sessions/{bob['session_id']}/runs").json()
    assert canary(BOB, "chat") in json.dumps(runs)
    assert canary(BOB, "upload") in served_data(served).decode(errors="replace")
    overview = admin(served, "GET", f"/admin/v1/reasoning/flows/{bob['flow_id']}").json()
    assert canary(BOB, "flow") in json.dumps(overview)
    # Her traces' receipts committed to her bodies only through her salt, erased with her.
    receipts = admin(served, "GET", "/admin/v1/audit/events", subject=f"flow:{otlp_flow_id('ca' * 16)}").json()
    digests = [e["payload"] for e in receipts["events"] if e["action"] == "reasoning.otlp.received"]
    assert digests and all("body_hmac" in p and "body_sha256" not in p for p in digests)
    # Her agent's traces sent again are refused span by span, and nothing of them is kept.
    again = writer.send("POST", "/api/otlp/v1/traces", otlp_body(ANN, "ca" * 16))
    assert again.status_code == 200, again.text
    assert again.json()["partialSuccess"]["rejectedSpans"] == "2", again.text
    assert found_in(served_data(served), ANN) == []
    # Ann's routes answer 410; the ledger verifies from its first event.
    ann_flow = admin(served, "GET", f"/admin/v1/reasoning/flows/{planted[ANN]['flow_id']}")
    assert (ann_flow.status_code, ann_flow.json()["error"]) == (410, "erased")
    verified = served.cli("audit", "verify", "--data-dir", str(served.data_dir.path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
