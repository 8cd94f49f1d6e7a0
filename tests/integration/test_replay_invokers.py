"""The real replay invokers: Flowledger's agents on the offline model, each case on a fresh embedded store,
their flows read back from the store; and an agent whose shape is broken drifts."""

from __future__ import annotations

from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.reasoning.recorder import InProcessTransport
from flowledger.reasoning.signatures import packaged_corpus
from flowledger.replay.agents import REAL_INVOKERS
from flowledger.replay.cases import packaged_cases
from flowledger.replay.harness import ReplayHarness, ReplayReport

CASES = packaged_cases()


def replay(invoker: str, *case_ids: str) -> ReplayReport:
    cases = [c for c in CASES if not case_ids or c.id in case_ids]
    return ReplayHarness(REAL_INVOKERS[invoker](load_settings()), packaged_corpus()).run(cases)


def findings(report: ReplayReport) -> dict[str, str]:
    return {r.case_id: r.finding for r in report.results if r.finding != "skipped"}


@pytest.mark.parametrize("invoker", sorted(REAL_INVOKERS))
def test_each_real_invoker_runs_its_cases_green(clean_environment: None, invoker: str) -> None:
    report = replay(invoker)
    own = [c for c in CASES if c.invoker == invoker]
    assert report.passed, [r.detail for r in report.results if r.finding != "matched"]
    assert report.compared == report.matched == len(own) and report.skipped == len(CASES) - len(own)
    for result in report.results:
        if result.finding == "matched":  # a flow was recorded and read back from the store
            assert result.flow_id and result.flow_id.startswith("fl_") and result.steps


def test_the_flow_is_read_back_from_the_store_not_from_the_agent(
    clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = InProcessTransport.steps

    def drop_verdicts(self: InProcessTransport, flow_id: str, bodies: list[dict[str, Any]]) -> None:
        # The agent records its verdict; the store never gets it.
        sent(self, flow_id, [body for body in bodies if body["step_kind"] != "verdict"])

    monkeypatch.setattr(InProcessTransport, "steps", drop_verdicts)
    report = replay("researcher", "researcher-happy")
    (result,) = report.results
    assert (result.finding, result.steps) == ("sequence_drift", ["retrieval", "llm_prompt"])


def test_a_researcher_that_skips_a_step_drifts(clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from flowledger.research.agents.recording import AgentRecording

    step = AgentRecording.step

    def no_retrieval(self: AgentRecording, kind: str, agent: str, summary: str, **extra: Any) -> None:
        if kind != "retrieval":
            step(self, kind, agent, summary, **extra)

    monkeypatch.setattr(AgentRecording, "step", no_retrieval)
    report = replay("researcher")
    assert findings(report) == dict.fromkeys(
        ("researcher-gives-up", "researcher-happy", "researcher-no-evidence"), "sequence_drift"
    )
    assert not report.passed and report.drift_share == 1.0


def test_a_critic_that_accepts_everything_is_outcome_drift(
    clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowledger.llm import offline_research

    monkeypatch.setattr(
        offline_research, "check_claim", lambda request: {"verdict": "accept", "reason_code": "supported"}
    )
    report = replay("critic")
    assert findings(report) == {
        "critic-accept": "matched",
        "critic-evidence-missing": "matched",  # no model call: the rule never ran
        "critic-reject": "outcome_drift",
    }
    assert report.drift_share == pytest.approx(1 / 3)


def test_a_diagnosis_without_its_semantic_guard_step_drifts(
    clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowledger.diagnosis.recording import DiagnosisRecording

    monkeypatch.setattr(DiagnosisRecording, "semantic_guard", lambda self, *recorded: None)
    report = replay("diagnosis", "diagnosis-demo-incident")
    (result,) = report.results
    assert result.finding == "sequence_drift" and "semantic_guard" not in (result.steps or [])


def test_a_chat_turn_recorded_as_another_step_kind_drifts(
    clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowledger.chat import usecase
    from flowledger.chat.models import Intent

    steps = dict(usecase.EXECUTOR_STEPS)
    steps[Intent.SYSTEM_CHAT] = ("knowledge_answer", "system_chat_executor", "Answered without tools")
    monkeypatch.setattr(usecase, "EXECUTOR_STEPS", steps)
    assert findings(replay("chat")) == {"chat-knowledge": "matched", "chat-system": "sequence_drift"}


def test_an_agent_that_records_no_flow_is_an_error(clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from flowledger.research.agents.correlator import Correlator

    monkeypatch.setattr(Correlator, "correlate", lambda self, trigger_type: None)
    report = replay("correlator", "correlator-too-few-flows")
    (result,) = report.results
    assert (result.finding, result.detail) == ("error", "NoFlowRecorded: the correlator recorded 0 flows, expected 1")
