"""The replay harness contract: the shipped cases agree with the golden corpus, each finding kind, the
threshold's edge, and case files that cannot be used (no agent runs here: the invokers are fakes at the
port, returning what a store would have held)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.errors import InvalidInput
from flowledger.reasoning.signatures import packaged_corpus
from flowledger.replay.cases import TRIGGER_TYPES, CaseInvalid, ReplayCase, load_cases, packaged_cases
from flowledger.replay.harness import NothingToReplay, ReplayHarness, compare
from flowledger.replay.invokers import ReplayOutcome, StubAgentInvoker

CORPUS = packaged_corpus()
HAPPY: dict[str, Any] = {
    "id": "happy",
    "trigger_type": "user_question",
    "invoker": "researcher",
    "input": {"question": "Why does the trend rise?"},
    "expected": {
        "signature": "researcher_synthesis",
        "steps": ["retrieval", "llm_prompt", "verdict"],
        "outcomes": ["recommendation_delivered"],
    },
}


def case(**changes: Any) -> ReplayCase:
    body = copy.deepcopy(HAPPY)
    for key, value in changes.items():
        if key in ("signature", "steps", "outcomes"):
            body["expected"][key] = value
        else:
            body[key] = value
    return ReplayCase.model_validate(body)


def recorded(kinds: list[str], outcome: str | None = "recommendation_delivered", trigger: str = "user_question") -> Any:
    return ReplayOutcome(trigger, "replay/q", tuple(kinds), outcome, flow_id="fl_1")


class Scripted:
    """An invoker at the port: each case id answered with a scripted outcome, or an exception."""

    name = "researcher"

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.invoked: list[str] = []

    def handles(self, case: ReplayCase) -> bool:
        return case.invoker == "researcher"

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        self.invoked.append(case.id)
        answer = self.answers[case.id]
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]


# ---- the shipped cases and the corpus ------------------------------------------------------------------


def test_the_stub_matches_every_packaged_case_with_the_signature_it_names() -> None:
    cases = packaged_cases()
    report = ReplayHarness(StubAgentInvoker(), CORPUS).run(cases)
    assert report.passed and report.matched == report.cases == len(cases)
    assert [r.signature for r in report.results] == [c.expected.signature for c in cases]


def test_every_real_invoker_has_cases_and_the_seeds_corpus_is_covered() -> None:
    cases = packaged_cases()
    assert {c.invoker for c in cases} == set(TRIGGER_TYPES)
    named = {c.expected.signature for c in cases}
    # The seed's corpus: researcher happy and abort, critic promote and quarantine, a correlator recommendation.
    assert {"researcher_synthesis", "researcher_no_evidence", "critic_judged", "correlator_recommended"} <= named
    assert {o for c in cases if c.invoker == "critic" for o in c.expected.outcomes} >= {"claim_created", "no_action"}
    assert any(c.expected.outcomes == ["error"] for c in cases)  # an agent that gave up


def test_a_corpus_change_that_breaks_a_case_drifts_under_the_stub() -> None:
    corpus = CORPUS.model_copy(deep=True)
    signatures = corpus.trigger_types["claim_review"].signatures
    corpus.trigger_types["claim_review"].signatures[0] = signatures[0].model_copy(update={"outcomes": ["no_action"]})
    report = ReplayHarness(StubAgentInvoker(), corpus).run(packaged_cases())
    drifted = {r.case_id: r.finding for r in report.results if r.finding != "matched"}
    assert drifted == {"critic-accept": "outcome_drift"}
    assert not report.passed


# ---- each finding ---------------------------------------------------------------------------------------


def test_each_finding_kind() -> None:
    assert compare(CORPUS, case(), recorded(["retrieval", "llm_prompt", "verdict"]))[:2] == (
        "matched",
        "retrieval -> llm_prompt -> verdict",
    )
    # The case's pattern refuses the steps.
    finding, detail, _ = compare(CORPUS, case(), recorded(["retrieval", "verdict"]))
    assert (finding, detail) == (
        "sequence_drift",
        "retrieval -> verdict does not fit the case's steps retrieval -> llm_prompt -> verdict",
    )
    # The case accepts the steps, the corpus does not.
    loose = case(steps=["retrieval", "(llm_prompt|summary)", "verdict"])
    finding, detail, _ = compare(CORPUS, loose, recorded(["retrieval", "summary", "verdict"]))
    assert (finding, detail) == (
        "sequence_drift",
        "corpus: retrieval -> summary -> verdict fits no user_question signature",
    )
    # The corpus matched, but with another signature than the case names.
    other = case(steps=["retrieval", "llm_prompt?", "verdict"], outcomes=["insufficient_evidence"])
    finding, detail, _ = compare(CORPUS, other, recorded(["retrieval", "verdict"], "insufficient_evidence"))
    assert finding == "sequence_drift" and "matched the corpus signature researcher_no_evidence" in detail
    # The outcome is not the case's.
    finding, detail, _ = compare(
        CORPUS, case(), recorded(["retrieval", "llm_prompt", "verdict"], "insufficient_evidence")
    )
    assert (finding, detail) == (
        "outcome_drift",
        "retrieval -> llm_prompt -> verdict ends insufficient_evidence, the case allows recommendation_delivered",
    )
    # The case allows the outcome, the corpus does not.
    lax = case(outcomes=["recommendation_delivered", "no_action"])
    finding, detail, _ = compare(CORPUS, lax, recorded(["retrieval", "llm_prompt", "verdict"], "no_action"))
    assert finding == "outcome_drift" and detail.startswith("corpus: ")
    # Recorded under another trigger type.
    assert compare(CORPUS, case(), recorded(["retrieval", "llm_prompt", "verdict"], trigger="chat_turn"))[:2] == (
        "sequence_drift",
        "recorded under chat_turn, expected user_question",
    )
    # A corpus without the case's trigger type cannot judge it: that is drift, never a silent match.
    partial = CORPUS.model_copy(update={"trigger_types": {"chat_turn": CORPUS.trigger_types["chat_turn"]}})
    finding, detail, _ = compare(partial, case(), recorded(["retrieval", "llm_prompt", "verdict"]))
    assert (finding, detail) == (
        "sequence_drift",
        "the corpus cannot judge it: trigger type user_question is not in the corpus",
    )


def test_a_flow_cut_short_matches_only_a_case_that_expects_it() -> None:
    gave_up = case(steps=["retrieval"], outcomes=["error"])
    assert compare(CORPUS, gave_up, recorded(["retrieval"], "error"))[0] == "matched"
    assert compare(CORPUS, case(), recorded(["retrieval"], "error"))[0] == "sequence_drift"


def test_skipped_and_error_cases_in_a_report() -> None:
    chat = case(id="turn", invoker="chat", trigger_type="chat_turn", input={"query": "Hello"})
    invoker = Scripted({"happy": RuntimeError("the store\nwas unreachable"), "turn": None})
    report = ReplayHarness(invoker, CORPUS).run([case(), chat])
    assert invoker.invoked == ["happy"]  # a skipped case never runs
    error, skipped = report.results
    assert (error.finding, error.detail) == ("error", "RuntimeError: the store was unreachable")
    assert (skipped.finding, skipped.detail) == ("skipped", "a chat case: the researcher invoker does not run it")
    assert (report.compared, report.error, report.skipped, report.drift_share, report.passed) == (1, 1, 1, 1.0, False)


def test_an_invoker_with_no_case_to_run_cannot_pass() -> None:
    chat = case(id="turn", invoker="chat", trigger_type="chat_turn", input={"query": "Hello"})
    with pytest.raises(NothingToReplay, match="none of the 1 cases is for the researcher invoker"):
        ReplayHarness(Scripted({}), CORPUS).run([chat])


def test_the_threshold_is_inclusive_and_skipped_cases_are_not_compared() -> None:
    good = recorded(["retrieval", "llm_prompt", "verdict"])
    answers = {"a": good, "b": good, "c": good, "d": recorded(["verdict"])}
    cases = [case(id=i) for i in answers]
    cases.append(case(id="turn", invoker="chat", trigger_type="chat_turn", input={"query": "Hello"}))
    harness = ReplayHarness(Scripted(answers), CORPUS)
    at = harness.run(cases, threshold=0.25)
    assert (at.compared, at.sequence_drift, at.drift_share, at.passed) == (4, 1, 0.25, True)
    assert not harness.run(cases, threshold=0.2499).passed
    assert not harness.run(cases).passed
    with pytest.raises(InvalidInput, match="not between 0 and 1"):
        harness.run(cases, threshold=1.5)


# ---- case files -----------------------------------------------------------------------------------------


def write(directory: Path, name: str, body: Any) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "not JSON"),
        ([HAPPY], "a case is a JSON object"),
        ({**HAPPY, "extra": 1}, "extra: Extra inputs are not permitted"),
        ({**HAPPY, "trigger_type": "chat_turn"}, "the researcher invoker records user_question flows, not chat_turn"),
        ({**HAPPY, "invoker": "planner"}, "invoker: Input should be"),
        ({**HAPPY, "input": {"query": "Hi"}}, "input.question: Field required"),
        ({**HAPPY, "expected": {**HAPPY["expected"], "steps": ["retrieval!"]}}, "'retrieval!' is not a step kind"),
        ({**HAPPY, "expected": {**HAPPY["expected"], "outcomes": ["won"]}}, "expected.outcomes.0"),
        (
            {
                **HAPPY,
                "invoker": "critic",
                "trigger_type": "claim_review",
                "input": {"statement": "S", "question": "Q", "cited": ["a.md"]},
            },
            "a.md is cited but not among the documents",
        ),
    ],
)
def test_a_bad_case_file_is_refused_naming_it(tmp_path: Path, body: Any, message: str) -> None:
    write(tmp_path / "cases", "a-good.json", HAPPY | {"id": "good"})
    write(tmp_path / "cases", "b-bad.json", body)
    with pytest.raises(CaseInvalid) as raised:
        load_cases(tmp_path / "cases")
    assert raised.value.message.startswith(f"{tmp_path / 'cases'}/b-bad.json: ")
    assert message in raised.value.message


def test_repeated_ids_an_empty_or_missing_directory_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "cases", "one.json", HAPPY)
    write(tmp_path / "cases", "two.json", HAPPY)
    with pytest.raises(CaseInvalid, match=r"two\.json: id 'happy' repeats one\.json"):
        load_cases(tmp_path / "cases")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CaseInvalid, match="holds no"):
        load_cases(tmp_path / "empty")
    with pytest.raises(CaseInvalid, match="not a directory of replay cases"):
        load_cases(tmp_path / "missing")


def test_canonical_steps_are_the_shortest_the_pattern_accepts() -> None:
    diagnosis = case(steps=["routing", "source_grounding?", "(model_call|tool_call)+", "draft", "(a|b)*", "release"])
    assert diagnosis.expected.canonical_steps() == ["routing", "model_call", "draft", "release"]
    assert diagnosis.expected.pattern().accepts(diagnosis.expected.canonical_steps())


# ---- the command, in process ------------------------------------------------------------------------------


def test_a_real_invoker_without_the_dev_install_is_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "moto", None)  # import moto now raises ImportError
    assert main(["flows", "replay", "--invoker", "researcher"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flowledger: error: the real invokers run the agents on an embedded store, which needs")
    assert err.count("\n") == 1


def test_steps_read_back_come_parents_first_when_their_timestamps_tie() -> None:
    from flowledger.replay.agents import creation_order

    at = "2026-11-30T09:00:00.000000Z"
    # One batch, one timestamp, and step ids that sort against the recording order.
    records = [
        {"step_id": "st_C", "step_kind": "retrieval", "created_at": at, "parent_step_ids": []},
        {"step_id": "st_B", "step_kind": "llm_prompt", "created_at": at, "parent_step_ids": ["st_C"]},
        {"step_id": "st_A", "step_kind": "verdict", "created_at": at, "parent_step_ids": ["st_B"]},
    ]
    assert [r["step_kind"] for r in creation_order(records)] == ["retrieval", "llm_prompt", "verdict"]
