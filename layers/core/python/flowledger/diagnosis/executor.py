"""The DIAGNOSIS executor: the single diagnosis agent, then the release boundary, and nothing else."""

from __future__ import annotations

import json
from typing import Any

from flowledger.chat.executors import ExecutorRun, TurnContext
from flowledger.chat.models import StatusCode
from flowledger.diagnosis.agent import ReActDiagnosisAgent
from flowledger.diagnosis.observations import ObservationLedger
from flowledger.diagnosis.recording import DiagnosisRecording
from flowledger.diagnosis.release import DiagnosisRelease
from flowledger.diagnosis.tools import ToolOutcome, ToolResult, bounded_text


def grounded_sources(evidence: list[Any]) -> ToolResult:
    """The turn's grounded evidence as one observation, bounded like a lookup's result."""
    documents = [{"document_id": d.document_id, "title": d.title, "excerpt": d.text} for d in evidence]
    text, truncated = bounded_text(json.dumps({"documents": documents}, ensure_ascii=False))
    return ToolResult(
        ToolOutcome.OK,
        text,
        rows=len(documents),
        truncated=truncated,
        documents=tuple({"document_id": d.document_id, "title": d.title} for d in evidence),
    )


class DiagnosisExecutor:
    def __init__(self, agent: ReActDiagnosisAgent, release: DiagnosisRelease) -> None:
        self._agent, self._release = agent, release

    def execute(self, context: TurnContext) -> ExecutorRun:
        yield StatusCode.DIAGNOSING
        # The ledger and the recording belong to the executor, not the loop: they outlive any stop.
        ledger = ObservationLedger(context.run_id)
        if context.grounding is not None and context.grounding.evidence:
            # The sources continuity gathered are the run's first observation: citable like any tool's.
            ledger.record("grounded_sources", {}, grounded_sources(context.grounding.evidence))
        recording = DiagnosisRecording.for_turn(context)
        draft = yield from self._agent.diagnose(context, ledger, recording)
        return (yield from self._release.release(context, draft, ledger, recording))
