from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowledger.reasoning.dimensions import AXES, NEUTRAL, StepSignal, bucket, compute_dimensions

steps_strategy = st.lists(
    st.builds(
        StepSignal,
        st.sampled_from(["retrieval", "llm_prompt", "verdict", "graph"]),
        st.sampled_from(["researcher", "critic"]),
        st.none() | st.floats(0, 1),
    ),
    max_size=12,
)


@given(steps_strategy, st.none() | st.floats(0, 1), st.booleans(), st.booleans())
def test_every_axis_is_0_to_7_with_its_bucket(
    steps: list[StepSignal], outcome: float | None, aborted: bool, safe: bool
) -> None:
    radar = compute_dimensions(steps, outcome, aborted, safe).model_dump()
    assert set(radar) == set(AXES)
    for axis in radar.values():
        assert 0 <= axis["score"] <= 7 and axis["bucket"] == bucket(axis["score"])


def test_buckets_split_low_medium_high() -> None:
    assert [bucket(s) for s in range(8)] == ["low"] * 3 + ["medium"] * 2 + ["high"] * 3


def test_a_confident_broad_flow_scores_high_and_an_aborted_one_is_risky() -> None:
    steps = [StepSignal(k, "researcher", 0.95) for k in ("retrieval", "llm_prompt", "verdict", "graph", "x")]
    good = compute_dimensions(steps, 0.96, aborted=False, summaries_safe=True)
    assert (good.confidence.bucket, good.coverage.score, good.risk.bucket) == ("high", 7, "low")
    assert good.maturity.score == good.recency.score == NEUTRAL
    bad = compute_dimensions(steps, 0.96, aborted=True, summaries_safe=True)
    assert bad.risk.score == 7


def test_one_unconfident_step_lowers_confidence_and_consensus() -> None:
    steps = [StepSignal("retrieval", "researcher", 0.95), StepSignal("verdict", "critic", 0.2)]
    radar = compute_dimensions(steps, 0.9, aborted=False, summaries_safe=True)
    assert radar.confidence.score == 1 and radar.consensus.score == 4 and radar.risk.bucket == "high"
