"""The golden signature corpus and the drift comparator: what `flowledger flows signature-check` holds flows to."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from flowledger.chat.usecase import EXECUTOR_STEPS
from flowledger.ids import new_id
from flowledger.reasoning.dataset import FlowRecord, read_records
from flowledger.reasoning.models import Outcome
from flowledger.reasoning.signatures import (
    CorpusInvalid,
    OutcomeType,
    Signature,
    check_flow,
    check_records,
    packaged_corpus,
    parse_corpus,
)
from flowledger.research.evaluation import STEP_KINDS as EVALUATION_STEPS

CLEAN = Path(__file__).resolve().parents[1] / "fixtures" / "flows" / "sample-flows-clean.jsonl"
CORPUS = packaged_corpus()
NO_REFS = dict.fromkeys(
    ("llm_call_log_ref", "experiment_trace_ref", "decision_graph_node_ref", "memory_claim_ref"), False
)


def record(
    kinds: list[str], outcome: str = "recommendation_delivered", trigger_type: str = "user_question", **flow: Any
) -> FlowRecord:
    steps = [
        {
            "step_id": new_id("st_"),
            "step_kind": kind,
            "agent": "researcher",
            "summary_text": f"Recorded the {kind} step",
            "summary_hidden": False,
            "parent_step_ids": [],
            "back_refs": NO_REFS,
        }
        for kind in kinds
    ]
    return FlowRecord.model_validate(
        {
            "flow": {
                "flow_id": new_id("fl_"),
                "trigger_type": trigger_type,
                "trigger_ref": "question/q1",
                "flow_state": "completed",
                "created_at": "2026-01-01T00:00:00.000000Z",
                "closed_at": "2026-01-01T00:00:05.000000Z",
                "outcome": {"type": outcome, "summary": "Recorded an outcome"},
                "patient_safe_summary": True,
                "step_count": len(steps),
                "agents": ["researcher"] if steps else [],
                **flow,
            },
            "steps": steps,
        }
    )


def finding(kinds: list[str], outcome: str = "recommendation_delivered", **flow: Any) -> tuple[str, str | None]:
    kind, _, name = check_flow(CORPUS, record(kinds, outcome, **flow))
    return kind, name


def test_the_clean_sample_matches_with_exactly_one_flow_skipped() -> None:
    with open(CLEAN, "rb") as file:
        report = check_records(CORPUS, read_records(file))
    assert (report.passed, report.flows, report.matched, report.skipped, report.compared) == (True, 9, 8, 1, 8)
    assert [(f.line, f.finding, f.signature) for f in report.findings] == [
        (1, "matched", "researcher_synthesis"),
        (2, "matched", "researcher_no_evidence"),
        (3, "matched", "evaluation_case"),
        (4, "matched", "critic_judged"),
        (5, "matched", "critic_evidence_missing"),
        (6, "matched", "correlator_recommended"),
        (7, "matched", "chat_diagnosis_judged"),
        (8, "matched", "researcher_synthesis"),  # aborted after its retrieval
        (9, "skipped", None),
    ]
    assert report.findings[8].detail == "trigger type lab_trend is not in the corpus"


def test_the_three_findings() -> None:
    assert finding(["retrieval", "verdict", "llm_prompt"]) == ("sequence_drift", None)
    assert finding(["retrieval", "verdict"], "recommendation_delivered") == ("outcome_drift", None)
    kind, detail, _ = check_flow(CORPUS, record(["retrieval", "verdict"], "claim_created"))
    assert (
        kind == "outcome_drift" and detail == "retrieval -> verdict ends claim_created, expected insufficient_evidence"
    )
    assert finding(["retrieval"], trigger_type="lab_trend") == ("skipped", None)
    assert finding(["graph_walk", "verdict"], "no_action", trigger_type="claim_review") == (
        "matched",
        "critic_evidence_missing",
    )


def test_a_benchmark_ref_is_held_to_the_evaluation_signature_only() -> None:
    researcher_shape = ["retrieval", "llm_prompt", "verdict"]
    assert finding(researcher_shape, trigger_ref="benchmark/ev_1/c1") == ("sequence_drift", None)
    assert finding(list(EVALUATION_STEPS), trigger_ref="question/q1") == ("sequence_drift", None)
    assert finding(list(EVALUATION_STEPS), "insufficient_evidence", trigger_ref="benchmark/ev_1/c1") == (
        "matched",
        "evaluation_case",
    )


def test_only_a_cut_short_outcome_may_stop_early() -> None:
    aborted = {"flow_state": "aborted", "abort_reason": "agent_error"}
    assert finding(["retrieval"], "error", **aborted) == ("matched", "researcher_synthesis")
    assert finding([], "timeout", **aborted) == ("matched", "researcher_synthesis")
    assert finding(["retrieval"], "recommendation_delivered") == ("sequence_drift", None)
    assert finding(["llm_prompt"], "error", **aborted) == ("sequence_drift", None)  # not a prefix of any


def test_the_threshold_is_a_share_of_the_compared_flows() -> None:
    flows = [record(["retrieval", "llm_prompt", "verdict"]) for _ in range(19)]
    flows += [record(["verdict"]), record(["x"], trigger_type="lab_trend")]  # one drift, one skipped
    numbered = list(enumerate(flows, start=1))
    assert check_records(CORPUS, numbered).drift_share == 0.05
    assert check_records(CORPUS, numbered, 0.05).passed
    assert not check_records(CORPUS, numbered, 0.049).passed
    assert not check_records(CORPUS, numbered).passed  # the default: any drift fails
    only_skipped = check_records(CORPUS, [(1, record(["x"], trigger_type="lab_trend"))])
    assert (only_skipped.passed, only_skipped.compared, only_skipped.drift_share) == (True, 0, 0.0)


def sequence(tokens: list[str]) -> Signature:
    return Signature(name="s", agent="a", steps=tokens, outcomes=["no_action"])


def test_the_pattern_grammar() -> None:
    assert sequence(["a", "b?", "c"]).accepts(["a", "c"]) and sequence(["a", "b?", "c"]).accepts(["a", "b", "c"])
    assert not sequence(["a", "b?", "c"]).accepts(["a", "b", "b", "c"])
    plus = sequence(["a", "b+", "c"])
    assert plus.accepts(["a", "b", "c"]) and plus.accepts(["a", "b", "b", "b", "c"]) and not plus.accepts(["a", "c"])
    loop = sequence(["(m|t)*", "d"])
    assert loop.accepts(["m", "t", "t", "m", "d"]) and loop.accepts(["d"]) and not loop.accepts(["m", "x", "d"])
    assert loop.accepts_prefix(["m", "t"]) and not loop.accepts(["m", "t"])
    with pytest.raises(ValueError, match="is not a step kind"):
        sequence(["(m|"])


def test_the_corpus_knows_every_agent_shape() -> None:
    """Corpus self-test: the sequences each agent documents and records are whole signatures of the corpus."""
    researcher = ["retrieval", "llm_prompt", "verdict"]
    expected = {
        ("user_question", "question/q1"): [researcher, ["retrieval", "verdict"]],
        ("user_question", "benchmark/ev_1/c1"): [list(EVALUATION_STEPS)],
        ("claim_review", "claim/clm_1"): [["graph_walk", "llm_prompt", "verdict"], ["graph_walk", "verdict"]],
        ("family_correlation", "family/user_question"): [
            ["aggregation", "llm_prompt", "verdict"],
            ["aggregation", "verdict"],
        ],
        ("chat_turn", "chat/ru_1"): [
            *([["routing", kind] for kind, _, _ in EXECUTOR_STEPS.values()]),
            ["routing", "source_grounding", "knowledge_answer"],
            ["routing", "model_call", "draft", "release"],
            ["routing", "model_call", "tool_call", "model_call", "draft", "evidence_guard", "release"],
            ["routing", "source_grounding", "model_call", "draft", "evidence_guard", "semantic_guard", "release"],
        ],
    }
    for (trigger_type, ref), sequences in expected.items():
        signatures = CORPUS.applicable(trigger_type, ref)
        assert signatures, trigger_type
        for kinds in sequences:
            assert any(s.accepts(kinds) for s in signatures), (trigger_type, kinds)
    assert set(CORPUS.trigger_types) == {trigger for trigger, _ in expected}
    assert set(get_args(OutcomeType)) == set(get_args(Outcome.model_fields["type"].annotation))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "c.json: not JSON ("),
        (b'{"version": 2, "trigger_types": {}}', "c.json: version: Input should be 1"),
        (
            b'{"version": 1, "trigger_types": {"t": {"signatures": [{"name": "s", "agent": "a", "steps": ["a"],'
            b' "outcomes": ["done"]}]}}}',
            "c.json: trigger_types.t.signatures.0.outcomes.0: Input should be",
        ),
    ],
)
def test_a_bad_corpus_is_refused_naming_the_place(data: bytes, message: str) -> None:
    with pytest.raises(CorpusInvalid) as refused:
        parse_corpus(data, "c.json")
    assert refused.value.message.startswith(message), refused.value.message
