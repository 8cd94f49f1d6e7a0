"""Closed flows as OpenTelemetry spans: the GenAI semantic conventions (v1.41) with OpenInference beside them.

Pure conversion, ``FlowRecord -> spans -> ExportTraceServiceRequest``: no I/O, no environment; the CLI
(``flowledger flows otel-export``) reads the records and sends or writes the requests.

One trace per flow. The flow is an ``invoke_agent {agent}`` span (INTERNAL, the flow's first agent);
each step a child span whose operation follows its kind (:data:`STEP_OPERATIONS`): ``chat`` for a
model call, ``retrieval`` for a look-up, ``execute_tool {kind}`` for a tool call, and for the steps
that are no GenAI operation (routing, verdict, guards, drafts) a span named after the kind, without
``gen_ai.operation.name`` and with the OpenInference kind ``CHAIN`` (``GUARDRAIL`` for a guard).

Structure: a step without parents hangs under the flow span; a step with parents hangs under its
first parent and links to the others (OTLP links; Phoenix and Langfuse do not draw links yet, so every
step also carries ``flowledger.step.parent_step_ids``, its whole parent list).

Ids derive from the flow and step ids (:func:`trace_id_of`, :func:`span_id_of`), so exporting the
same flow twice sends the same trace: backends that key spans by id keep one copy.

Timing: the record has the flow's ``created_at``/``closed_at`` and an optional ``latency_ms`` per
step, not step start times. :func:`step_windows` lays the steps end to end from ``created_at`` in
creation order (a parent is always an earlier step, so it ends before its child starts); a measured
step lasts its latency, the unmeasured ones share equally what the measured leave of the flow; when
the latencies add up to more than the flow lasted, they are scaled down to fit and the unmeasured
steps get no length. Every step span therefore lies inside its flow span.

Not exported, because the record does not carry them: token usage (``gen_ai.usage.*``), the model
(``gen_ai.request.model``) and the provider (``gen_ai.provider.name``), the trigger summary and any
step input or output. What is exported is PHI-safe as the record is: summaries that passed the guard
or the withheld placeholder, back-refs as names only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from flowledger import __version__
from flowledger.reasoning.dataset import FlowRecord, RecordStep

SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"
SCOPE_NAME = "flowledger.reasoning.otel"
DEFAULT_PROJECT = "flowledger"
DEFAULT_MAX_SPANS = 512  # the OpenTelemetry SDK's batch size
DEFAULT_MAX_BYTES = 1_000_000
# W3C "sampled", and "has is_remote, not remote" (OTLP span flags bits 8 and 9): every parent is local.
SPAN_FLAGS = 0x01 | 0x100
# The length prefixes of the span, scope and resource fields grow by at most this much per request.
_ENVELOPE_SLACK = 16
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

AttributeValue = str | bool | int | float | list[str]


@dataclass(frozen=True)
class StepOperation:
    """How one step kind appears: its GenAI operation (None when it is none), OpenInference kind, span kind."""

    operation: str | None
    openinference_kind: str
    span_kind: Span.SpanKind.ValueType


_CHAT = StepOperation("chat", "LLM", Span.SPAN_KIND_CLIENT)
_RETRIEVAL = StepOperation("retrieval", "RETRIEVER", Span.SPAN_KIND_CLIENT)
_TOOL = StepOperation("execute_tool", "TOOL", Span.SPAN_KIND_INTERNAL)
_GUARD = StepOperation(None, "GUARDRAIL", Span.SPAN_KIND_INTERNAL)
FALLBACK = StepOperation(None, "CHAIN", Span.SPAN_KIND_INTERNAL)

# The kinds the agents record (reasoning/expected_signatures.json, research/agents/, chat/, diagnosis/).
STEP_OPERATIONS: dict[str, StepOperation] = {
    "llm_prompt": _CHAT,
    "model_call": _CHAT,
    "system_chat": _CHAT,  # answered by the model without tools
    "knowledge_answer": _CHAT,  # the model's answer over retrieved passages
    "retrieval": _RETRIEVAL,
    "source_grounding": _RETRIEVAL,  # the continuity stage looks up the turn's sources
    "graph_walk": _RETRIEVAL,  # the critic reads the claim's citations back
    "tool_call": _TOOL,
    "evidence_guard": _GUARD,
    "semantic_guard": _GUARD,
    "provenance_check": _GUARD,
}


def operation_of(step_kind: str) -> StepOperation:
    """The operation a step kind maps to; a kind not in :data:`STEP_OPERATIONS` is a ``CHAIN`` step."""
    return STEP_OPERATIONS.get(step_kind, FALLBACK)


def _digest(*parts: str, size: int) -> bytes:
    raw = hashlib.sha256("\x00".join(parts).encode()).digest()[:size]
    # An all-zero id is invalid in OTLP; sha256 gives one with probability 2**-64 at worst, but never send it.
    return raw if any(raw) else raw[:-1] + b"\x01"


def trace_id_of(flow_id: str) -> bytes:
    """The flow's 16-byte trace id: the same flow always gets the same id."""
    return _digest("flowledger.trace", flow_id, size=16)


def span_id_of(flow_id: str, step_id: str | None = None) -> bytes:
    """The 8-byte span id of the flow's own span (``step_id`` None) or of one of its steps."""
    return _digest("flowledger.span", flow_id, *([step_id] if step_id else []), size=8)


def unix_nanos(timestamp: str) -> int:
    """A record timestamp (``2026-01-01T00:01:00.000000Z``) in integer nanoseconds since the epoch."""
    moment = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return micros * 1000


def step_windows(start_ns: int, end_ns: int, latencies_ms: Sequence[int | None]) -> list[tuple[int, int]]:
    """Each step's (start, end) in nanoseconds: end to end from ``start_ns``, all within ``end_ns``.

    A measured step lasts its latency; the unmeasured share what is left of the flow equally; measured
    latencies that add up to more than the flow are scaled down to fit. Integer arithmetic only, so the
    same record always gives the same times.
    """
    window = max(end_ns - start_ns, 0)
    measured = sum(latency * 1_000_000 for latency in latencies_ms if latency is not None)
    unmeasured = sum(1 for latency in latencies_ms if latency is None)
    if measured > window:
        durations = [window * latency * 1_000_000 // measured if latency is not None else 0 for latency in latencies_ms]
    else:
        share = (window - measured) // unmeasured if unmeasured else 0
        durations = [latency * 1_000_000 if latency is not None else share for latency in latencies_ms]
    windows, cursor = [], start_ns
    for duration in durations:
        windows.append((cursor, cursor + duration))
        cursor += duration
    return windows


def _value(value: AttributeValue) -> AnyValue:
    if isinstance(value, bool):  # before int: a bool is an int
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=item) for item in value]))
    return AnyValue(string_value=value)


def _attributes(values: Mapping[str, AttributeValue | None]) -> list[KeyValue]:
    """Key-values in order; a None value (the record does not know it) is left out."""
    return [KeyValue(key=key, value=_value(value)) for key, value in values.items() if value is not None]


def conversation_id(record: FlowRecord) -> str:
    """``gen_ai.conversation.id``: the flow's trace id when it has one (a chat session's), else its trigger ref."""
    return record.flow.trace_id or record.flow.trigger_ref


def flow_agent(record: FlowRecord) -> str | None:
    """The agent the flow span is named after: the first agent of the flow, if any step named one."""
    return record.flow.agents[0] if record.flow.agents else None


def flow_spans(record: FlowRecord) -> list[Span]:
    """The flow's span first, then one span per step in creation order."""
    flow = record.flow
    trace_id, root_id = trace_id_of(flow.flow_id), span_id_of(flow.flow_id)
    start, end = unix_nanos(flow.created_at), unix_nanos(flow.closed_at)
    conversation, agent = conversation_id(record), flow_agent(record)
    common = {"gen_ai.conversation.id": conversation, "session.id": conversation, "flowledger.flow.id": flow.flow_id}
    aborted = flow.flow_state == "aborted"
    outcome = flow.outcome
    root = Span(
        trace_id=trace_id,
        span_id=root_id,
        flags=SPAN_FLAGS,
        name=f"invoke_agent {agent}" if agent else "invoke_agent",
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=_attributes(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "openinference.span.kind": "AGENT",
                **common,
                "flowledger.flow.trigger_type": flow.trigger_type,
                "flowledger.flow.trigger_ref": flow.trigger_ref,
                "flowledger.flow.state": flow.flow_state,
                "flowledger.flow.agents": list(flow.agents),
                "flowledger.flow.step_count": flow.step_count,
                "flowledger.flow.patient_safe_summary": flow.patient_safe_summary,
                "flowledger.flow.aggregate_confidence": flow.aggregate_confidence,
                "flowledger.flow.outcome.type": outcome.type if outcome else None,
                "flowledger.flow.outcome.confidence": outcome.confidence if outcome else None,
                "output.value": outcome.summary if outcome else None,
                "error.type": (flow.abort_reason or "_OTHER") if aborted else None,
                "flowledger.flow.abort_reason": flow.abort_reason,
            }
        ),
        status=Status(code=Status.STATUS_CODE_ERROR, message=flow.abort_reason or "aborted") if aborted else None,
    )
    windows = step_windows(start, end, [step.latency_ms for step in record.steps])
    steps = [
        _step_span(flow.flow_id, trace_id, root_id, step, window, common)
        for step, window in zip(record.steps, windows, strict=True)
    ]
    return [root, *steps]


def _step_span(
    flow_id: str,
    trace_id: bytes,
    root_id: bytes,
    step: RecordStep,
    window: tuple[int, int],
    common: Mapping[str, AttributeValue | None],
) -> Span:
    mapped = operation_of(step.step_kind)
    if mapped.operation is None:
        name = step.step_kind
    elif mapped.operation == "execute_tool":
        # "execute_tool {gen_ai.tool.name}", as the conventions name it; the kind stands for a tool not named
        name = f"execute_tool {step.tool or step.step_kind}"
    else:
        # chat and retrieval are named "{operation} {model | data source}"; the record knows neither.
        name = mapped.operation
    parents = step.parent_step_ids
    refs = step.back_refs
    return Span(
        trace_id=trace_id,
        span_id=span_id_of(flow_id, step.step_id),
        parent_span_id=span_id_of(flow_id, parents[0]) if parents else root_id,
        flags=SPAN_FLAGS,
        name=name,
        kind=mapped.span_kind,
        start_time_unix_nano=window[0],
        end_time_unix_nano=window[1],
        attributes=_attributes(
            {
                "gen_ai.operation.name": mapped.operation,
                "gen_ai.agent.name": step.agent,
                "gen_ai.tool.name": (step.tool or step.step_kind) if mapped.operation == "execute_tool" else None,
                "openinference.span.kind": mapped.openinference_kind,
                **common,
                "flowledger.step.id": step.step_id,
                "flowledger.step.kind": step.step_kind,
                "flowledger.step.parent_step_ids": list(parents),
                "flowledger.step.confidence": step.confidence,
                "flowledger.step.latency_ms": step.latency_ms,
                "flowledger.step.timing": "measured" if step.latency_ms is not None else "estimated",
                "flowledger.step.summary_hidden": step.summary_hidden,
                "flowledger.step.back_refs": [name for name, present in refs.model_dump().items() if present],
                "output.value": step.summary_text,
            }
        ),
        links=[
            Span.Link(
                trace_id=trace_id,
                span_id=span_id_of(flow_id, parent),
                flags=SPAN_FLAGS,
                attributes=_attributes({"flowledger.link.type": "parent_step", "flowledger.step.id": parent}),
            )
            for parent in parents[1:]
        ],
    )


def resource_attributes(project: str = DEFAULT_PROJECT) -> list[KeyValue]:
    """The exporting service; ``openinference.project.name`` picks the Phoenix project the spans land in."""
    return _attributes(
        {
            "service.name": "flowledger",
            "service.version": __version__,
            "openinference.project.name": project,
        }
    )


def _request(resource: list[KeyValue], spans: list[Span]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=resource),
                schema_url=SCHEMA_URL,
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(name=SCOPE_NAME, version=__version__),
                        schema_url=SCHEMA_URL,
                        spans=spans,
                    )
                ],
            )
        ]
    )


def _field_size(payload: int) -> int:
    """Bytes a length-delimited field of ``payload`` bytes takes: tag, varint length, payload."""
    return 1 + max(1, (payload.bit_length() + 6) // 7) + payload


def export_requests(
    records: Iterable[FlowRecord],
    *,
    project: str = DEFAULT_PROJECT,
    max_spans: int = DEFAULT_MAX_SPANS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[ExportTraceServiceRequest]:
    """The spans of ``records`` in requests of at most ``max_spans`` spans and ``max_bytes`` serialized bytes.

    A flow may straddle two requests (backends assemble a trace by its id). A single span larger than
    ``max_bytes`` goes alone in its request: spans are not cut. Streams: one request's spans in memory.
    """
    if max_spans < 1 or max_bytes < 1:
        raise ValueError("a batch holds at least one span and one byte")
    resource = resource_attributes(project)
    envelope = _request(resource, []).ByteSize() + _ENVELOPE_SLACK
    batch: list[Span] = []
    size = envelope
    for record in records:
        for span in flow_spans(record):
            span_size = _field_size(span.ByteSize())
            if batch and (len(batch) == max_spans or size + span_size > max_bytes):
                yield _request(resource, batch)
                batch, size = [], envelope
            batch.append(span)
            size += span_size
    if batch:
        yield _request(resource, batch)


def request_span_count(request: ExportTraceServiceRequest) -> int:
    """How many spans one request carries."""
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
