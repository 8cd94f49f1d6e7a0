"""The correlator: aggregates the recent closed flows of one trigger family into a recommendation for
the family. Its flow is aggregation -> llm_prompt -> verdict.

The aggregate is counts only (flows, outcomes by type, aborted, mean confidence of the delivered
ones, distinct trigger refs): no flow's inputs or summaries are given to the model, so nothing a
patient said can reach it. The model picks one of :data:`RECOMMENDATIONS` with a reason code; with
fewer than :data:`MIN_FLOWS` flows there is nothing to correlate, and the verdict is
``keep_observing`` without a model call.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from flowledger.ledger.events import timestamp
from flowledger.llm.ports import ChatModel, JsonSchema, Message, ModelError
from flowledger.llm.retry import HarnessRetryPolicies
from flowledger.pathways.extraction import BENCHMARK_REF_PREFIX
from flowledger.reasoning.models import FlowView
from flowledger.reasoning.recorder import ReasoningFlowRecorder
from flowledger.research.agents.recording import AgentGaveUp, AgentRecording, recorded, timed
from flowledger.services import Services

AGENT = "correlator"
# The correlator's flows form their own family, so a correlation never counts in the aggregate it makes.
TRIGGER_TYPE = "family_correlation"
WINDOW = timedelta(days=7)
MAX_FLOWS = 200
MIN_FLOWS = 3
RECOMMENDATIONS = ("reuse_pathways", "research_deeper", "review_failures", "keep_observing")
REASONS = ("consistent_success", "weak_evidence", "frequent_aborts", "mixed_results", "too_few_flows")
RECOMMENDATION_SCHEMA = JsonSchema(
    "family_recommendation",
    {
        "type": "object",
        "properties": {
            "recommendation": {"type": "string", "enum": list(RECOMMENDATIONS)},
            "reason_code": {"type": "string", "enum": list(REASONS)},
        },
        "required": ["recommendation", "reason_code"],
        "additionalProperties": False,
    },
)
INSTRUCTIONS = (
    "You are a correlator. From the aggregate of one trigger family's recent reasoning flows, recommend "
    "reuse_pathways (flows succeed consistently with high confidence), research_deeper (many end with "
    "insufficient evidence), review_failures (many abort) or keep_observing (mixed or too few). Answer "
    "with the JSON object only."
)


class CorrelatorGaveUp(AgentGaveUp):
    """The correlator could not recommend (its model failed or answered outside the schema)."""

    def __init__(self, reason: str) -> None:
        super().__init__("correlator", reason)


@dataclass(frozen=True)
class FamilyAggregate:
    trigger_type: str
    flows: int
    outcomes: dict[str, int]
    aborted: int
    mean_delivered_confidence: float | None
    distinct_refs: int

    def as_prompt(self) -> dict[str, Any]:
        return {
            "trigger_type": self.trigger_type,
            "flows": self.flows,
            "outcomes": self.outcomes,
            "aborted": self.aborted,
            "mean_delivered_confidence": self.mean_delivered_confidence,
            "distinct_trigger_refs": self.distinct_refs,
        }


@dataclass(frozen=True)
class Recommendation:
    trigger_type: str
    recommendation: str
    reason_code: str
    aggregate: FamilyAggregate
    flow_id: str | None = None


def aggregate(trigger_type: str, flows: list[FlowView]) -> FamilyAggregate:
    """Counts over ``flows`` (pure)."""
    outcomes = Counter(f.outcome.type for f in flows if f.outcome is not None)
    delivered = [
        f.outcome.confidence
        for f in flows
        if f.outcome is not None
        and f.outcome.type in ("recommendation_delivered", "claim_created")
        and f.outcome.confidence is not None
    ]
    return FamilyAggregate(
        trigger_type=trigger_type,
        flows=len(flows),
        outcomes=dict(sorted(outcomes.items())),
        aborted=sum(f.flow_state == "aborted" for f in flows),
        mean_delivered_confidence=round(sum(delivered) / len(delivered), 4) if delivered else None,
        distinct_refs=len({f.trigger_ref for f in flows}),
    )


class Correlator:
    """One family per call, one flow per call."""

    def __init__(self, services: Services, model: ChatModel, recorder: ReasoningFlowRecorder) -> None:
        self._s = services
        self._model = model
        self._recorder = recorder
        self._timeout = services.settings.model_timeout_seconds

    def correlate(self, trigger_type: str) -> Recommendation:
        """Recommend what the family needs; raises :class:`CorrelatorGaveUp` (flow aborted) when it cannot."""
        from flowledger.reasoning.service import FlowService

        since = timestamp(self._s.clock() - WINDOW)
        summary = f"Correlation of the {trigger_type.replace('_', ' ')} family"
        with recorded(self._recorder, TRIGGER_TYPE, f"family/{trigger_type}", summary) as recording:
            flows, latency = timed(lambda: FlowService(self._s).closed_flows_of_family(trigger_type, since, MAX_FLOWS))
            # An evaluation run's flows measure the agents; they say nothing about the family's real turns.
            found = aggregate(trigger_type, [f for f in flows if not f.trigger_ref.startswith(BENCHMARK_REF_PREFIX)])
            recording.step(
                "aggregation",
                AGENT,
                f"Aggregated {found.flows} closed flows of the last {WINDOW.days} days: {found.aborted} aborted",
                latency_ms=latency,
                outputs={"flows": found.flows, "aborted": found.aborted, "outcomes": found.outcomes},
            )
            recommendation = self._recommend(found, recording)
            recording.step(
                "verdict",
                AGENT,
                f"Recommended {recommendation.recommendation.replace('_', ' ')} "
                f"({recommendation.reason_code.replace('_', ' ')})",
                outputs={"recommendation": recommendation.recommendation, "reason_code": recommendation.reason_code},
            )
            recording.flow.outcome(
                "recommendation_delivered",
                f"Recommended {recommendation.recommendation.replace('_', ' ')} for the family",
            )
        return replace(recommendation, flow_id=recording.flow_id)

    def _recommend(self, found: FamilyAggregate, recording: AgentRecording) -> Recommendation:
        if found.flows < MIN_FLOWS:
            return Recommendation(found.trigger_type, "keep_observing", "too_few_flows", found)
        messages = [Message("system", INSTRUCTIONS), Message("user", json.dumps(found.as_prompt()))]
        try:
            reply, ref, latency = recording.model_call(
                AGENT,
                self._model,
                HarnessRetryPolicies.executor_answer(),
                messages,
                RECOMMENDATION_SCHEMA,
                self._timeout,
            )
        except ModelError as exc:
            raise CorrelatorGaveUp("model_unavailable") from exc
        data = reply.data or {}
        if data.get("recommendation") not in RECOMMENDATIONS or data.get("reason_code") not in REASONS:
            raise CorrelatorGaveUp("invalid_recommendation")
        recording.step(
            "llm_prompt",
            AGENT,
            f"The model weighed the aggregate of {found.flows} flows",
            latency_ms=latency,
            back_refs={"llm_call_log_ref": ref},
            outputs=recording.last_model_call,
        )
        return Recommendation(found.trigger_type, str(data["recommendation"]), str(data["reason_code"]), found)
