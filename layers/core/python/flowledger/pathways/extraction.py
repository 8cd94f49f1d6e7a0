"""Phase 3a: a high-confidence completed flow becomes a pathway, once.

Qualifier: the flow completed with an outcome of type claim_created or recommendation_delivered,
every summary passed the guard (patient_safe_summary), and the lowest confidence across its steps
and outcome is at least 0.9. The pathway's id derives from the flow's and its put is conditional
on that id being free, so concurrent closes or re-extractions of one flow create one pathway.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from flowledger.errors import ConditionFailed
from flowledger.ledger.events import AuditEntry, timestamp
from flowledger.pathways.models import Extraction, Pathway
from flowledger.pathways.stats import Counted, counters_of, moved
from flowledger.pathways.store import PathwayStore, pathway_id_for
from flowledger.reasoning.models import FlowView
from flowledger.services import Services
from flowledger.store import items

logger = logging.getLogger(__name__)

QUALIFYING_CONFIDENCE = 0.9
QUALIFYING_OUTCOMES = frozenset({"claim_created", "recommendation_delivered"})
BENCHMARK_REF_PREFIX = "benchmark/"  # the evaluation runner's trigger refs (research/evaluation.py)


def min_confidence(flow: FlowView, steps: Sequence[dict[str, Any]]) -> float | None:
    """The lowest confidence across the steps and the outcome (None when none carries one)."""
    confidences = [s["confidence"] for s in steps if s.get("confidence") is not None]
    if flow.outcome is not None and flow.outcome.confidence is not None:
        confidences.append(flow.outcome.confidence)
    return min(confidences, default=None)


def disqualifier(flow: FlowView, steps: Sequence[dict[str, Any]]) -> str | None:
    """Why a closed flow does not become a pathway, or None when it does (pure)."""
    if flow.flow_state != "completed" or flow.outcome is None:
        return "not_completed"
    if flow.trigger_ref.startswith(BENCHMARK_REF_PREFIX):
        return "benchmark"  # an evaluation run measures the library's agents; it never teaches the library
    if flow.outcome.type not in QUALIFYING_OUTCOMES:
        return "outcome_type"
    if not flow.patient_safe_summary:
        return "unsafe_summary"
    lowest = min_confidence(flow, steps)
    if lowest is None:
        return "no_confidence"
    if lowest < QUALIFYING_CONFIDENCE:
        return "low_confidence"
    if flow.dimensions_snapshot is None:
        return "no_dimensions"
    return None


class PathwayExtractor:
    def __init__(self, services: Services) -> None:
        self._s = services
        self._store = PathwayStore.of(services)
        self._counters = counters_of(services)

    def extract(self, flow: FlowView, steps: Sequence[dict[str, Any]], actor: str) -> Extraction:
        """Create the flow's pathway if it qualifies (``reasoning.pathway.extracted`` or ``.skipped``)."""
        reason = disqualifier(flow, steps)
        pathway_id = pathway_id_for(flow.flow_id)
        if reason is not None:
            self._skipped(flow, actor, reason)
            return Extraction(pathway_id=None, created=False, disqualifier=reason)
        assert flow.outcome is not None and flow.dimensions_snapshot is not None
        now = timestamp(self._s.clock())
        lowest = min_confidence(flow, steps)
        assert lowest is not None  # the qualifier checked it
        pathway = Pathway(
            pathway_id=pathway_id,
            seed_flow_id=flow.flow_id,
            trigger_type=flow.trigger_type,
            trigger_ref=flow.trigger_ref,
            trigger_summary=flow.trigger_summary,
            outcome_type=flow.outcome.type,
            step_kinds=[s["step_kind"] for s in steps],
            min_confidence=lowest,
            seed_dimensions=flow.dimensions_snapshot,
            created_at=now,
            changed_at=now,
        )
        try:
            self._s.ledger.append(
                AuditEntry(
                    action="reasoning.pathway.extracted",
                    actor=actor,
                    subject=f"pathway:{pathway_id}",
                    refs={"flow": flow.flow_id},
                    payload={"trigger_type": flow.trigger_type, "steps": len(steps)},
                ),
                [
                    {
                        "Put": {
                            "TableName": self._store.table,
                            "Item": items.to_item(pathway.model_dump(mode="json")),
                            "ConditionExpression": "attribute_not_exists(pathway_id)",
                        }
                    },
                    *self._counters.update_item(moved(None, Counted.of(pathway)), pathway_id),
                ],
            )
        except ConditionFailed:
            self._skipped(flow, actor, "already_extracted")
            return Extraction(pathway_id=pathway_id, created=False, disqualifier="already_extracted")
        return Extraction(pathway_id=pathway_id, created=True)

    def extract_soft(self, flow: FlowView, steps: Sequence[dict[str, Any]], actor: str) -> Extraction | None:
        """Extraction at flow close: a failure is logged and counted, never raised into the close."""
        try:
            return self.extract(flow, steps, actor)
        except Exception:
            logger.exception("pathway extraction failed", extra={"flow_id": flow.flow_id})
            self._s.metrics.emit("reasoning.pathway.extraction_failed", 1, "Count", {"trigger_type": flow.trigger_type})
            return None

    def _skipped(self, flow: FlowView, actor: str, reason: str) -> None:
        self._s.ledger.append(
            AuditEntry(
                action="reasoning.pathway.skipped",
                actor=actor,
                subject=f"flow:{flow.flow_id}",
                payload={"disqualifier": reason, "trigger_type": flow.trigger_type},
            )
        )
