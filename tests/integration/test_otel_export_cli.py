"""`flowledger flows otel-export` against a loopback OTLP/HTTP receiver that decodes what it is sent."""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from flowledger.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures"
DAG = str(FIXTURES / "otel" / "flows-dag.jsonl")
CLEAN = str(FIXTURES / "flows" / "sample-flows-clean.jsonl")
DAG_SPANS = 11  # two flows: 1 + 7 steps, 1 + 2 steps
CLEAN_SPANS = 40


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def request(self) -> ExportTraceServiceRequest:
        return ExportTraceServiceRequest.FromString(self.body)

    @property
    def spans(self) -> list[Span]:
        return [s for r in self.request.resource_spans for scope in r.scope_spans for s in scope.spans]


@dataclass
class Receiver:
    """Answers each POST with the next scripted (status, headers), then 200 with an OTLP response."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    rejected_spans: int = 0

    def spans(self) -> list[Span]:
        return [span for item in self.received for span in item.spans]


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    for variable in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        monkeypatch.delenv(variable, raising=False)
    for variable in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"):
        monkeypatch.delenv(variable, raising=False)
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, headers = state.script.pop(0) if state.script else (200, {})
            payload = b""
            if status == 200:
                partial = ExportTracePartialSuccess(rejected_spans=state.rejected_spans)
                payload = ExportTraceServiceResponse(partial_success=partial).SerializeToString()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def export(*args: str) -> int:
    return main(["flows", "otel-export", *args])


def attrs(span: Span) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        raw = getattr(item.value, kind)
        values[item.key] = [v.string_value for v in raw.values] if kind == "array_value" else raw
    return values


def test_the_receiver_gets_one_trace_per_flow_as_genai_spans(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces") == 0
    (item,) = receiver.received
    assert item.path == "/v1/traces"
    assert item.headers["content-type"] == "application/x-protobuf"
    spans = item.spans
    assert [span.name for span in spans] == [
        "invoke_agent intent_router",
        "routing",
        "chat",
        "execute_tool tool_call",
        "execute_tool tool_call",
        "draft",
        "evidence_guard",
        "release",
        "invoke_agent researcher",
        "retrieval",
        "chat",
    ]
    kinds = [attrs(span)["openinference.span.kind"] for span in spans]
    assert kinds == [
        "AGENT",
        "CHAIN",
        "LLM",
        "TOOL",
        "TOOL",
        "CHAIN",
        "GUARDRAIL",
        "CHAIN",
        "AGENT",
        "RETRIEVER",
        "LLM",
    ]
    assert {attrs(span)["gen_ai.conversation.id"] for span in spans[:8]} == {"ses_demo"}
    aborted = spans[8]
    assert (aborted.status.code, aborted.status.message) == (Status.STATUS_CODE_ERROR, "timeout")
    assert {kv.key: kv.value.string_value for kv in item.request.resource_spans[0].resource.attributes}[
        "service.name"
    ] == "flowledger"
    assert capsys.readouterr().out == f"sent 2 flows as 11 spans in 1 request to {receiver.url}/v1/traces\n"


def test_a_multi_parent_step_has_its_first_parent_and_links_to_the_rest(receiver: Receiver) -> None:
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces") == 0
    spans = receiver.spans()
    by_step = {attrs(s)["flowledger.step.id"]: s for s in spans if "flowledger.step.id" in attrs(s)}
    draft = next(s for s in spans if s.name == "draft")
    parents = attrs(draft)["flowledger.step.parent_step_ids"]
    assert len(parents) == 3
    assert draft.parent_span_id == by_step[parents[0]].span_id
    assert [link.span_id for link in draft.links] == [by_step[p].span_id for p in parents[1:]]
    assert [attrs(link)["flowledger.step.id"] for link in draft.links] == parents[1:]  # type: ignore[arg-type]


def test_a_re_export_sends_the_same_ids(receiver: Receiver) -> None:
    url = f"{receiver.url}/v1/traces"
    assert export("--input", DAG, "--endpoint", url) == 0
    assert export("--input", DAG, "--endpoint", url) == 0
    first, second = receiver.received
    ids = [[(s.trace_id, s.span_id, s.parent_span_id) for s in item.spans] for item in (first, second)]
    assert ids[0] == ids[1] and len(set(ids[0])) == DAG_SPANS
    assert first.body == second.body


def test_headers_come_from_the_environment_the_langfuse_keys_and_the_options(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=flow%20ledger,x-override=from-env")
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-public")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-very-secret")
    url = f"{receiver.url}/api/public/otel/v1/traces"
    assert export("--input", DAG, "--endpoint", url, "--header", "X-Override=from-option") == 0
    headers = receiver.received[0].headers
    assert headers["authorization"] == "Basic " + base64.b64encode(b"pk-lf-public:sk-lf-very-secret").decode()
    assert headers["x-langfuse-ingestion-version"] == "4"
    assert headers["x-team"] == "flow ledger"
    assert headers["x-override"] == "from-option"
    out, err = capsys.readouterr()
    assert "sk-lf-very-secret" not in out + err and headers["authorization"][6:] not in out + err


def test_langfuse_keys_from_the_environment_stay_off_other_endpoints(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-public")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-very-secret")
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces") == 0
    assert "authorization" not in receiver.received[0].headers


def test_explicit_langfuse_keys_are_sent_anywhere(receiver: Receiver) -> None:
    args = ["--langfuse-public-key", "pk", "--langfuse-secret-key", "sk"]
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/otel/v1/traces", *args) == 0
    assert receiver.received[0].headers["authorization"] == "Basic " + base64.b64encode(b"pk:sk").decode()


def test_half_a_langfuse_key_pair_is_refused_before_anything_is_sent(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces", "--langfuse-secret-key", "sk-x") == 2
    assert receiver.received == []
    err = capsys.readouterr().err
    assert "both keys" in err and "sk-x" not in err


def test_a_malformed_header_is_refused_without_echoing_it(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces", "--header", "Bearer s3cr3t") == 2
    assert receiver.received == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--header number 1" in err and "s3cr3t" not in err


def test_requests_are_batched_by_spans(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"{receiver.url}/v1/traces"
    assert export("--input", CLEAN, "--endpoint", url, "--batch-spans", "16") == 0
    assert [len(item.spans) for item in receiver.received] == [16, 16, 8]
    assert len({s.span_id for s in receiver.spans()}) == CLEAN_SPANS
    assert capsys.readouterr().out.endswith(f"as 40 spans in 3 requests to {url}\n")


def test_a_busy_receiver_is_retried_and_gets_the_same_body(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver.script = [(503, {"Retry-After": "0"}), (429, {"Retry-After": "0"})]
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces") == 0
    assert len(receiver.received) == 3
    assert len({item.body for item in receiver.received}) == 1
    assert "in 1 request" in capsys.readouterr().out


def test_a_receiver_busy_past_every_retry_is_exit_2(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    receiver.script = [(503, {"Retry-After": "0"})] * 5
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces") == 2
    assert len(receiver.received) == 5
    assert "HTTP 503 Service Unavailable after 5 attempts; nothing was sent" in capsys.readouterr().err


def test_a_4xx_is_one_line_naming_the_status_and_is_not_retried(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver.script = [(200, {}), (401, {})]
    url = f"{receiver.url}/v1/traces"
    assert export("--input", CLEAN, "--endpoint", url, "--batch-spans", "16") == 2
    assert len(receiver.received) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"flowledger: error: {url} refused the spans: HTTP 401 Unauthorized: check the credentials")
    assert "1 request (16 spans) had gone through" in err
    assert err.count("\n") == 1


def test_spans_the_receiver_rejects_are_reported_and_exit_1(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver.rejected_spans = 2
    assert export("--input", DAG, "--endpoint", f"{receiver.url}/v1/traces") == 1
    assert capsys.readouterr().out.endswith("; the receiver rejected 2 spans\n")


def test_a_bad_line_sends_nothing(receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "flows.jsonl"
    bad.write_bytes(Path(DAG).read_bytes() + b'{"flow": {}}\n')
    assert export("--input", str(bad), "--endpoint", f"{receiver.url}/v1/traces") == 2
    assert receiver.received == []
    assert f"{bad} line 3: " in capsys.readouterr().err


def test_stdin_is_read_with_a_dash(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(Path(DAG).read_bytes()))
    assert export("--input", "-", "--endpoint", f"{receiver.url}/v1/traces") == 0
    assert len(receiver.spans()) == DAG_SPANS


class _Stdin:
    def __init__(self, data: bytes) -> None:
        import io

        self.buffer = io.BytesIO(data)


def test_out_writes_the_requests_as_otlp_json_lines(
    receiver: Receiver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "spans.jsonl"
    assert export("--input", CLEAN, "--out", str(out), "--batch-spans", "16") == 0
    assert export("--input", CLEAN, "--endpoint", f"{receiver.url}/v1/traces", "--batch-spans", "16") == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    for line, item in zip(lines, receiver.received, strict=True):
        body = json.loads(line)
        span = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16  # OTLP/JSON: ids in hex
        assert ParseDict(_base64_ids(body), ExportTraceServiceRequest()) == item.request
    assert f"as 40 spans in 3 requests to {out}\n" in capsys.readouterr().out


def _base64_ids(value: Any) -> Any:
    """OTLP/JSON's hex ids back to protobuf JSON's base64, to compare with what the receiver decoded."""
    if isinstance(value, list):
        return [_base64_ids(item) for item in value]
    if isinstance(value, dict):
        return {
            key: base64.b64encode(bytes.fromhex(item)).decode()
            if key in ("traceId", "spanId", "parentSpanId")
            else _base64_ids(item)
            for key, item in value.items()
        }
    return value
