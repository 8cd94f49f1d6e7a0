"""The OTLP receiver through `flowledger serve`, as an agent's OpenTelemetry SDK meets it: the SDK's own OTLP/HTTP
protobuf exporter (gzip, a bearer token in OTEL_EXPORTER_OTLP_HEADERS' place) sends a trace that becomes a flow;
a batch with one bad span is answered 200 with ``partial_success`` naming it; a replayed body writes nothing new;
what is not OTLP is refused whole; and every request is receipted in the flow's evidence."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flowledger.otlp.ingest import flow_id_of
from tests.e2e.conftest import RunningServer, clean_env
from tests.e2e.test_step_batch_http import admin_get, token
from tests.otlp_flows import flow_of, run_snippet, verifies_offline
from tests.unit.test_otlp_ingest_mapping import SECRET, agent_trace

ROOT = Path(__file__).parents[2]
TRACES = "/api/otlp/v1/traces"
LOGS = "/api/otlp/v1/logs"
PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def writer(server: RunningServer) -> str:
    return token(server, "--sub", "otlp-agent", "--scopes", "reasoning.write")


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider, memory
    provider.shutdown()


def post(server: RunningServer, bearer: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        server.base_url + TRACES, content=body, headers={**PROTOBUF, **headers, "Authorization": f"Bearer {bearer}"}
    )


def answer_of(response: httpx.Response) -> ExportTraceServiceResponse:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-protobuf"
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(response.content)
    return answer


def flow_steps(server: RunningServer, flow_id: str) -> list[dict[str, Any]]:
    return list(admin_get(server, f"/admin/v1/reasoning/flows/{flow_id}/steps", limit="100")["steps"])


def test_the_sdk_exporter_sends_a_trace_that_becomes_a_flow(server: RunningServer, writer: str) -> None:
    exporter = OTLPSpanExporter(
        endpoint=server.base_url + TRACES, headers={"Authorization": f"Bearer {writer}"}, compression=Compression.Gzip
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent_trace(provider)
    provider.shutdown()
    spans = memory.get_finished_spans()
    flow_id = flow_id_of(format(spans[0].context.trace_id, "032x"))

    steps = flow_steps(server, flow_id)
    assert len(steps) == len(spans) == 5
    assert SECRET not in json.dumps(steps)  # contents stay sealed in the admin's page too
    kinds = sorted(step["step_kind"] for step in steps)
    assert "model_call" in kinds and "tool_call" in kinds
    receipts = admin_get(
        server, "/admin/v1/audit/events", subject=f"flow:{flow_id}", action="reasoning.otlp.received", limit="50"
    )["events"]
    # SimpleSpanProcessor: one request a span, each receipted with what it took. Spans end, and are sent,
    # children first: four waited for the root and were written with it, hanging from it.
    assert len(receipts) == 5
    assert [(e["payload"]["recorded"], e["payload"]["waiting"], e["payload"]["released"]) for e in receipts] == [
        (0, 1, 0),
        (0, 1, 0),
        (0, 1, 0),
        (0, 1, 0),
        (1, 0, 4),
    ]
    assert sorted(len(step["parent_step_ids"]) for step in steps) == [0, 1, 1, 1, 1]
    assert {event["payload"]["content_type"] for event in receipts} == {"protobuf"}


def test_one_bad_span_is_named_and_refused_alone_and_a_replay_writes_nothing(
    server: RunningServer, writer: str, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    agent_trace(provider[0])
    request: ExportTraceServiceRequest = encode_spans(provider[1].get_finished_spans())
    bad = request.resource_spans[0].scope_spans[0].spans[1]
    bad.end_time_unix_nano = bad.start_time_unix_nano - 1
    body = request.SerializeToString()

    first = answer_of(post(server, writer, body))
    assert first.partial_success.rejected_spans == 1
    assert first.partial_success.error_message == f"span {bad.span_id.hex()}: the span ends before it starts"
    flow_id = flow_id_of(bad.trace_id.hex())
    assert len(flow_steps(server, flow_id)) == 4

    again = answer_of(post(server, writer, gzip.compress(body, mtime=0), **{"Content-Encoding": "gzip"}))
    assert again.partial_success.rejected_spans == 1  # the same bad span, said again
    assert len(flow_steps(server, flow_id)) == 4
    receipts = admin_get(
        server, "/admin/v1/audit/events", subject=f"flow:{flow_id}", action="reasoning.otlp.received", limit="50"
    )["events"]
    assert [
        (e["payload"]["recorded"], e["payload"]["already_recorded"], e["payload"]["refused"]) for e in receipts
    ] == [
        (4, 0, 1),
        (0, 4, 1),
    ]
    assert [e["payload"]["body_sha256"] for e in receipts] == [  # no patient named: a plain digest
        hashlib.sha256(body).hexdigest(),
        hashlib.sha256(gzip.compress(body, mtime=0)).hexdigest(),  # the body as received
    ]


def test_json_comes_back_as_json(
    server: RunningServer, writer: str, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    agent_trace(provider[0])
    spans = provider[1].get_finished_spans()
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-agent"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": format(span.context.trace_id, "032x"),
                                "spanId": format(span.context.span_id, "016x"),
                                "parentSpanId": format(span.parent.span_id, "016x") if span.parent else "",
                                "name": span.name,
                                "kind": 1,
                                "startTimeUnixNano": str(span.start_time),
                                "endTimeUnixNano": str(span.end_time),
                            }
                            for span in spans
                        ]
                    }
                ],
            }
        ]
    }
    response = httpx.post(
        server.base_url + TRACES,
        json=document,
        headers={"Authorization": f"Bearer {writer}"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {}  # nothing refused: no partial_success
    flow_id = flow_id_of(format(spans[0].context.trace_id, "032x"))
    assert len(flow_steps(server, flow_id)) == len(spans)


@pytest.mark.parametrize(
    ("content_type", "body", "status", "code"),
    [
        ("application/x-protobuf", b"\xff\xff\xff", 400, "malformed_body"),
        ("application/json", b"[1, 2]", 400, "malformed_body"),
        ("text/plain", b"spans", 415, "unsupported_media_type"),
    ],
    ids=["not-protobuf", "json-not-an-object", "text"],
)
def test_what_is_not_otlp_is_refused_whole(
    server: RunningServer, writer: str, content_type: str, body: bytes, status: int, code: str
) -> None:
    response = post(server, writer, body, **{"Content-Type": content_type})
    assert (response.status_code, response.json()["error"]) == (status, code)


def test_the_receiver_needs_the_reasoning_write_scope(server: RunningServer) -> None:
    reader = token(server, "--sub", "otlp-reader", "--scopes", "reasoning.read")
    assert post(server, reader, b"").status_code == 403
    assert httpx.post(server.base_url + TRACES, content=b"", headers=PROTOBUF).status_code == 401


def test_an_evaluation_event_is_a_recorded_evaluation_of_the_step_it_judges(server: RunningServer, writer: str) -> None:
    auth = {"Authorization": f"Bearer {writer}"}
    resource = Resource.create({"service.name": "graded-bot"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(server.base_url + TRACES, headers=auth)))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(server.base_url + LOGS, headers=auth))
    )
    logger = logger_provider.get_logger("test.evaluator")
    with tracer_provider.get_tracer("test").start_as_current_span("chat m") as span:
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
        logger.emit(
            event_name="gen_ai.evaluation.result",
            attributes={
                "gen_ai.evaluation.name": "relevance",
                "gen_ai.evaluation.score.value": 0.9,
                "gen_ai.evaluation.score.label": "pass",
                "gen_ai.evaluation.explanation": f"it answered {SECRET}",
            },
        )
        logger.emit(event_name="gen_ai.choice", body={"message": {"content": SECRET}})
    trace_id, span_id = span.get_span_context().trace_id, span.get_span_context().span_id
    tracer_provider.shutdown()
    logger_provider.shutdown()

    steps = {step["step_kind"]: step for step in flow_steps(server, flow_id_of(format(trace_id, "032x")))}
    assert set(steps) == {"model_call", "evaluation", "event"}
    judged = steps["model_call"]["step_id"]
    assert steps["evaluation"]["summary_text"] == "Evaluation relevance: 0.9 (pass)"
    assert steps["evaluation"]["parent_step_ids"] == [judged] and steps["event"]["parent_step_ids"] == [judged]
    assert SECRET not in json.dumps(steps)
    # the records came before their span: each waited and hangs from it, not from the flow as an orphan
    assert format(span_id, "016x") == steps["model_call"]["inputs"]["otel"]["span_id"]

    outside = {
        "resourceLogs": [
            {"scopeLogs": [{"logRecords": [{"eventName": "gen_ai.choice", "body": {"stringValue": "x"}}]}]}
        ]
    }
    answer = httpx.post(server.base_url + LOGS, json=outside, headers=auth).json()
    assert answer["partialSuccess"] == {
        "rejectedLogRecords": "1",
        "errorMessage": "log record resourceLogs[0].scopeLogs[0].logRecords[0]: "
        "a log record outside a trace has no flow to belong to",
    }


def test_the_guides_sdk_snippet_sends_a_flow_that_verifies_offline(server: RunningServer, tmp_path: Path) -> None:
    ran = run_snippet(server, "send_spans.py", tmp_path, patient="p-snippet-sdk")
    assert ran.returncode == 0, ran.stderr
    flow, steps = flow_of(server, "p-snippet-sdk")
    assert (flow["trigger_type"], flow["patient_id"]) == ("otlp", "p-snippet-sdk")
    by_kind = {step["step_kind"]: step for step in steps}
    assert set(by_kind) == {"agent_invocation", "tool_call"}
    assert by_kind["tool_call"]["summary_text"] == "Tool lookup_order"
    assert by_kind["tool_call"]["parent_step_ids"] == [by_kind["agent_invocation"]["step_id"]]
    assert "shipped on Monday" not in json.dumps(steps)  # the tool's result is sealed
    verifies_offline(server, flow["flow_id"], tmp_path)


def test_the_javascript_sdks_json_exporter_sends_a_trace_that_becomes_a_flow(
    server: RunningServer, writer: str
) -> None:
    env = {
        **clean_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"{server.base_url}/api/otlp",
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {writer}",
        "NODE_PATH": str(ROOT / "node_modules"),
    }
    sent = subprocess.run(
        ["node", str(ROOT / "tests" / "clients" / "otlp_json_export.cjs"), "p-js"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    ids = json.loads(sent.stdout)
    flow, steps = flow_of(server, "p-js")
    assert flow["flow_id"] == flow_id_of(ids["trace_id"])
    by_span = {step["inputs"]["otel"]["span_id"]: step for step in steps}
    assert set(by_span) == {ids["agent"], ids["tool"]}
    assert by_span[ids["tool"]]["parent_step_ids"] == [by_span[ids["agent"]]["step_id"]]
    assert (by_span[ids["agent"]]["summary_text"], by_span[ids["tool"]]["summary_text"]) == (
        "Agent js-agent invoked",
        "Tool lookup_order",
    )
    receipts = admin_get(
        server, "/admin/v1/audit/events", subject=f"flow:{flow['flow_id']}", action="reasoning.otlp.received"
    )["events"]
    assert {event["payload"]["content_type"] for event in receipts} == {"json"}  # the JS exporter sends JSON
