"""OTLP/HTTP bodies as the OpenTelemetry SDK sends them, decoded, and their spans read as flow steps.

The spans come from the real OpenTelemetry SDK (a TracerProvider and its OTLP protobuf encoder, the one the
OTLP/HTTP exporter sends with), carrying the attributes a released GenAI, OpenInference or OpenLLMetry
instrumentation writes: what is decoded and mapped is what a real exporter puts on the wire.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from flowledger.errors import MalformedBody, PayloadTooLarge, UnsupportedMediaType
from flowledger.otlp import decode
from flowledger.otlp.mapping import SpanRefused, attributes, span_step
from flowledger.reasoning.guard import check_summary

SECRET = "Patient Jane Roe, MRN 4417, takes 40-mg atorvastatin"  # a content: must only ever be sealed


@pytest.fixture
def recorded() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "Support Bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def agent_trace(provider: TracerProvider) -> None:
    """An agent as the GenAI conventions and OpenInference describe it: invoke, a model call, a tool, retrieval."""
    tracer = provider.get_tracer("test.instrumentation")
    with tracer.start_as_current_span("invoke_agent triage") as root:
        root.set_attributes({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Triage Agent"})
        with tracer.start_as_current_span("chat gpt-4o-mini") as chat:
            chat.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.usage.input_tokens": 812,
                    "gen_ai.usage.output_tokens": 64,
                    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"content": SECRET}]}]),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"content": "ok"}]}]),
                    "http.response.status_code": 200,
                }
            )
        with tracer.start_as_current_span("execute_tool lookup_order") as tool:
            tool.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup_order",
                    "gen_ai.tool.call.arguments": json.dumps({"patient": SECRET}),
                    "gen_ai.tool.call.result": "order 12",
                }
            )
            tool.set_status(Status(StatusCode.ERROR, "timed out"))
        with tracer.start_as_current_span("retrieve") as retrieve:
            retrieve.set_attributes(
                {
                    "openinference.span.kind": "RETRIEVER",
                    "input.value": SECRET,
                    "retrieval.documents.0.document.content": SECRET,
                    "retrieval.documents.1.document.content": "policy",
                }
            )
        with tracer.start_as_current_span("legacy completion") as legacy:
            legacy.set_attributes(
                {
                    "gen_ai.system": "openai",
                    "llm.request.type": "chat",
                    "traceloop.span.kind": "task",
                    "gen_ai.prompt.0.content": SECRET,
                    "gen_ai.completion.0.content": "fine",
                    "gen_ai.usage.prompt_tokens": 5,
                }
            )


def protobuf_body(spans: tuple[ReadableSpan, ...]) -> bytes:
    return encode_spans(spans).SerializeToString()


def otlp_json(spans: tuple[ReadableSpan, ...]) -> dict[str, Any]:
    """The request as OTLP/JSON writes it: hex ids and integer enums (not protobuf's base64 and enum names)."""
    document = json_format.MessageToDict(encode_spans(spans))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
                span["kind"] = Span.SpanKind.Value(span["kind"])
    return document


def steps_of(request: Any) -> dict[str, Any]:
    steps = {}
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                steps[span.name] = span_step(span, attributes(resource.resource.attributes))
    return steps


def test_the_sdks_protobuf_and_the_same_request_as_otlp_json_decode_alike(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = recorded
    agent_trace(provider)
    spans = exporter.get_finished_spans()
    from_protobuf = decode.parse_traces(gzip.compress(protobuf_body(spans)), "application/x-protobuf", "gzip")
    from_json = decode.parse_traces(json.dumps(otlp_json(spans)).encode(), "application/json; charset=utf-8", None)
    assert from_protobuf == from_json == encode_spans(spans)


def test_each_span_is_a_step_of_its_kind_with_safe_facts_and_its_contents_set_apart(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = recorded
    agent_trace(provider)
    steps = steps_of(decode.parse_traces(protobuf_body(exporter.get_finished_spans()), "application/x-protobuf", ""))
    root, chat, tool = steps["invoke_agent triage"], steps["chat gpt-4o-mini"], steps["execute_tool lookup_order"]
    retrieve, legacy = steps["retrieve"], steps["legacy completion"]
    assert (root.kind, root.agent, root.summary, root.parent_span_id) == (
        "agent_invocation",
        "triage_agent",
        "Agent Triage Agent invoked",
        None,
    )
    assert (chat.kind, chat.model, chat.input_tokens, chat.output_tokens) == ("model_call", "gpt-4o-mini", 812, 64)
    assert chat.summary == "Model call to gpt-4o-mini, 812 \u2192 64 tokens"
    assert chat.parent_span_id == root.span_id == tool.parent_span_id and chat.trace_id == root.trace_id
    assert chat.agent == "support_bot"  # no agent on the span: the service names it
    assert (tool.kind, tool.summary, tool.failed) == ("tool_call", "Tool lookup_order, failed", True)
    assert (retrieve.kind, retrieve.summary) == ("retrieval", "Retrieval, 2 documents")
    assert (legacy.kind, legacy.input_tokens) == ("task", 5)
    # Contents are inputs and outputs to seal; nothing of them reaches a summary or the unmapped names.
    assert set(chat.inputs) == {"gen_ai.input.messages"} and set(chat.outputs) == {"gen_ai.output.messages"}
    assert set(tool.inputs) == {"gen_ai.tool.call.arguments"} and set(tool.outputs) == {"gen_ai.tool.call.result"}
    assert set(retrieve.inputs) == {"input.value"}
    assert retrieve.outputs == {"retrieval.documents": {"0.document.content": SECRET, "1.document.content": "policy"}}
    assert legacy.inputs == {"gen_ai.prompt": {"0.content": SECRET}}
    assert legacy.outputs == {"gen_ai.completion": {"0.content": "fine"}}
    assert chat.unmapped == ("http.response.status_code",)
    for step in steps.values():
        assert check_summary(step.summary).safe
        assert "Jane" not in step.summary + repr(step.unmapped) and "4417" not in step.summary


def test_a_span_no_convention_describes_is_a_generic_step_listing_its_attributes() -> None:
    span = Span(
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        name="db query",
        start_time_unix_nano=1,
        end_time_unix_nano=3_000_001,
    )
    span.attributes.add(key="db.statement").value.string_value = "select 1"
    step = span_step(span, {})
    assert (step.kind, step.summary, step.agent, step.latency_ms) == ("span", "Span db query", "otel", 3)
    assert step.unmapped == ("db.statement",) and step.inputs == step.outputs == {}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: setattr(s, "trace_id", b"\x01" * 15), "trace_id is 15 bytes"),
        (lambda s: setattr(s, "trace_id", b"\x00" * 16), "trace_id is all zeros"),
        (lambda s: setattr(s, "span_id", b""), "span_id is 0 bytes"),
        (lambda s: setattr(s, "parent_span_id", b"\x03" * 4), "parent_span_id is 4 bytes"),
        (lambda s: setattr(s, "parent_span_id", b"\x02" * 8), "its own parent"),
        (lambda s: setattr(s, "end_time_unix_nano", 1), "ends before it starts"),
    ],
)
def test_a_span_that_cannot_be_a_step_is_refused_with_the_reason(change: Any, reason: str) -> None:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="x", start_time_unix_nano=5, end_time_unix_nano=9)
    change(span)
    with pytest.raises(SpanRefused, match=reason):
        span_step(span, {})


def test_a_model_or_tool_name_the_guard_refuses_leaves_the_summary_to_the_kind() -> None:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat")
    for key, value in (("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", "Dr. Smith")):
        span.attributes.add(key=key).value.string_value = value
    assert span_step(span, {}).summary == "Tool call"


@pytest.mark.parametrize(
    ("body", "content_type", "encoding", "error"),
    [
        (b"{}", "text/plain", None, UnsupportedMediaType),
        (b"{}", None, None, UnsupportedMediaType),
        (b"{}", "application/json", "br", UnsupportedMediaType),
        (b"\xff\xff not protobuf", "application/x-protobuf", None, MalformedBody),
        (b"not json", "application/json", None, MalformedBody),
        (b"[]", "application/json", None, MalformedBody),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "application/json",
            None,
            MalformedBody,
        ),
        (b'{"resourceSpans": "many"}', "application/json", None, MalformedBody),
        (b"[" * 1000 + b"]" * 1000, "application/json", None, MalformedBody),
        (b'{"resourceSpans": ' + b"[" * 65 + b"]" * 65 + b"}", "application/json", None, MalformedBody),
        (b"\x1f\x8b not gzip", "application/json", "gzip", MalformedBody),
        (gzip.compress(b"{}", mtime=0)[:-6], "application/json", "gzip", MalformedBody),
        (b"0" * (decode.MAX_BODY_BYTES + 1), "application/json", None, PayloadTooLarge),
        (gzip.compress(b" " * (decode.MAX_DECODED_BYTES + 1), mtime=0), "application/json", "gzip", PayloadTooLarge),
    ],
    # Named ids: a body in the id would differ between xdist's workers if it were not the same bytes each time.
    ids=[
        "text/plain",
        "no media type",
        "brotli",
        "not protobuf",
        "not json",
        "a json array",
        "a non-hex id",
        "resourceSpans not a list",
        "1000 deep",
        "past the depth limit",
        "not gzip",
        "gzip cut short",
        "past the body limit",
        "a gzip bomb",
    ],
)
def test_a_body_that_cannot_be_read_is_refused_whole_with_its_status(
    body: bytes, content_type: str | None, encoding: str | None, error: type[Exception]
) -> None:
    with pytest.raises(error):
        decode.parse_traces(body, content_type, encoding)


def test_unknown_fields_are_ignored_and_the_answer_comes_in_the_requests_type() -> None:
    document = {"resourceSpans": [], "someFutureField": {"x": 1}}
    assert decode.parse_traces(json.dumps(document).encode(), "application/json", "identity") == encode_spans(())
    answer = ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=1, error_message="span 0203: its trace_id is all zeros"
        )
    )
    as_json = json.loads(decode.encoded(answer, decode.JSON))
    assert as_json == {"partialSuccess": {"rejectedSpans": "1", "errorMessage": "span 0203: its trace_id is all zeros"}}
    assert ExportTraceServiceResponse.FromString(decode.encoded(answer, decode.PROTOBUF)) == answer
