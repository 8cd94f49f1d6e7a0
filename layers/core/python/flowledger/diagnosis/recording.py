"""The diagnosis's reasoning flow: one step per model call and tool call, then draft, guards and release.

Summaries describe what a step did (which tool, its outcome, how many results), never what the user
asked, the model wrote or a tool returned: they are fixed texts with names and counts. Each model
call step points back to its entry in the model-call log (``back_refs.llm_call_log_ref``), so an
operator can join the flow with the logs. Steps chain: each step's parent is the step before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowledger.chat.executors import TurnContext
from flowledger.diagnosis.observations import Observation

AGENT = "diagnosis_agent"
RELEASE = "diagnosis_release"


@dataclass
class DiagnosisRecording:
    flow: Any  # FlowHandle, or None when nothing is recorded
    run_id: str
    last_step: str | None
    model_calls: int = 0

    @classmethod
    def for_turn(cls, context: TurnContext) -> DiagnosisRecording:
        """The recording of one turn: its steps start under the routing step."""
        return cls(context.flow, context.run_id, context.routing_step)

    def next_model_call_ref(self) -> str:
        self.model_calls += 1
        return f"{self.run_id}/model-{self.model_calls}"

    def _step(self, kind: str, agent: str, summary: str, **extra: Any) -> None:
        if self.flow is None:
            return
        parents = [self.last_step] if self.last_step else None
        step_id = self.flow.step(kind, agent, summary, parents=parents, **extra)
        if step_id:
            self.last_step = step_id

    def model_call(self, ref: str, tool_calls: int, latency_ms: int) -> None:
        summary = (
            f"The model proposed {tool_calls} tool call{'s' if tool_calls != 1 else ''}"
            if tool_calls
            else "The model answered with a draft"
        )
        self._step("model_call", AGENT, summary, latency_ms=latency_ms, back_refs={"llm_call_log_ref": ref})

    def tool_call(self, observation: Observation, latency_ms: int) -> None:
        result = observation.result
        summary = (
            f"Called {observation.tool}: {result.outcome.value}, {result.rows} result{'s' if result.rows != 1 else ''}"
        )
        self._step(
            "tool_call",
            AGENT,
            summary,
            latency_ms=latency_ms,
            outputs={"observation_id": observation.id, "outcome": result.outcome.value, "rows": result.rows},
        )

    def draft(self, summary: str) -> None:
        self._step("draft", AGENT, summary)

    def evidence_guard(self, passed: bool, reason: str | None) -> None:
        summary = "The evidence guard accepted every claim" if passed else "The evidence guard refused the draft"
        self._step("evidence_guard", RELEASE, summary, outputs={"passed": passed, "reason": reason or "none"})

    def semantic_guard(self, passed: bool) -> None:
        # The judge's reasons are never recorded: only whether it accepted.
        summary = (
            "The semantic guard accepted the conclusion" if passed else "The semantic guard refused the conclusion"
        )
        self._step("semantic_guard", RELEASE, summary, outputs={"passed": passed})

    def release(self, outcome: str, summary: str) -> None:
        self._step("release", RELEASE, summary, outputs={"release_outcome": outcome})
