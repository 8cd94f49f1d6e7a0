"""`flows otel-export` and the OTLP receiver are inverses: a flow exported as spans and ingested again, its
requests in any order (so children arrive before their parents and wait for them), is a flow of the same
steps, with the same kinds, agents, latencies, tools and edges (a property over generated flows)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.otlp.ingest import flow_id_of, ingest_traces
from flowledger.reasoning import otel
from flowledger.reasoning.dataset import FlowRecord
from flowledger.reasoning.service import FlowService
from flowledger.services import Services

AGENT = Principal(kind="user", id="round-trip", scopes=frozenset({"reasoning.write"}))
KINDS = ("tool_call", "model_call", "retrieval", "routing", "draft", "evidence_guard")
REFS = {"llm_call_log_ref": False, "experiment_trace_ref": False, "decision_graph_node_ref": False}


@st.composite
def flows(draw: st.DrawFn) -> FlowRecord:
    """A closed flow of 1 to 12 steps, each with up to three earlier parents."""
    flow_id = new_id("fl_")
    steps: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(KINDS))
        earlier = [step["step_id"] for step in steps]
        parents = draw(st.lists(st.sampled_from(earlier), max_size=3, unique=True)) if earlier else []
        steps.append(
            {
                "step_id": f"st_{flow_id[3:-2]}{n:02d}",
                "step_kind": kind,
                "agent": draw(st.sampled_from(("intent_router", "diagnosis_agent", "diagnosis_release"))),
                "summary_text": f"Recorded the {kind.replace('_', ' ')} step",
                "summary_hidden": False,
                "latency_ms": draw(st.none() | st.integers(0, 5_000)),
                "parent_step_ids": parents,
                "back_refs": {**REFS, "memory_claim_ref": False},
                "tool": draw(st.none() | st.sampled_from(("query_sql", "lookupOrder")))
                if kind == "tool_call"
                else None,
            }
        )
    return FlowRecord.model_validate(
        {
            "flow": {
                "flow_id": flow_id,
                "trigger_type": "chat_turn",
                "trigger_ref": "chat/ses_round/turn-1",
                "flow_state": "completed",
                "created_at": "2026-01-02T10:00:00.000000Z",
                "closed_at": "2026-01-02T10:00:30.000000Z",
                "outcome": None,
                "patient_safe_summary": True,
                "step_count": len(steps),
                "agents": sorted({step["agent"] for step in steps}),
                "aggregate_confidence": None,
            },
            "steps": steps,
        }
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=flows(), batch=st.integers(1, 6), order=st.randoms(use_true_random=False))
def test_a_flow_exported_and_ingested_again_keeps_its_steps_kinds_and_edges(
    services: Services, record: FlowRecord, batch: int, order: Any
) -> None:
    requests = list(otel.export_requests([record], max_spans=batch))
    order.shuffle(requests)
    for request in requests:
        done = ingest_traces(services, AGENT, request)
        assert done.refused == []
    flow_id = flow_id_of(otel.trace_id_of(record.flow.flow_id).hex())
    _, stored = FlowService(services).flow_with_steps(flow_id)
    by_span = {step["inputs"]["otel"]["span_id"]: step for step in stored}
    span_of = {step.step_id: otel.span_id_of(record.flow.flow_id, step.step_id).hex() for step in record.steps}
    assert set(by_span) == set(span_of.values())  # every step, and the flow's own span as the flow, not a step
    for step in record.steps:
        again = by_span[span_of[step.step_id]]
        assert (again["step_kind"], again["agent"], again.get("latency_ms")) == (
            step.step_kind,
            step.agent,
            step.latency_ms,
        )
        assert again["parent_step_ids"] == [by_span[span_of[p]]["step_id"] for p in step.parent_step_ids]
        assert "orphan_of" not in again["inputs"]["otel"]
        if step.step_kind == "tool_call":
            assert again["inputs"]["otel"].get("tool", "tool_call") == (step.tool or "tool_call")
