"""The evaluation runner and the research CLI on moto, with the model a scripted OpenAI-compatible server
on loopback (the real adapter runs): one flow per benchmark case with its five steps, verdicts that hold
whatever the recorder does, no follow-up research enqueued, and the console's table, JSON and exit codes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from flowledger.cli import main
from flowledger.identity import Principal
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.knowledge.scopes import GLOBAL
from flowledger.llm.offline import NAME as OFFLINE
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.reasoning.guard import check_summary
from flowledger.reasoning.recorder import ReasoningFlowRecorder
from flowledger.reasoning.service import FlowService
from flowledger.research.agents.recording import research_recorder
from flowledger.research.agents.researcher import Researcher
from flowledger.research.backlog import Backlog
from flowledger.research.evaluation import STEP_KINDS, Case, EvaluationReport, EvaluationRunner, parse_cases
from flowledger.services import Services

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "fixtures" / "eval" / "cases.jsonl"
EXAMPLE = ROOT / "examples" / "eval" / "cases.jsonl"
# Every excerpt holds every salient term of the cases' HbA1c question: a strong result.
CORPUS = {
    "hba1c-1.md": b"# HbA1c trend\n\nThe HbA1c trend can rise after a dose change when adherence drops.",
    "hba1c-2.md": b"# Reading a trend\n\nWhy does HbA1c rise? After a dose change the trend lags by months.",
    "hba1c-3.md": b"# Follow-up\n\nA dose change makes the HbA1c trend rise only after three months.",
    "lunch.md": b"# Lunch\n\nThe canteen opens at noon and serves soup.",
}
FIRST, SECOND, LUNCH = "doc_a0c8d3159e3632b3", "doc_5fb0987b0bff6107", "doc_86b3c1d9b619b2eb"
ADMIN = Principal(kind="iam", id="arn:aws:iam::123456789012:user/operator")


def flags(services: Services, **values: Any) -> None:
    for name, value in values.items():
        services.settings.__dict__[name] = value


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """A knowledge answer citing the first document given, except for the case meant to give up, whose
    answer cites a document it was never given."""
    request = json.loads(body["messages"][-1]["content"])
    first = request["documents"][0]
    cited = "doc_0000000000000000" if request["query"].startswith("How soon") else first["document_id"]
    item = {"text": first["text"][:200], "invocation_id": request["invocation_id"], "document_ids": [cited]}
    return {"json": {"answer_items": [item], "limitations": "Scripted."}}


@pytest.fixture
def corpus(services: Services) -> Services:
    index = KnowledgeIndex(services)
    for name, body in CORPUS.items():
        index.add_document(name, body)
    return services


@pytest.fixture
def model(scripted_openai: Any) -> OpenAIChatModel:
    scripted_openai.script = [answer] * 20
    return OpenAIChatModel("scripted", "sk-test", scripted_openai.base_url)


@pytest.fixture
def cli(corpus: Services, scripted_openai: Any, monkeypatch: pytest.MonkeyPatch) -> Services:
    """The CLI on the test's store, its model the scripted server (as OPENAI_BASE_URL would make it), capture on."""
    monkeypatch.setattr("flowledger.cli.store.services", lambda data_dir: corpus)
    flags(
        corpus,
        openai_base_url=scripted_openai.base_url,
        openai_api_key=SecretStr("sk-test"),
        reasoning_flow_capture_enabled=True,
    )
    scripted_openai.script = [answer] * 20
    return corpus


def runner(services: Services, model: Any, recorder: ReasoningFlowRecorder) -> EvaluationRunner:
    return EvaluationRunner(services, model, recorder, Researcher(services, model, recorder, scopes=(GLOBAL,)))


def cases() -> list[Case]:
    return parse_cases(CASES.read_bytes())


def flows(services: Services) -> list[dict[str, Any]]:
    table = services.aws.table_name("flows")
    return [
        {k: next(iter(v.values())) for k, v in item.items()}
        for item in services.aws.dynamodb.scan(TableName=table)["Items"]
    ]


def steps_of(services: Services, flow_id: str) -> list[dict[str, Any]]:
    return [s.model_dump() for s in FlowService(services).admin_flow(ADMIN, flow_id).steps]


def verdicts(report: EvaluationReport) -> list[tuple[Any, ...]]:
    """What a case came to, flow aside."""
    return [
        (c.case_id, c.outcome, c.composite_k, c.hits, c.cited, c.expected_found, c.passed, c.reason)
        for c in report.cases
    ]


EXPECTED_VERDICTS = [
    ("strong-trend", "recommendation_delivered", 1.0, 3, 1, 2, True, None),
    ("gives-up", "gave_up", 0.9167, 3, 0, None, False, "citation_check_failed"),
    ("expects-the-canteen", "recommendation_delivered", 1.0, 3, 1, 0, False, "expected_documents_missing"),
    ("nothing-on-trains", "insufficient_evidence", 0.0, 0, 0, None, True, None),
]


# ---- the runner -----------------------------------------------------------------------------------------


def test_each_case_is_one_flow_of_the_five_steps_under_its_benchmark_ref(
    corpus: Services, model: OpenAIChatModel, scripted_openai: Any
) -> None:
    flags(corpus, reasoning_flow_capture_enabled=True)
    report = runner(corpus, model, research_recorder(corpus)).run(cases())
    assert re.fullmatch(r"ev_[0-9A-Z]{26}", report.run_id) and report.recorded
    by_ref = {f["trigger_ref"]: f for f in flows(corpus)}
    assert set(by_ref) == {f"benchmark/{report.run_id}/{c.case_id}" for c in cases()}
    assert {f["trigger_type"] for f in by_ref.values()} == {"user_question"}
    strong = report.cases[0]
    assert by_ref[f"benchmark/{report.run_id}/strong-trend"]["flow_id"] == strong.flow_id
    steps = steps_of(corpus, strong.flow_id or "")
    assert [s["step_kind"] for s in steps] == list(STEP_KINDS)
    assert [s["parent_step_ids"] for s in steps[1:]] == [[s["step_id"]] for s in steps[:-1]]
    assert steps[0]["confidence"] == 1.0 and steps[0]["outputs"]["queries"] == 2  # the question's phrasings only
    assert set(steps[1]["outputs"]["document_ids"]) == {FIRST, SECOND, "doc_cea3abe12dbb0054"}
    assert steps[2]["back_refs"]["llm_call_log_ref"].endswith("/model-1")
    assert steps[3]["outputs"] == {
        "cited": 1,
        "outside_evidence": 0,
        "expected": 2,
        "expected_retrieved": 2,
        "expected_cited": 1,
    }
    assert steps[4]["outputs"] == {"passed": True, "outcome": "recommendation_delivered", "reason": "none"}
    for flow in report.cases:  # summaries are counts and codes: never the question or the evidence
        for step in steps_of(corpus, flow.flow_id or ""):
            assert check_summary(step["summary_text"]).safe
            assert not {"hba1c", "dose", "trains", "adherence"} & set(step["summary_text"].lower().split())
    # Every case with evidence was synthesised once; the one without was not.
    assert len(scripted_openai.requests) == 3


def test_passing_failing_and_given_up_cases_are_reported_and_the_run_goes_on(
    corpus: Services, model: OpenAIChatModel
) -> None:
    flags(corpus, reasoning_flow_capture_enabled=True)
    report = runner(corpus, model, research_recorder(corpus)).run(cases(), run_id="nightly-1")
    assert verdicts(report) == EXPECTED_VERDICTS
    totals = report.totals
    assert (totals.cases, totals.passed, totals.failed, totals.gave_up) == (4, 2, 2, 1)
    assert totals.mean_composite_k == round((1.0 + 0.9167 + 1.0 + 0.0) / 4, 4)
    state = {f["trigger_ref"]: (f["flow_state"], f.get("outcome_type")) for f in flows(corpus)}
    assert state["benchmark/nightly-1/gives-up"][0] == "aborted"
    assert state["benchmark/nightly-1/nothing-on-trains"][0] == "completed"
    gave_up = steps_of(corpus, report.cases[1].flow_id or "")
    assert [s["step_kind"] for s in gave_up] == ["retrieval", "evidence_assembly", "summary"]
    assert gave_up[2]["outputs"] == {"gave_up": "citation_check_failed"}


def test_the_runner_checks_provenance_itself_and_fails_a_citation_outside_the_evidence(
    corpus: Services, model: OpenAIChatModel
) -> None:
    from flowledger.chat.models import PublicContent, Reference

    class Unchecked(Researcher):
        """A researcher whose synthesis skips its own citation check."""

        def synthesise(self, question: Any, evidence: Any, recording: Any) -> tuple[PublicContent, str, int]:
            cited = [Reference(document_id=LUNCH, title="Lunch")]
            return PublicContent(text="Scripted.", references=cited), "ref", 0

    recorder = research_recorder(corpus)
    report = EvaluationRunner(corpus, model, recorder, Unchecked(corpus, model, recorder, scopes=(GLOBAL,))).run(
        cases()[:1]
    )
    assert (report.cases[0].passed, report.cases[0].reason) == (False, "citation_outside_evidence")


def test_no_case_enqueues_research_even_with_the_producer_on(corpus: Services, model: OpenAIChatModel) -> None:
    flags(corpus, reasoning_flow_capture_enabled=True, research_auto_enqueue_enabled=True)
    report = runner(corpus, model, research_recorder(corpus)).run(cases())
    assert report.cases[3].outcome == "insufficient_evidence"  # zero hits: research() would have enqueued
    assert Backlog(corpus).view().status_distribution["pending"] == 0


def test_with_capture_off_nothing_is_recorded_and_the_verdicts_are_the_same(
    corpus: Services, model: OpenAIChatModel
) -> None:
    report = runner(corpus, model, research_recorder(corpus)).run(cases())
    assert not report.recorded and {c.flow_id for c in report.cases} == {None}
    assert flows(corpus) == []
    assert verdicts(report) == EXPECTED_VERDICTS


class Broken:
    """A flow store that fails: at the start, or at the third step of every flow."""

    def __init__(self, at: str) -> None:
        self.at = at
        self.steps = 0

    def start(self, body: dict[str, Any]) -> str:
        if self.at == "start":
            raise ConnectionError("the flow store is down")
        return "fl_broken"

    def step(self, flow_id: str, body: dict[str, Any]) -> None:
        self.steps += 1
        if self.steps % 3 == 0:
            raise ConnectionError("the flow store went away")

    def close(self, flow_id: str, body: dict[str, Any]) -> None:
        raise ConnectionError("the flow store is down")


@pytest.mark.parametrize("at", ["start", "step"])
def test_a_recording_failure_never_changes_a_verdict(corpus: Services, model: OpenAIChatModel, at: str) -> None:
    report = runner(corpus, model, ReasoningFlowRecorder(Broken(at))).run(cases())
    assert verdicts(report) == EXPECTED_VERDICTS


# ---- flowledger eval run -----------------------------------------------------------------------------------


def test_eval_run_prints_a_row_per_case_and_the_totals_and_exits_1_when_one_failed(
    cli: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "run", str(CASES), "--run-id", "cli-1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["case", "outcome", "k", "hits", "cited", "expected", "result", "reason", "flow"]
    rows = [line.split() for line in out[1:5]]
    assert [r[:8] for r in rows] == [
        ["strong-trend", "recommendation_delivered", "1.00", "3", "1", "2/2", "pass", "-"],
        ["gives-up", "gave_up", "0.92", "3", "0", "-", "FAIL", "citation_check_failed"],
        [
            "expects-the-canteen",
            "recommendation_delivered",
            "1.00",
            "3",
            "1",
            "0/1",
            "FAIL",
            "expected_documents_missing",
        ],
        ["nothing-on-trains", "insufficient_evidence", "0.00", "0", "0", "-", "pass", "-"],
    ]
    assert all(r[8].startswith("fl_") for r in rows)
    starts = [[m.start() for m in re.finditer(r"\S+", line)] for line in out[:5]]
    assert len({(s[1], s[6], s[7], s[8]) for s in starts}) == 1  # the left-aligned columns start together
    assert out[5].startswith("4 cases: 2 passed, 2 failed (1 gave up); mean composite_k 0.73; run cli-1 via ")
    assert {f["trigger_ref"] for f in flows(cli)} == {f"benchmark/cli-1/{c.case_id}" for c in cases()}


def test_eval_run_exits_0_when_every_case_passed_and_prints_json_with_json(
    cli: Services, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    passing = tmp_path / "passing.jsonl"
    passing.write_bytes(b"".join(line for i, line in enumerate(CASES.read_bytes().splitlines(True)) if i in (0, 4)))
    assert main(["eval", "run", str(passing), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [c["case_id"] for c in report["cases"]] == ["strong-trend", "nothing-on-trains"]
    assert report["totals"] == {"cases": 2, "passed": 2, "failed": 0, "gave_up": 0, "mean_composite_k": 0.5}
    assert report["recorded"] is True and report["run_id"].startswith("ev_")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("flag", "bar"), [([], True), (["--json"], False)])
def test_a_progress_bar_is_drawn_on_a_terminal_but_never_with_json(
    cli: Services, monkeypatch: pytest.MonkeyPatch, flag: list[str], bar: bool
) -> None:
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    main(["eval", "run", str(CASES), *flag])
    assert ("| 0/4 [" in terminal.getvalue()) is bar  # tqdm draws its first frame at once


def test_eval_run_prints_the_verdicts_when_recording_fails(
    cli: Services,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(
        "flowledger.research.agents.recording.research_recorder",
        lambda services: ReasoningFlowRecorder(Broken("start")),
    )
    assert main(["eval", "run", str(CASES)]) == 1
    captured = capsys.readouterr()
    rows = [line.split() for line in captured.out.splitlines()[1:5]]
    assert [r[6] for r in rows] == ["pass", "FAIL", "FAIL", "pass"] and {r[8] for r in rows} == {"-"}
    assert captured.out.splitlines()[-1] == "4 of 4 flows not recorded: recording failed"
    assert any("recording failed" in r.getMessage() for r in caplog.records)
    assert flows(cli) == []


def test_eval_run_of_a_bad_line_exits_2_naming_it_and_runs_nothing(
    cli: Services, scripted_openai: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(CASES.read_text() + '{"case_id": "x", "question": "Why?", "expected": []}\n')
    assert main(["eval", "run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"flowledger: error: {bad} line 6: expected: Extra inputs are not permitted\n"
    assert flows(cli) == [] and scripted_openai.requests == []


def test_eval_run_with_capture_off_prints_the_same_verdicts_and_says_nothing_was_recorded(
    cli: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    flags(cli, reasoning_flow_capture_enabled=False)
    assert main(["eval", "run", str(CASES)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[6] for line in out[1:5]] == ["pass", "FAIL", "FAIL", "pass"]
    assert out[-1] == "flows not recorded: REASONING_FLOW_CAPTURE_ENABLED is off"
    assert flows(cli) == []


def test_the_example_cases_pass_against_the_demo_documents_with_the_offline_model(
    services: Services, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowledger.local.devserver import seed_demo_documents

    seed_demo_documents(services)  # what `flowledger serve` indexes into a fresh store
    monkeypatch.setattr("flowledger.cli.store.services", lambda data_dir: services)
    assert main(["eval", "run", str(EXAMPLE), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == OFFLINE and report["totals"]["passed"] == len(EXAMPLE.read_text().splitlines())


# ---- flowledger research run / correlate -------------------------------------------------------------------


def test_research_run_prints_the_finding_its_answer_and_its_flow(
    cli: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    question = "Why does the HbA1c trend rise after a dose change?"
    assert main(["research", "run", "--trigger-type", "lab_trend", "--trigger-ref", "lab/hba1c", question]) == 0
    out = capsys.readouterr().out
    assert "outcome      recommendation_delivered\n" in out and "hits         3 documents from 3 queries\n" in out
    flow_id = re.search(r"^flow\s+(fl_\S+)$", out, re.M)
    assert flow_id is not None
    assert [s["step_kind"] for s in steps_of(cli, flow_id.group(1))] == ["retrieval", "llm_prompt", "verdict"]
    assert re.search(r"^  \[doc_\w{16}\] ", out, re.M) and "limitations: Scripted." in out
    assert main(["research", "run", "--trigger-type", "lab_trend", "--trigger-ref", "lab/x", question, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["outcome"] == "recommendation_delivered" and len(body["answer"]["references"]) == 1


def test_research_run_that_gives_up_is_one_line_and_exit_1(cli: Services, capsys: pytest.CaptureFixture[str]) -> None:
    question = "How soon after a dose change does the HbA1c trend rise?"
    assert main(["research", "run", "--trigger-type", "lab_trend", "--trigger-ref", "lab/x", question]) == 1
    captured = capsys.readouterr()
    assert captured.err == "flowledger: error: the researcher gave up: citation_check_failed\n" and captured.out == ""


def test_research_run_without_a_model_is_one_line_and_exit_1(
    cli: Services, scripted_openai: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    scripted_openai.script = [{"status": 500}] * 2  # both attempts of the answer call fail
    assert (
        main(["research", "run", "--trigger-type", "lab_trend", "--trigger-ref", "lab/x", "Why does HbA1c rise?"]) == 1
    )
    assert capsys.readouterr().err == "flowledger: error: the researcher gave up: model_unavailable\n"
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:none"
    flags(cli, openai_base_url=None, openai_api_key=None, openai_api_key_secret_arn=missing)
    for command in (["research", "correlate", "user_question"], ["eval", "run", str(CASES)]):
        assert main(command) == 1
        captured = capsys.readouterr()
        assert captured.err.startswith("flowledger: error: the model is not available"), command
        assert captured.err.count("\n") == 1 and captured.out == ""
    # Only the research run that reached its model left a flow (aborted); neither of the others began.
    assert [(f["trigger_type"], f["flow_state"]) for f in flows(cli)] == [("lab_trend", "aborted")]


def test_research_correlate_leaves_benchmark_flows_out_and_recommends_from_the_real_ones(
    cli: Services, scripted_openai: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "run", str(CASES), "--json"]) == 1
    capsys.readouterr()
    calls = len(scripted_openai.requests)
    assert main(["research", "correlate", "user_question", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    # The evaluation's flows measure the agents, not the family: none counts, so there is nothing to weigh.
    assert (body["recommendation"], body["aggregate"]["flows"]) == ("keep_observing", 0)
    assert len(scripted_openai.requests) == calls  # no model call
    for n in range(4):  # four real research runs that find nothing: closed flows of the family, no model call
        assert main(["research", "run", "--trigger-type", "user_question", "--trigger-ref", f"q/{n}", "zyxw qvut"]) == 0
    capsys.readouterr()
    scripted_openai.script = [{"json": {"recommendation": "research_deeper", "reason_code": "weak_evidence"}}]
    assert main(["research", "correlate", "user_question"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("recommendation  research_deeper (weak_evidence)\n")
    assert (
        "family          user_question: 4 closed flows of the last 7 days, 0 aborted, 4 distinct trigger refs\n" in out
    )
    assert json.loads(scripted_openai.requests[-1]["messages"][-1]["content"])["flows"] == 4
