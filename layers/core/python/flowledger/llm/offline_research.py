"""The offline model's rules for the research agents: the critic's claim check and the correlator's
family recommendation. Deterministic and lexical, like the rest of the offline model."""

from __future__ import annotations

from typing import Any

from flowledger.llm.offline import _STOP, words

SUPPORTED_OVERLAP = 0.5  # the share of the claim's salient words the evidence must contain


def check_claim(request: dict[str, Any]) -> dict[str, str]:
    """Accept a claim when the evidence holds at least half of its salient words; else reject it."""
    claim = set(words(str(request.get("claim", "")))) - _STOP
    evidence = request.get("evidence") or []
    found: set[str] = set()
    for excerpt in evidence:
        found |= set(words(str(excerpt.get("text", ""))))
    overlap = len(claim & found) / len(claim) if claim else 0.0
    if overlap >= SUPPORTED_OVERLAP:
        return {"verdict": "accept", "reason_code": "supported"}
    changed = any(excerpt.get("changed_since_claim") for excerpt in evidence)
    return {"verdict": "reject", "reason_code": "evidence_changed" if changed else "unsupported"}


def recommend_for_family(request: dict[str, Any]) -> dict[str, str]:
    """A family's recommendation from its aggregate's shares (aborts first, then weak evidence)."""
    flows = int(request.get("flows") or 0)
    if flows == 0:
        return {"recommendation": "keep_observing", "reason_code": "too_few_flows"}
    outcomes: dict[str, int] = request.get("outcomes") or {}
    aborted = int(request.get("aborted") or 0)
    delivered = outcomes.get("recommendation_delivered", 0) + outcomes.get("claim_created", 0)
    confidence = request.get("mean_delivered_confidence") or 0.0
    if aborted / flows >= 0.3:
        return {"recommendation": "review_failures", "reason_code": "frequent_aborts"}
    if outcomes.get("insufficient_evidence", 0) / flows >= 0.5:
        return {"recommendation": "research_deeper", "reason_code": "weak_evidence"}
    if delivered / flows >= 0.7 and confidence >= 0.8:
        return {"recommendation": "reuse_pathways", "reason_code": "consistent_success"}
    return {"recommendation": "keep_observing", "reason_code": "mixed_results"}
