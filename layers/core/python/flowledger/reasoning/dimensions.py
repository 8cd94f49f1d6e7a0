"""The decision-dimensions radar: six 0-7 axes computed from a flow, with low/medium/high buckets.

Five axes are positive (Confidence, Coverage, Maturity, Recency, Consensus); Risk is negative: a
high Risk score is a caution flag. Maturity and Recency come from the pathway library
(``pathways/radar.py``).

An axis the flow holds no data for is **not rated** (score ``None``, bucket ``not_rated``), never
low or high: a chat turn whose steps carry no confidence has no Confidence, and so no Risk derived
from it. Snapshots stored before this rule (every score an int) read unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, model_validator

AXES = ("confidence", "coverage", "maturity", "recency", "consensus", "risk")
PATIENT_LABELS = {
    "confidence": "Confidence",
    "coverage": "Evidence breadth",
    "maturity": "Established practice",
    "recency": "Freshness",
    "consensus": "Care team agreement",
    "risk": "Caution flags",
}
NOT_RATED = "not_rated"
CONFIDENT = 0.7  # a step at or above it counts as confident for Consensus
COVERAGE_KINDS = 5  # distinct step kinds at which Coverage saturates
UNSAFE_SUMMARY_RISK = 5  # the Risk floor when a summary failed the guard
Bucket = Literal["low", "medium", "high", "not_rated"]


class Axis(BaseModel):
    score: int | None = Field(description="0-7, or null when the flow holds no data for this axis", ge=0, le=7)
    bucket: Bucket

    @model_validator(mode="after")
    def _bucket_says_whether_rated(self) -> Axis:
        # A "low" with no score, or "not_rated" with one, would read as a verdict the data never gave.
        if (self.score is None) != (self.bucket == NOT_RATED):
            raise ValueError(f"bucket {self.bucket!r} does not fit score {self.score!r}")
        return self


class Dimensions(BaseModel):
    confidence: Axis
    coverage: Axis
    maturity: Axis
    recency: Axis
    consensus: Axis
    risk: Axis


@dataclass(frozen=True)
class StepSignal:
    step_kind: str
    agent: str
    confidence: float | None


def bucket(score: int | None) -> Bucket:
    """low (0-2), medium (3-4), high (5-7); ``not_rated`` without a score."""
    if score is None:
        return "not_rated"
    return "low" if score <= 2 else "medium" if score <= 4 else "high"


def rated_axis(score: int | None) -> Axis:
    """An axis with its bucket; ``None`` makes it not rated."""
    return Axis(score=score, bucket=bucket(score))


def _scale(fraction: float) -> int:
    return max(0, min(7, round(fraction * 7)))


def confidence_score(steps: Sequence[StepSignal], outcome_confidence: float | None) -> int | None:
    """The lowest confidence any step or the outcome reported, scaled; ``None`` when none reported one."""
    reported = [s.confidence for s in steps if s.confidence is not None]
    if outcome_confidence is not None:
        reported.append(outcome_confidence)
    return _scale(min(reported)) if reported else None


def coverage_score(steps: Sequence[StepSignal]) -> int:
    """Distinct kinds of evidence gathered, saturating at five kinds (no step recorded is a real 0)."""
    return _scale(min(len({s.step_kind for s in steps}), COVERAGE_KINDS) / COVERAGE_KINDS)


def consensus_score(steps: Sequence[StepSignal]) -> int | None:
    """Share of agents whose every step with a confidence was confident; ``None`` when no step had one.

    A step without a confidence says nothing about agreement, so it neither helps nor hurts its agent.
    """
    rated: dict[str, bool] = {}
    for s in steps:
        if s.confidence is not None:
            rated[s.agent] = rated.get(s.agent, True) and s.confidence >= CONFIDENT
    return _scale(sum(rated.values()) / len(rated)) if rated else None


def risk_score(confidence: int | None, aborted: bool, summaries_safe: bool) -> int | None:
    """Caution from what is known: an abort is 7, a failed summary at least 5, else 7 minus Confidence.

    Without a Confidence and without either fact, there is nothing to derive Risk from: ``None``.
    """
    if aborted:
        return 7
    base = None if confidence is None else 7 - confidence
    if not summaries_safe:
        return max(base or 0, UNSAFE_SUMMARY_RISK)
    return base


def compute_dimensions(
    steps: Sequence[StepSignal],
    outcome_confidence: float | None,
    aborted: bool,
    summaries_safe: bool,
    maturity: int | None = None,
    recency: int | None = None,
) -> Dimensions:
    """The radar of one flow from its steps and outcome (pure: same input, same radar).

    ``maturity`` and ``recency`` are the pathway family's; ``None`` (the library cannot say) leaves
    them not rated.
    """
    confidence = confidence_score(steps, outcome_confidence)
    return Dimensions(
        confidence=rated_axis(confidence),
        coverage=rated_axis(coverage_score(steps)),
        maturity=rated_axis(maturity),
        recency=rated_axis(recency),
        consensus=rated_axis(consensus_score(steps)),
        risk=rated_axis(risk_score(confidence, aborted, summaries_safe)),
    )
