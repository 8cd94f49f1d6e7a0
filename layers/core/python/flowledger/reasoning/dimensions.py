"""The decision-dimensions radar: six 0-7 axes computed from a flow, with low/medium/high buckets.

Five axes are positive (Confidence, Coverage, Maturity, Recency, Consensus); Risk is negative: a
high Risk score is a caution flag. Maturity and Recency come from the pathway library
(``pathways/radar.py``); without pathway evidence either way they take the neutral value 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

AXES = ("confidence", "coverage", "maturity", "recency", "consensus", "risk")
NEUTRAL = 3
PATIENT_LABELS = {
    "confidence": "Confidence",
    "coverage": "Evidence breadth",
    "maturity": "Established practice",
    "recency": "Freshness",
    "consensus": "Care team agreement",
    "risk": "Caution flags",
}
Bucket = Literal["low", "medium", "high"]


class Axis(BaseModel):
    score: int
    bucket: Bucket


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


def bucket(score: int) -> Bucket:
    return "low" if score <= 2 else "medium" if score <= 4 else "high"


def _scale(fraction: float) -> int:
    return max(0, min(7, round(fraction * 7)))


def _axis(score: int) -> Axis:
    return Axis(score=score, bucket=bucket(score))


def compute_dimensions(
    steps: Sequence[StepSignal],
    outcome_confidence: float | None,
    aborted: bool,
    summaries_safe: bool,
    maturity: int = NEUTRAL,
    recency: int = NEUTRAL,
) -> Dimensions:
    """The radar of one flow from its steps and outcome (pure: same input, same radar)."""
    confidences = [s.confidence for s in steps if s.confidence is not None]
    floor = min([*confidences, outcome_confidence] if outcome_confidence is not None else confidences, default=0.0)
    confidence = _scale(floor)
    # Coverage: distinct kinds of evidence gathered, saturating at five kinds.
    coverage = _scale(min(len({s.step_kind for s in steps}), 5) / 5)
    # Consensus: share of agents whose every step was confident (>= 0.7).
    agents = {s.agent for s in steps}
    confident = {a for a in agents if all((s.confidence or 0.0) >= 0.7 for s in steps if s.agent == a)}
    consensus = _scale(len(confident) / len(agents)) if agents else 0
    risk = 7 - confidence
    if aborted:
        risk = 7
    if not summaries_safe:
        risk = max(risk, 5)
    return Dimensions(
        confidence=_axis(confidence),
        coverage=_axis(coverage),
        maturity=_axis(maturity),
        recency=_axis(recency),
        consensus=_axis(consensus),
        risk=_axis(min(7, risk)),
    )
