"""The flow dataset record and the lint rules: what `flowledger flows lint` judges a file by."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from flowledger.ids import new_id
from flowledger.reasoning.dataset import HIDDEN_SUMMARY, MAX_LINE_BYTES, FlowRecord, RecordInvalid, read_records
from flowledger.reasoning.flow_lint import RULES, lint_flow, lint_records

FLOWS = Path(__file__).resolve().parents[1] / "fixtures" / "flows"
NO_REFS = {"llm_call_log_ref": False, "experiment_trace_ref": False, "decision_graph_node_ref": False,
           "memory_claim_ref": False}  # fmt: skip


def step(kind: str, agent: str = "researcher", **extra: Any) -> dict[str, Any]:
    return {
        "step_id": new_id("st_"),
        "step_kind": kind,
        "agent": agent,
        "summary_text": f"Recorded the {kind} step",
        "summary_hidden": False,
        "parent_step_ids": [],
        "back_refs": {**NO_REFS, **extra.pop("refs", {})},
        **extra,
    }


def raw(steps: list[dict[str, Any]], **flow: Any) -> dict[str, Any]:
    return {
        "flow": {
            "flow_id": new_id("fl_"),
            "trigger_type": "user_question",
            "trigger_ref": "question/q1",
            "flow_state": "completed",
            "created_at": "2026-01-01T00:00:00.000000Z",
            "closed_at": "2026-01-01T00:00:05.000000Z",
            "outcome": {"type": "recommendation_delivered", "summary": "Recommended an answer"},
            "patient_safe_summary": True,
            "step_count": len(steps),
            "agents": sorted({s["agent"] for s in steps}),
            **flow,
        },
        "steps": steps,
    }


def record(steps: list[dict[str, Any]], **flow: Any) -> FlowRecord:
    return FlowRecord.model_validate(raw(steps, **flow))


def rules(steps: list[dict[str, Any]], **flow: Any) -> list[str]:
    return [rule for rule, _ in lint_flow(record(steps, **flow))]


def fixture_records(name: str) -> list[tuple[int, FlowRecord]]:
    with open(FLOWS / name, "rb") as file:
        return list(read_records(file))


LLM = {"llm_call_log_ref": True}


def test_each_line_of_the_lint_fixture_breaks_its_one_rule_and_the_clean_sample_none() -> None:
    report = lint_records(fixture_records("lint-one-rule-each.jsonl"))
    assert [(f.line, f.rule, f.severity) for f in report.findings] == [
        (line, rule, severity) for line, (rule, severity) in enumerate(RULES.items(), start=1)
    ]
    assert (report.verdict, report.flows, report.critical, report.warnings) == ("FAIL", 7, 3, 4)
    clean = lint_records(fixture_records("sample-flows-clean.jsonl"))
    assert (clean.verdict, clean.flows, clean.findings) == ("PASS", 9, [])


def test_warnings_alone_pass_with_notes() -> None:
    good = raw([step("retrieval"), step("llm_prompt", refs=LLM), step("verdict")])
    certain = raw([step("retrieval", confidence=1.0), step("verdict", confidence=1.0)], aggregate_confidence=1.0)
    report = lint_records([(1, FlowRecord.model_validate(good)), (2, FlowRecord.model_validate(certain))])
    assert (report.verdict, report.critical, report.warnings) == ("PASS-WITH-NOTES", 0, 1)
    assert lint_records([(1, FlowRecord.model_validate(good))]).verdict == "PASS"
    one_critical = lint_records([(1, FlowRecord.model_validate(good)), (2, record([]))])
    assert (one_critical.verdict, one_critical.critical) == ("FAIL", 1)


def test_a_verdict_is_judged_against_the_first_retrieval_only_when_the_flow_retrieves() -> None:
    assert rules([step("retrieval"), step("verdict"), step("retrieval"), step("verdict")]) == []
    assert rules([step("graph_walk", "critic"), step("verdict", "critic")]) == []  # the critic never retrieves
    assert rules([step("aggregation"), step("verdict"), step("retrieval")]) == ["verdict_before_retrieval"]


def test_a_model_call_needs_a_log_ref_somewhere_and_a_summary_step_is_no_model_call() -> None:
    assert rules([step("routing"), step("model_call"), step("draft")]) == ["no_model_call_ref"]
    assert rules([step("model_call", refs=LLM), step("tool_call"), step("model_call")]) == []  # any step's ref joins
    assert rules([step("retrieval"), step("llm_prompt", refs={"memory_claim_ref": True})]) == ["no_model_call_ref"]
    # The evaluation runner's summary step with nothing retrieved made no model call.
    assert rules([step("retrieval"), step("evidence_assembly"), step("summary"), step("verdict")]) == []


def test_the_warning_bounds() -> None:
    assert rules([step("retrieval", confidence=0.99), step("verdict")], aggregate_confidence=0.99) == []
    hidden: dict[str, Any] = {"summary_hidden": True, "summary_text": HIDDEN_SUMMARY}
    assert rules([step("retrieval", **hidden), step("verdict")]) == []  # half is not more than half
    assert rules([step("retrieval", **hidden), step("verdict", **hidden), step("retrieval")]) == [
        "summary_hidden_majority"
    ]
    # One tool_call step per tool call a model reply asks for is the diagnosis agent's design.
    assert rules([step("model_call", refs=LLM), step("tool_call"), step("tool_call"), step("draft")]) == []
    found = lint_flow(record([step("retrieval"), step("verdict"), step("verdict"), step("verdict")]))
    assert found == [("duplicate_consecutive_kinds", "steps 2 and 3 are both verdict (2 repeats in all)")]
    assert rules([step("retrieval")], agents=[]) == ["empty_agent_set"]


def lines(*records: dict[str, Any] | str) -> io.BytesIO:
    return io.BytesIO("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records).encode() + b"\n")


def refusal(*records: dict[str, Any] | str) -> RecordInvalid:
    with pytest.raises(RecordInvalid) as refused:
        list(read_records(lines(*records)))
    return refused.value


def test_a_record_never_carries_a_patient_id_inputs_or_a_ref_itself() -> None:
    with_patient = raw([step("retrieval")], patient_id="pt_123")
    assert refusal(raw([step("retrieval")]), "", with_patient).message == (
        "line 3: flow.patient_id: Extra inputs are not permitted"  # blank lines count, as an editor counts
    )
    assert (
        refusal(raw([step("retrieval", inputs={"q": "x"})])).reason == "steps.0.inputs: Extra inputs are not permitted"
    )
    as_ref = raw([step("llm_prompt", refs={"llm_call_log_ref": "ra_1/model-1"})])
    assert refusal(as_ref).reason == "steps.0.back_refs.llm_call_log_ref: Input should be a valid boolean"


def test_a_visible_summary_passes_the_guard_and_a_hidden_one_is_the_placeholder() -> None:
    leaky = raw([step("retrieval", summary_text="Reviewed metformin 500mg for Dr. Smith")])
    assert refusal(leaky).reason.startswith("steps.0: summary_text does not pass the summary guard")
    not_hidden = raw([step("retrieval", summary_hidden=True)])
    assert refusal(not_hidden).reason.endswith("a hidden summary's summary_text must be the withheld placeholder")
    outcome = {"type": "no_action", "summary": "Called 555-123-4567"}
    assert (
        "outcome.summary does not pass the summary guard" in refusal(raw([step("retrieval")], outcome=outcome)).reason
    )


def test_steps_must_be_whole_and_in_creation_order() -> None:
    first, second = step("retrieval"), step("verdict")
    first["parent_step_ids"] = [second["step_id"]]
    assert "steps.0: parent st_" in refusal(raw([first, second])).reason
    assert refusal(raw([step("retrieval")], step_count=2)).reason == (
        "record: step_count is 2 but the record holds 1 steps"
    )
    again = step("verdict")
    assert "repeats" in refusal(raw([again, dict(again)])).reason
    aborted_reason = raw([step("retrieval")], abort_reason="agent_error")
    assert refusal(aborted_reason).reason.endswith("only an aborted flow has an abort_reason")


def test_bad_lines_are_named_by_number() -> None:
    good = raw([step("retrieval")])
    assert refusal(good, "{not json").message.startswith("line 2: not JSON (")
    assert refusal(good, "[1]").message == "line 2: a record is a JSON object"
    assert refusal(good, good).message == f"line 2: flow_id {good['flow']['flow_id']} repeats line 1"
    assert refusal("x" * (MAX_LINE_BYTES + 1)).message == f"line 1: longer than {MAX_LINE_BYTES} bytes"
    with pytest.raises(RecordInvalid, match="line 1: not UTF-8"):
        list(read_records(io.BytesIO(b"\xff\xfe\n")))
