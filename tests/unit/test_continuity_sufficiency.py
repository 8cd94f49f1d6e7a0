"""History sufficiency: the deterministic rules decide first (changed versions, lost access, partial
coverage, a new filter, grouping or total force a rerun; a rephrasing uses history), then the model's
strict assessment, parsed strictly: anything but the exact schema reruns both engines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from flowledger.continuity.reauthorize import OutcomeReason, SourceOutcome, SourceStatus
from flowledger.continuity.refs import GroundedRef
from flowledger.continuity.sufficiency import (
    HISTORY_ASSESSMENT_SCHEMA,
    SufficiencyReason,
    assess,
    new_filter,
    new_grouping,
    new_total,
)
from flowledger.llm.ports import DEFAULT_MAX_TOKENS, JsonSchema, Message, ModelTimeout, Reply, ToolSpec, Usage
from flowledger.tabular.plan import parse_plan
from tests.unit.test_continuity_refs import ref_fields

TABLE = GroundedRef.model_validate(ref_fields(plan_fingerprint="a" * 64))
PDF = GroundedRef.model_validate(
    ref_fields(file_name="policy.pdf", extension=".pdf", source_kind="narrative", last_engine="narrative")
)
# The prior turn: total amount per product, for 2024 only.
PLAN = parse_plan(
    {
        "filters": [{"column": "year", "op": "=", "value": 2024}],
        "group_by": ["product"],
        "aggregates": [{"function": "sum", "column": "amount", "alias": "total_amount"}],
        "order_by": [],
        "limit": None,
    }
)


@dataclass
class FakeModel:
    """A ChatModel at the port boundary: answers from a script, records what it was asked."""

    answers: list[Any] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    name: str = "fake"
    offline: bool = True

    def complete(
        self,
        messages: list[Message],
        *,
        schema: JsonSchema | None = None,
        tools: list[ToolSpec] | None = None,
        timeout_seconds: float,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> Reply:
        self.calls.append({"messages": messages, "schema": schema})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Reply(data=answer, usage=Usage(10, 5))


def says(decision: str, rewrite: str = "standalone question") -> FakeModel:
    return FakeModel([{"decision": decision, "standalone_query": rewrite}])


@pytest.mark.parametrize(
    "follow_up",
    ["Can you say that more briefly?", "Rephrase that for a manager", "What does that mean?", "Explain your answer"],
)
def test_history_sufficient_tabular_follow_up_runs_no_engine_and_asks_no_model(follow_up: str) -> None:
    model = FakeModel()
    decision = assess(follow_up, [TABLE], PLAN, model)
    assert (decision.decision, decision.reason, decision.engines) == ("none", SufficiencyReason.HISTORY_REPHRASE, set())
    assert model.calls == [] and decision.rewrite == follow_up


def test_fresh_tabular_calculation_follow_up_reruns_the_table_whatever_the_model_says() -> None:
    model = says("none", "Total amount by region for 2024")
    decision = assess("now break that down by region", [TABLE], PLAN, model)
    assert decision.decision == "tabular" and decision.reason is SufficiencyReason.NEW_GROUPING
    assert decision.rewrite == "Total amount by region for 2024" and len(model.calls) == 1
    assert model.calls[0]["schema"] is HISTORY_ASSESSMENT_SCHEMA


@pytest.mark.parametrize(
    ("text", "grouping", "filtering", "total"),
    [
        ("now break that down by region", True, False, False),
        ("show it per month", True, False, False),
        ("and for each store?", True, False, False),
        ("by product again", False, False, False),  # the prior plan grouped by product
        ("by the way, thanks", False, False, False),
        ("only for 2025", False, True, False),  # 2025 is not the prior plan's 2024
        ("what was it for 2024?", False, False, False),
        ('just the "north" rows', False, True, False),
        ("excluding returns", False, True, False),
        ("what is the average?", False, False, True),
        ("what was the total?", False, False, False),  # the prior plan summed
        ("how many orders?", False, False, True),
        ("say it in 2 sentences", False, False, False),  # a number about the answer's form
    ],
)
def test_new_grouping_filter_and_total_against_the_prior_plan(
    text: str, grouping: bool, filtering: bool, total: bool
) -> None:
    assert (new_grouping(text.lower(), PLAN), new_filter(text.lower(), PLAN), new_total(text.lower(), PLAN)) == (
        grouping,
        filtering,
        total,
    )


def test_text_rules_force_a_table_only_when_a_prior_source_is_one() -> None:
    decision = assess("now break that down by region", [PDF], None, says("narrative", "policy by region"))
    assert decision.decision == "narrative" and decision.reason is SufficiencyReason.MODEL_ASSESSMENT


def test_mixed_prior_grounding_requiring_both_engines() -> None:
    changed = SourceOutcome(PDF, SourceStatus.CHANGED, OutcomeReason.NEW_VERSION, 2)
    reusable = SourceOutcome(TABLE, SourceStatus.REUSABLE, OutcomeReason.SAME_VERSION, 1)
    decision = assess("and per region?", [TABLE, PDF], PLAN, says("none"), outcomes=[reusable, changed])
    assert decision.decision == "both"
    assert decision.reasons == (
        SufficiencyReason.SOURCE_VERSION_CHANGED,
        SufficiencyReason.NEW_GROUPING,
        SufficiencyReason.MODEL_ASSESSMENT,
    )


def test_a_changed_version_forces_a_rerun_even_of_a_rephrasing() -> None:
    changed = SourceOutcome(TABLE, SourceStatus.CHANGED, OutcomeReason.NEW_VERSION, 2)
    decision = assess("Rephrase that", [TABLE], PLAN, says("none"), outcomes=[changed])
    assert decision.decision == "tabular" and decision.reason is SufficiencyReason.SOURCE_VERSION_CHANGED


def test_prior_partial_coverage_forces_a_rerun() -> None:
    partial = GroundedRef.model_validate({**TABLE.model_dump(), "evidence_status": "partial", "coverage": 0.4})
    decision = assess("Rephrase that", [partial], PLAN, says("none"))
    assert decision.decision == "tabular" and decision.reason is SufficiencyReason.PRIOR_PARTIAL_COVERAGE


def test_a_source_no_longer_readable_is_never_answered_from_history() -> None:
    gone = SourceOutcome(PDF, SourceStatus.UNAUTHORISED, OutcomeReason.ACCESS_REVOKED)
    kept = SourceOutcome(TABLE, SourceStatus.REUSABLE, OutcomeReason.SAME_VERSION, 1)
    decision = assess("Rephrase that", [TABLE, PDF], PLAN, says("none"), outcomes=[kept, gone])
    assert decision.decision == "tabular" and decision.reason is SufficiencyReason.SOURCE_NOT_REUSABLE
    alone = assess("Rephrase that", [PDF], None, says("none"), outcomes=[gone])
    assert alone.decision == "narrative"  # nothing left to reuse: a search, never the old answer


def test_the_model_decides_when_no_rule_fires() -> None:
    decision = assess("What else does it say about refunds?", [PDF], None, says("narrative", "Refunds in policy.pdf"))
    assert (decision.decision, decision.rewrite, decision.model_calls, decision.tokens) == (
        "narrative",
        "Refunds in policy.pdf",
        1,
        15,
    )


@pytest.mark.parametrize(
    "answer",
    [
        {"decision": "Tabular", "standalone_query": "x"},  # not one of the four, whatever the case
        {"decision": "none"},  # no rewrite
        {"decision": "none", "standalone_query": "x", "confidence": 0.9},  # a field the schema does not have
        {"decision": "none", "standalone_query": "   "},
        {"decision": "none", "standalone_query": 5},
        {"decision": ["none"], "standalone_query": "x"},
        None,  # text, not the object
    ],
)
def test_an_invalid_assessment_is_never_repaired_it_reruns_both(answer: Any) -> None:
    decision = assess("What else does it say?", [PDF, TABLE], None, FakeModel([answer]))
    assert decision.decision == "both" and decision.reason is SufficiencyReason.ASSESSMENT_INVALID
    assert decision.rewrite == "What else does it say?"


def test_an_unavailable_model_reruns_both() -> None:
    decision = assess("What else does it say?", [PDF], None, FakeModel([ModelTimeout("slow")]))
    assert decision.decision == "both" and decision.reason is SufficiencyReason.ASSESSMENT_UNAVAILABLE


def test_no_current_selection_and_no_grounded_refs_goes_to_the_model() -> None:
    decision = assess("What is our refund policy?", [], None, says("narrative", "refund policy"))
    assert decision.decision == "narrative" and decision.reasons == (SufficiencyReason.MODEL_ASSESSMENT,)


def test_the_model_sees_file_names_and_the_plan_shape_never_filter_values() -> None:
    model = says("none")
    assess("what about Acme?", [TABLE], PLAN, model)
    prompt = model.calls[0]["messages"][1].content
    assert "sales.csv" in prompt and "sum(amount)" in prompt and "year =" in prompt
    assert "2024" not in prompt
