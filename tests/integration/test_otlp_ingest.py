"""Spans the OpenTelemetry SDK encodes, written as flows on moto: one trace one flow, a step per span with
its edges, contents sealed, a replay written once, a bad span refused alone, and the ledger still verifying."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from flowledger.identity import Principal
from flowledger.ledger.audit import checkpoints_of, verify_ledger
from flowledger.otlp.ingest import flow_id_of, ingest_traces, step_id_of
from flowledger.otlp.release_job import release_job
from flowledger.reasoning.service import FlowService
from flowledger.services import Services
from tests.unit.test_otlp_ingest_mapping import SECRET

AGENT = Principal(kind="user", id="agent-exporter", scopes=frozenset({"reasoning.write"}))
OTHER = Principal(kind="user", id="agent-other", scopes=frozenset({"reasoning.write"}))


def spans_of(request: ExportTraceServiceRequest) -> list[Any]:
    return [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]


def raw_items(services: Services, table: str) -> str:
    """Every item of a table as DynamoDB holds it, as one text to search."""
    items = services.aws.dynamodb.scan(TableName=services.aws.table_name(table))["Items"]
    return json.dumps(items)


def test_a_trace_is_one_flow_of_steps_with_its_edges_and_its_contents_sealed(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    done = ingest_traces(services, AGENT, request_of_a_trace)
    assert (done.recorded, done.already_recorded, done.refused) == (5, 0, [])
    spans = spans_of(request_of_a_trace)
    trace_id = spans[0].trace_id.hex()
    assert done.flow_ids == [flow_id_of(trace_id)]
    flow, steps = FlowService(services).flow_with_steps(flow_id_of(trace_id))
    assert (flow.trigger_type, flow.trace_id, flow.created_by, flow.step_count) == ("otlp", trace_id, AGENT.id, 5)
    by_id = {step["step_id"]: step for step in steps}
    for span in spans:
        step = by_id[step_id_of(trace_id, span.span_id.hex())]
        parent = [step_id_of(trace_id, span.parent_span_id.hex())] if span.parent_span_id else []
        assert step["parent_step_ids"] == parent
    kinds = sorted(step["step_kind"] for step in steps)
    assert kinds == ["agent_invocation", "model_call", "retrieval", "task", "tool_call"]
    chat = next(step for step in steps if step["step_kind"] == "model_call")
    assert chat["summary_text"] == "Model call to gpt-4o-mini, 812 \u2192 64 tokens"
    assert chat["inputs"]["otel"]["model"] == "gpt-4o-mini" and chat["inputs"]["otel"]["input_tokens"] == 812
    assert "__sealed__" in chat["inputs"]["gen_ai.input.messages"]
    # No content is stored or audited in the clear: not in any step, not in the ledger.
    for table in ("steps", "flows", "ledger", "ledger_leases"):
        text = raw_items(services, table)
        assert "Jane Roe" not in text and "4417" not in text and "atorvastatin" not in text, table
    assert SECRET not in raw_items(services, "steps")
    assert verify_ledger(services.ledger, checkpoints_of(services)).ok


def test_a_replayed_request_writes_nothing_new(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    ingest_traces(services, AGENT, request_of_a_trace)
    events = raw_items(services, "ledger").count("reasoning.step.created")
    again = ingest_traces(services, AGENT, request_of_a_trace)
    assert (again.recorded, again.already_recorded, again.refused) == (0, 5, [])
    assert raw_items(services, "ledger").count("reasoning.step.created") == events


def test_a_trace_over_two_requests_is_one_flow_and_a_child_finds_its_recorded_parent(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    spans = spans_of(request_of_a_trace)
    root = next(span for span in spans if not span.parent_span_id)
    first, second = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    first.CopyFrom(request_of_a_trace)
    second.CopyFrom(request_of_a_trace)
    keep_only(first, {root.span_id})
    keep_only(second, {span.span_id for span in spans} - {root.span_id})
    assert ingest_traces(services, AGENT, first).recorded == 1
    later = ingest_traces(services, AGENT, second)
    assert (later.recorded, later.refused, later.flow_ids) == (4, [], [flow_id_of(root.trace_id.hex())])
    _, steps = FlowService(services).flow_with_steps(flow_id_of(root.trace_id.hex()))
    root_step = step_id_of(root.trace_id.hex(), root.span_id.hex())
    assert sorted(len(step["parent_step_ids"]) for step in steps) == [0, 1, 1, 1, 1]
    assert all(step["parent_step_ids"] in ([], [root_step]) for step in steps)


def children_first(request: ExportTraceServiceRequest) -> tuple[Any, ExportTraceServiceRequest]:
    """The trace's root, and a request of every other span: children sent before their parent, as exporters do."""
    spans = spans_of(request)
    root = next(span for span in spans if not span.parent_span_id)
    keep_only(request, {span.span_id for span in spans} - {root.span_id})
    return root, request


def test_children_before_their_parent_wait_for_it_and_hang_from_it_when_it_comes(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    whole = ExportTraceServiceRequest()
    whole.CopyFrom(request_of_a_trace)
    root, children = children_first(request_of_a_trace)
    flow_id = flow_id_of(root.trace_id.hex())
    early = ingest_traces(services, AGENT, children)
    assert (early.recorded, early.flows[flow_id].waiting, early.refused) == (0, 4, [])  # taken, not refused
    assert SECRET not in raw_items(services, "otlp_waiting")  # a waiting span is sealed whole

    keep_only(whole, {root.span_id})
    late = ingest_traces(services, AGENT, whole)
    assert (late.recorded, late.flows[flow_id].released) == (1, 4)
    _, steps = FlowService(services).flow_with_steps(flow_id)
    root_step = step_id_of(root.trace_id.hex(), root.span_id.hex())
    assert sorted(map(len, (step["parent_step_ids"] for step in steps))) == [0, 1, 1, 1, 1]
    assert all(step["parent_step_ids"] in ([], [root_step]) for step in steps)
    assert all("orphan_of" not in step["inputs"]["otel"] for step in steps)
    assert raw_items(services, "otlp_waiting") == "[]"  # nothing left waiting


def test_a_child_whose_parent_never_came_is_written_after_its_wait_hanging_from_the_flow(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    root, children = children_first(request_of_a_trace)
    flow_id = flow_id_of(root.trace_id.hex())
    assert ingest_traces(services, AGENT, children).flows[flow_id].waiting == 4
    again = ingest_traces(services, AGENT, children)  # an exporter's retry: still waiting, nothing written
    assert (again.recorded, again.flows[flow_id].waiting) == (0, 4)
    assert release_job(services) == {"flows": 0, "released": 0, "refused": 0}  # not yet

    waited = services.settings.otlp_parent_wait_seconds
    later = services.clock() + timedelta(seconds=waited)
    services.clock = lambda: later
    assert release_job(services) == {"flows": 1, "released": 4, "refused": 0}
    _, steps = FlowService(services).flow_with_steps(flow_id)
    assert all(step["parent_step_ids"] == [] for step in steps)
    assert {step["inputs"]["otel"]["orphan_of"] for step in steps} == {root.span_id.hex()}
    # the same spans sent once more are the steps already written (orphans), never held again
    replay = ingest_traces(services, AGENT, children)
    assert (replay.recorded, replay.already_recorded, replay.flows[flow_id].waiting) == (0, 4, 0)


def test_with_no_wait_a_child_without_its_parent_is_written_at_once(
    services: Services, request_of_a_trace: ExportTraceServiceRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "settings", services.settings.model_copy(update={"otlp_parent_wait_seconds": 0}))
    root, children = children_first(request_of_a_trace)
    done = ingest_traces(services, AGENT, children)
    assert (done.recorded, done.refused) == (4, [])
    _, steps = FlowService(services).flow_with_steps(flow_id_of(root.trace_id.hex()))
    assert {step["inputs"]["otel"]["orphan_of"] for step in steps} == {root.span_id.hex()}


def test_a_bad_span_is_refused_alone_and_named(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    bad = spans_of(request_of_a_trace)[0]
    bad.trace_id = b"\x00" * 16
    done = ingest_traces(services, AGENT, request_of_a_trace)
    assert done.recorded == 4
    assert done.refused == [f"span {bad.span_id.hex()}: its trace_id is all zeros"]
    assert done.error_message == done.refused[0]


def test_another_writers_spans_of_the_same_trace_are_refused_each_with_why(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    ingest_traces(services, AGENT, request_of_a_trace)
    taken = ingest_traces(services, OTHER, request_of_a_trace)
    assert taken.recorded == 0 and len(taken.refused) == 5
    assert all("only the writer that opened a flow" in reason for reason in taken.refused)


def keep_only(request: ExportTraceServiceRequest, span_ids: set[bytes]) -> None:
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            kept = [span for span in ss.spans if span.span_id in span_ids]
            del ss.spans[:]
            ss.spans.extend(kept)


def test_a_span_past_a_steps_size_is_refused_alone(
    services: Services, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    big = next(span for span in spans_of(request_of_a_trace) if span.name == "retrieve")
    big.attributes.add(key="output.value").value.string_value = "x" * 70_000
    done = ingest_traces(services, AGENT, request_of_a_trace)
    assert done.recorded == 4
    assert len(done.refused) == 1 and done.refused[0].startswith(f"span {big.span_id.hex()}: its contents are")


def test_a_span_waiting_for_its_parent_and_a_link_waits_for_each_in_turn(services: Services) -> None:
    trace = bytes.fromhex("5b8efff798038103d269b633813fc60c")
    a, b, c = (bytes.fromhex(f"{n}{n}{n}19b7ec3c1b174") for n in ("a", "b", "c"))

    def one(span_id: bytes, parent: bytes = b"", link: bytes = b"") -> ExportTraceServiceRequest:
        span = Span(trace_id=trace, span_id=span_id, parent_span_id=parent, name="step", start_time_unix_nano=1)
        if link:
            span.links.add(trace_id=trace, span_id=link)
        return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])

    flow_id = flow_id_of(trace.hex())
    assert ingest_traces(services, AGENT, one(c, parent=a, link=b)).flows[flow_id].waiting == 1
    assert ingest_traces(services, AGENT, one(a)).flows[flow_id].released == 0  # c still waits, now for b
    assert ingest_traces(services, AGENT, one(b)).flows[flow_id].released == 1
    _, steps = FlowService(services).flow_with_steps(flow_id)
    by_span = {step["inputs"]["otel"]["span_id"]: step for step in steps}
    assert by_span[c.hex()]["parent_step_ids"] == [step_id_of(trace.hex(), a.hex()), step_id_of(trace.hex(), b.hex())]
    assert raw_items(services, "otlp_waiting") == "[]"  # nothing waits, and the flow's marker is gone


def test_more_children_than_a_request_writes_are_written_by_the_job_under_their_parent(
    services: Services, request_of_a_trace: ExportTraceServiceRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flowledger.otlp.ingest.MAX_RELEASED_PER_REQUEST", 3)
    whole = ExportTraceServiceRequest()
    whole.CopyFrom(request_of_a_trace)
    root, children = children_first(request_of_a_trace)
    flow_id = flow_id_of(root.trace_id.hex())
    assert ingest_traces(services, AGENT, children).flows[flow_id].waiting == 4
    keep_only(whole, {root.span_id})
    assert ingest_traces(services, AGENT, whole).flows[flow_id].released == 3  # the rest is left to the job
    assert release_job(services) == {"flows": 1, "released": 1, "refused": 0}  # at once, not after the wait
    _, steps = FlowService(services).flow_with_steps(flow_id)
    root_step = step_id_of(root.trace_id.hex(), root.span_id.hex())
    assert sorted(step["parent_step_ids"] for step in steps) == [[]] + [[root_step]] * 4
    assert raw_items(services, "otlp_waiting") == "[]"
    assert release_job(services) == {"flows": 0, "released": 0, "refused": 0}
