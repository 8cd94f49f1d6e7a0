"""The radar's axes: 0-7 with their bucket, and an axis the flow holds no data for is not rated, never low or high."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from flowledger.reasoning.dimensions import AXES, Axis, Dimensions, StepSignal, bucket, compute_dimensions

steps_strategy = st.lists(
    st.builds(
        StepSignal,
        st.sampled_from(["retrieval", "llm_prompt", "verdict", "graph"]),
        st.sampled_from(["researcher", "critic"]),
        st.none() | st.floats(0, 1),
    ),
    max_size=12,
)
unrated_steps = st.lists(
    st.builds(StepSignal, st.sampled_from(["retrieval", "llm_prompt", "tool_call"]), st.just("chat"), st.none()),
    max_size=8,
)


@given(steps_strategy, st.none() | st.floats(0, 1), st.booleans(), st.booleans())
def test_every_axis_is_0_to_7_with_its_bucket_or_not_rated(
    steps: list[StepSignal], outcome: float | None, aborted: bool, safe: bool
) -> None:
    radar = compute_dimensions(steps, outcome, aborted, safe).model_dump()
    assert set(radar) == set(AXES)
    for axis in radar.values():
        assert axis["bucket"] == bucket(axis["score"])
        assert axis["score"] is None or 0 <= axis["score"] <= 7


def test_buckets_split_low_medium_high() -> None:
    assert [bucket(s) for s in range(8)] == ["low"] * 3 + ["medium"] * 2 + ["high"] * 3
    assert bucket(None) == "not_rated"


def test_a_confident_broad_flow_scores_high_and_an_aborted_one_is_risky() -> None:
    steps = [StepSignal(k, "researcher", 0.95) for k in ("retrieval", "llm_prompt", "verdict", "graph", "x")]
    good = compute_dimensions(steps, 0.96, aborted=False, summaries_safe=True, maturity=5, recency=7)
    assert (good.confidence.bucket, good.coverage.score, good.risk.bucket) == ("high", 7, "low")
    assert (good.maturity.bucket, good.recency.score) == ("high", 7)
    bad = compute_dimensions(steps, 0.96, aborted=True, summaries_safe=True)
    assert bad.risk.score == 7


def test_one_unconfident_step_lowers_confidence_and_consensus() -> None:
    steps = [StepSignal("retrieval", "researcher", 0.95), StepSignal("verdict", "critic", 0.2)]
    radar = compute_dimensions(steps, 0.9, aborted=False, summaries_safe=True)
    assert radar.confidence.score == 1 and radar.consensus.score == 4 and radar.risk.bucket == "high"


# ---- not rated: no data is no verdict ----------------------------------------------------------------


def test_a_chat_turn_without_any_confidence_is_not_rated_not_low_and_not_risky() -> None:
    steps = [StepSignal("retrieval", "chat", None), StepSignal("llm_prompt", "chat", None)]
    radar = compute_dimensions(steps, None, aborted=False, summaries_safe=True)
    for axis in ("confidence", "consensus", "risk", "maturity", "recency"):
        assert getattr(radar, axis) == Axis(score=None, bucket="not_rated"), axis
    assert radar.coverage.score == 3  # two kinds of evidence is data: Coverage stays rated


@given(unrated_steps, st.booleans())
def test_risk_is_never_derived_from_a_missing_confidence(steps: list[StepSignal], safe: bool) -> None:
    radar = compute_dimensions(steps, None, aborted=False, summaries_safe=safe)
    assert radar.confidence.score is None
    # What is known still counts: a summary the guard refused is a caution flag of 5, whatever Confidence.
    assert radar.risk.score == (None if safe else 5)


@given(unrated_steps)
def test_an_abort_is_risk_7_even_without_confidence(steps: list[StepSignal]) -> None:
    assert compute_dimensions(steps, None, aborted=True, summaries_safe=True).risk.score == 7


def test_only_the_outcome_confidence_rates_confidence_and_risk_but_not_consensus() -> None:
    radar = compute_dimensions([StepSignal("retrieval", "chat", None)], 0.9, aborted=False, summaries_safe=True)
    assert (radar.confidence.score, radar.risk.score, radar.consensus.bucket) == (6, 1, "not_rated")


def test_a_step_without_confidence_neither_helps_nor_hurts_its_agents_consensus() -> None:
    steps = [
        StepSignal("retrieval", "researcher", 0.9),
        StepSignal("llm_prompt", "researcher", None),
        StepSignal("verdict", "critic", None),  # an agent with no rated step is left out, not counted unsure
    ]
    assert compute_dimensions(steps, None, aborted=False, summaries_safe=True).consensus.score == 7


def test_a_flow_without_steps_has_coverage_0_and_no_consensus() -> None:
    radar = compute_dimensions([], 0.97, aborted=False, summaries_safe=True)
    assert (radar.coverage.score, radar.consensus.bucket, radar.confidence.bucket) == (0, "not_rated", "high")


def test_a_snapshot_stored_before_not_rated_existed_still_reads() -> None:
    old = {axis: {"score": 3, "bucket": "medium"} for axis in AXES}
    assert Dimensions.model_validate(old).maturity == Axis(score=3, bucket="medium")


@pytest.mark.parametrize(("score", "bucket_"), [(None, "low"), (0, "not_rated"), (8, "high"), (-1, "low")])
def test_an_axis_whose_bucket_does_not_fit_its_score_is_refused(score: int | None, bucket_: str) -> None:
    with pytest.raises(ValidationError):
        Axis.model_validate({"score": score, "bucket": bucket_})
