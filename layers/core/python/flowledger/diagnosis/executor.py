"""The DIAGNOSIS executor: the single diagnosis agent, then the release boundary, and nothing else."""

from __future__ import annotations

from flowledger.chat.executors import ExecutorRun, TurnContext
from flowledger.chat.models import StatusCode
from flowledger.diagnosis.agent import ReActDiagnosisAgent
from flowledger.diagnosis.observations import ObservationLedger
from flowledger.diagnosis.recording import DiagnosisRecording
from flowledger.diagnosis.release import DiagnosisRelease


class DiagnosisExecutor:
    def __init__(self, agent: ReActDiagnosisAgent, release: DiagnosisRelease) -> None:
        self._agent, self._release = agent, release

    def execute(self, context: TurnContext) -> ExecutorRun:
        yield StatusCode.DIAGNOSING
        # The ledger and the recording belong to the executor, not the loop: they outlive any stop.
        ledger = ObservationLedger(context.run_id)
        recording = DiagnosisRecording.for_turn(context)
        draft = yield from self._agent.diagnose(context, ledger, recording)
        return (yield from self._release.release(context, draft, ledger, recording))
