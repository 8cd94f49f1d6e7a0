"""Flow records as OTLP spans (flowledger.reasoning.otel): names, kinds, structure, ids, timing, batching."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from flowledger.reasoning import otel
from flowledger.reasoning.dataset import FlowRecord, read_records
from flowledger.reasoning.export import tool_of

FIXTURES = Path(__file__).parents[1] / "fixtures"
DAG = FIXTURES / "otel" / "flows-dag.jsonl"
CLEAN = FIXTURES / "flows" / "sample-flows-clean.jsonl"


def records(path: Path) -> list[FlowRecord]:
    with path.open("rb") as file:
        return [record for _, record in read_records(file)]


def attrs(span: Span) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        raw = getattr(item.value, kind)
        values[item.key] = [v.string_value for v in raw.values] if kind == "array_value" else raw
    return values


@pytest.fixture
def dag() -> FlowRecord:
    return records(DAG)[0]


@pytest.fixture
def aborted() -> FlowRecord:
    return records(DAG)[1]


def by_step(spans: list[Span]) -> dict[str, Span]:
    return {attrs(span)["flowledger.step.id"]: span for span in spans[1:]}


def test_the_flow_span_is_invoke_agent_named_after_its_first_agent(dag: FlowRecord) -> None:
    root = otel.flow_spans(dag)[0]
    assert root.name == "invoke_agent intent_router"
    assert root.kind == Span.SPAN_KIND_INTERNAL
    assert root.parent_span_id == b""
    assert (
        attrs(root).items()
        >= {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "intent_router",
            "openinference.span.kind": "AGENT",
            "gen_ai.conversation.id": "ses_demo",  # the flow's trace id
            "session.id": "ses_demo",
            "flowledger.flow.id": dag.flow.flow_id,
            "flowledger.flow.outcome.type": "recommendation_delivered",
            "output.value": "Released a diagnosis citing 2 observations",
        }.items()
    )
    assert root.status.code == Status.STATUS_CODE_UNSET  # success is left unset, as Recording Errors says


def test_the_conversation_falls_back_to_the_trigger_ref(aborted: FlowRecord) -> None:
    spans = otel.flow_spans(aborted)
    assert {attrs(span)["gen_ai.conversation.id"] for span in spans} == {"question/slow-one"}


def test_an_aborted_flow_is_an_error_with_its_reason(aborted: FlowRecord) -> None:
    root = otel.flow_spans(aborted)[0]
    assert root.status.code == Status.STATUS_CODE_ERROR
    assert root.status.message == "timeout"
    assert attrs(root)["error.type"] == "timeout"


@pytest.mark.parametrize(
    ("kind", "name", "operation", "openinference", "span_kind"),
    [
        ("routing", "routing", None, "CHAIN", Span.SPAN_KIND_INTERNAL),
        ("model_call", "chat", "chat", "LLM", Span.SPAN_KIND_CLIENT),
        ("tool_call", "execute_tool tool_call", "execute_tool", "TOOL", Span.SPAN_KIND_INTERNAL),
        ("draft", "draft", None, "CHAIN", Span.SPAN_KIND_INTERNAL),
        ("evidence_guard", "evidence_guard", None, "GUARDRAIL", Span.SPAN_KIND_INTERNAL),
    ],
)
def test_each_step_kind_becomes_its_operation(
    dag: FlowRecord, kind: str, name: str, operation: str | None, openinference: str, span_kind: int
) -> None:
    span = next(s for s in otel.flow_spans(dag)[1:] if attrs(s)["flowledger.step.kind"] == kind)
    values = attrs(span)
    assert (span.name, values.get("gen_ai.operation.name"), values["openinference.span.kind"], span.kind) == (
        name,
        operation,
        openinference,
        span_kind,
    )
    assert values["gen_ai.agent.name"] == next(s.agent for s in dag.steps if s.step_kind == kind)
    assert ("gen_ai.tool.name" in values) == (operation == "execute_tool")


def test_the_researchers_kinds_are_retrieval_and_chat() -> None:
    names = [span.name for span in otel.flow_spans(records(CLEAN)[0])]
    assert names == ["invoke_agent researcher", "retrieval", "chat", "verdict"]


def test_an_unknown_kind_falls_back_to_a_chain_step() -> None:
    assert otel.operation_of("aggregation") == otel.FALLBACK
    assert otel.operation_of("some_new_kind").openinference_kind == "CHAIN"


def test_a_step_with_several_parents_hangs_under_the_first_and_links_the_others(dag: FlowRecord) -> None:
    spans = otel.flow_spans(dag)
    steps = by_step(spans)
    draft = next(s for s in dag.steps if s.step_kind == "draft")
    first, *others = draft.parent_step_ids
    span = steps[draft.step_id]
    assert span.parent_span_id == steps[first].span_id
    assert [link.span_id for link in span.links] == [steps[other].span_id for other in others]
    assert all(link.trace_id == span.trace_id for link in span.links)
    assert attrs(span)["flowledger.step.parent_step_ids"] == draft.parent_step_ids


def test_a_step_without_parents_hangs_under_the_flow_span(dag: FlowRecord) -> None:
    spans = otel.flow_spans(dag)
    routing = by_step(spans)[dag.steps[0].step_id]
    assert routing.parent_span_id == spans[0].span_id
    assert attrs(routing)["flowledger.step.parent_step_ids"] == []
    assert list(routing.links) == []


def test_ids_derive_from_the_flow_and_step_ids() -> None:
    flows = records(DAG) + records(CLEAN)
    first = [otel.flow_spans(record) for record in flows]
    again = [otel.flow_spans(record) for record in flows]
    assert [[s.SerializeToString() for s in spans] for spans in first] == [
        [s.SerializeToString() for s in spans] for spans in again
    ]
    span_ids = [span.span_id for spans in first for span in spans]
    assert len(set(span_ids)) == len(span_ids)
    assert all(len(span_id) == 8 for span_id in span_ids)
    trace_ids = [spans[0].trace_id for spans in first]
    assert len(set(trace_ids)) == len(flows) and all(len(t) == 16 for t in trace_ids)
    assert all({span.trace_id for span in spans} == {spans[0].trace_id} for spans in first)


def test_an_all_zero_digest_is_never_an_id(monkeypatch: pytest.MonkeyPatch) -> None:
    class Zero:
        def digest(self) -> bytes:
            return bytes(32)

    monkeypatch.setattr(otel.hashlib, "sha256", lambda data: Zero())
    assert any(otel.trace_id_of("fl_X")) and any(otel.span_id_of("fl_X", "st_Y"))


def test_steps_nest_inside_the_flow_and_start_after_their_parents_end() -> None:
    for record in records(DAG) + records(CLEAN):
        spans = otel.flow_spans(record)
        root, steps = spans[0], by_step(spans)
        for step in record.steps:
            span = steps[step.step_id]
            assert root.start_time_unix_nano <= span.start_time_unix_nano <= span.end_time_unix_nano
            assert span.end_time_unix_nano <= root.end_time_unix_nano
            for parent in step.parent_step_ids:
                assert steps[parent].end_time_unix_nano <= span.start_time_unix_nano


def test_measured_steps_keep_their_latency_and_the_others_share_the_rest(dag: FlowRecord) -> None:
    durations = {
        attrs(span)["flowledger.step.kind"] + str(i): span.end_time_unix_nano - span.start_time_unix_nano
        for i, span in enumerate(otel.flow_spans(dag)[1:])
    }
    ms = 1_000_000
    # 3 s flow; measured 150 + 900 + 120 + 80 + 5 ms; draft and release share the other 1745 ms.
    assert durations == {
        "routing0": 150 * ms,
        "model_call1": 900 * ms,
        "tool_call2": 120 * ms,
        "tool_call3": 80 * ms,
        "draft4": 872_500_000,
        "evidence_guard5": 5 * ms,
        "release6": 872_500_000,
    }


def test_latencies_longer_than_the_flow_are_scaled_to_fit(aborted: FlowRecord) -> None:
    spans = otel.flow_spans(aborted)
    # 6 s flow, two measured steps of 4 s each: 3 s each, end to end.
    assert [(s.start_time_unix_nano - spans[0].start_time_unix_nano) // 10**9 for s in spans[1:]] == [0, 3]
    assert [(s.end_time_unix_nano - s.start_time_unix_nano) // 10**9 for s in spans[1:]] == [3, 3]


@given(
    start=st.integers(0, 10**18),
    length=st.integers(0, 10**13),
    latencies=st.lists(st.none() | st.integers(0, 86_400_000), max_size=40),
)
def test_step_windows_are_contiguous_and_inside_the_flow(start: int, length: int, latencies: list[int | None]) -> None:
    windows = otel.step_windows(start, start + length, latencies)
    assert len(windows) == len(latencies)
    cursor = start
    for (begin, end), latency in zip(windows, latencies, strict=True):
        assert begin == cursor <= end <= start + length
        if latency is not None:
            assert end - begin <= latency * 1_000_000
        cursor = end
    measured = sum(latency for latency in latencies if latency is not None) * 1_000_000
    if measured <= length:  # room for every latency: each measured step keeps its own
        assert all(e - b == lat * 1_000_000 for (b, e), lat in zip(windows, latencies, strict=True) if lat is not None)


def test_requests_hold_at_most_the_spans_asked_for_in_order() -> None:
    flows = records(CLEAN) + records(DAG)
    expected = [span.span_id for record in flows for span in otel.flow_spans(record)]
    requests = list(otel.export_requests(flows, max_spans=3))
    counts = [otel.request_span_count(request) for request in requests]
    assert max(counts) == 3 and len(requests) == -(-len(expected) // 3)
    sent = [s.span_id for r in requests for s in r.resource_spans[0].scope_spans[0].spans]
    assert sent == expected


def test_requests_stay_under_the_byte_bound() -> None:
    flows = records(CLEAN) + records(DAG)
    requests = list(otel.export_requests(flows, max_bytes=4000))
    assert len(requests) > 5
    assert all(request.ByteSize() <= 4000 for request in requests)
    assert sum(map(otel.request_span_count, requests)) == sum(len(r.steps) + 1 for r in flows)


def test_every_request_names_the_service_the_project_and_one_scope() -> None:
    (request,) = otel.export_requests(records(DAG), project="triage")
    (resource,) = request.resource_spans
    values = {kv.key: kv.value.string_value for kv in resource.resource.attributes}
    assert values == {
        "service.name": "flowledger",
        "service.version": otel.__version__,
        "openinference.project.name": "triage",
    }
    (scope,) = resource.scope_spans
    assert scope.scope.name == "flowledger.reasoning.otel"
    assert scope.schema_url == "https://opentelemetry.io/schemas/1.41.0"


def test_a_tool_step_is_named_after_its_tool_as_the_conventions_say(dag: FlowRecord) -> None:
    named = dag.model_copy(
        update={
            "steps": [
                step.model_copy(update={"tool": "query_sql"}) if step.step_kind == "tool_call" else step
                for step in dag.steps
            ]
        }
    )
    tools = [span for span in otel.flow_spans(named) if attrs(span).get("gen_ai.operation.name") == "execute_tool"]
    assert tools and {span.name for span in tools} == {"execute_tool query_sql"}
    assert {attrs(span)["gen_ai.tool.name"] for span in tools} == {"query_sql"}


@pytest.mark.parametrize(
    ("inputs", "tool"),
    [
        ({"tool": "query_sql"}, "query_sql"),
        ({"otel": {"span_id": "a1", "tool": "lookupOrder"}}, "lookupOrder"),
        ({"tool": {"__sealed__": "v2", "ciphertext": "x"}}, None),  # a sealed value is never read
        ({"tool": "DROP TABLE orders; --"}, None),  # free text is not a tool's name
        ({}, None),
    ],
    ids=["named", "ingested", "sealed", "free-text", "none"],
)
def test_the_export_reads_a_tools_name_only_in_the_clear(inputs: dict[str, Any], tool: str | None) -> None:
    assert tool_of({"inputs": inputs}) == tool
