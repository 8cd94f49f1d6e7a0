"""Maturity and Recency from pathway data, for match candidates and for flows at close.

Both are 0-7 like every radar axis and line up with its buckets: a sparse family scores low, a
growing one medium and a mature one high; a pathway hit within a week is fresh (7), one untouched
for the stale threshold is not (0).
"""

from __future__ import annotations

from datetime import datetime

from flowledger.ledger.events import parse_timestamp
from flowledger.pathways.models import Maturity, Pathway
from flowledger.reasoning.dimensions import Axis, Dimensions, bucket

MATURE_ACTIVE = 5
HIGH_HITS = 3
FRESH_DAYS = 7
RECENCY_ZERO_DAYS = 90  # the radar's own scale, not the decay threshold


def maturity_of(active: int, high_hits: int) -> Maturity:
    """The seed's buckets: mature (>= 5 active, >= 1 with hit_count >= 3), growing (>= 1 active), sparse."""
    if active >= MATURE_ACTIVE and high_hits >= 1:
        return "mature"
    return "growing" if active >= 1 else "sparse"


def family_maturity_score(active: int, high_hits: int) -> int:
    match maturity_of(active, high_hits):
        case "mature":
            return min(7, 4 + high_hits)
        case "growing":
            return 4 if active >= 3 else 3
    return 0


def pathway_maturity_score(hit_count: int) -> int:
    """One pathway's own maturity: how often it was reused (capped at 7)."""
    return min(7, hit_count * 7 // 5) if hit_count < 5 else 7


def recency_score(last_activity: str | None, now: datetime) -> int:
    """7 within a week, falling linearly to 0 at 90 days."""
    if last_activity is None:
        return 0
    days = (now - parse_timestamp(last_activity)).total_seconds() / 86400
    if days <= FRESH_DAYS:
        return 7
    return max(0, round(7 * (RECENCY_ZERO_DAYS - days) / (RECENCY_ZERO_DAYS - FRESH_DAYS)))


def _axis(score: int) -> Axis:
    return Axis(score=score, bucket=bucket(score))


def pathway_dimensions(pathway: Pathway, now: datetime) -> Dimensions:
    """A candidate's radar: its seed flow's, with Maturity and Recency from its own reuse."""
    return pathway.seed_dimensions.model_copy(
        update={
            "maturity": _axis(pathway_maturity_score(pathway.hit_count)),
            "recency": _axis(recency_score(pathway.last_hit_at or pathway.created_at, now)),
        }
    )
