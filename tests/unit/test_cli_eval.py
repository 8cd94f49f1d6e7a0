"""The evaluation's cases file and its verdict rules, and the research CLI's refusals: everything the
console checks before it reaches a store or a model (the network is off here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.research.evaluation import (
    MAX_CASES,
    MAX_LINE_CHARS,
    Case,
    CaseResult,
    CasesInvalid,
    judge,
    outcome_for,
    parse_cases,
    totals_of,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "eval" / "cases.jsonl"


def line(**fields: Any) -> str:
    return json.dumps({"case_id": "c1", "question": "Why does the trend rise?", **fields})


def test_the_fixture_parses_in_file_order_with_its_defaults() -> None:
    cases = parse_cases(FIXTURE.read_bytes())
    assert [c.case_id for c in cases] == ["strong-trend", "gives-up", "expects-the-canteen", "nothing-on-trains"]
    assert cases[1].expected_outcome == "recommendation_delivered" and cases[1].expected_document_ids == []
    assert cases[3].expected_outcome == "insufficient_evidence"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("{not json", "not JSON (Expecting property name enclosed in double quotes at column 2)"),
        ('["c1", "Why?"]', "a case is a JSON object"),
        (line(expected="x"), "expected: Extra inputs are not permitted"),
        (line(case_id="has space"), "case_id: String should match pattern '^[A-Za-z0-9_.-]{1,64}$'"),
        (line(case_id="x" * 65), "case_id: String should match pattern '^[A-Za-z0-9_.-]{1,64}$'"),
        (line(case_id=7), "case_id: Input should be a valid string"),
        (line(question=""), "question: String should have at least 1 character"),
        (line(question="   "), "question: the question is blank"),
        (line(question="x" * 2001), "question: String should have at most 2000 characters"),
        (line(expected_outcome="claim_created"), "expected_outcome: Input should be 'recommendation_delivered' or"),
        (line(expected_document_ids="doc_1"), "expected_document_ids: Input should be a valid list"),
        (line(expected_document_ids=["doc 1"]), "expected_document_ids.0: String should match pattern"),
        (line(expected_document_ids=[f"doc_{i}" for i in range(21)]), "expected_document_ids: List should have"),
        (json.dumps({"question": "Why?"}), "case_id: Field required"),
        ("x" * (MAX_LINE_CHARS + 1), f"longer than {MAX_LINE_CHARS} characters"),
    ],
)
def test_a_bad_line_is_refused_naming_its_number(bad: str, reason: str) -> None:
    data = f"{line()}\n\n{bad}\n{line(case_id='c3')}\n".encode()
    with pytest.raises(CasesInvalid) as refused:
        parse_cases(data)
    assert refused.value.line == 3  # blank lines count: the number is the editor's
    assert refused.value.reason.startswith(reason), refused.value.reason


def refusal(data: bytes) -> str:
    with pytest.raises(CasesInvalid) as refused:
        parse_cases(data)
    return refused.value.message


def test_repeated_ids_too_many_cases_bad_bytes_and_an_empty_file_are_refused() -> None:
    assert refusal(f"{line()}\n{line()}\n".encode()) == "line 2: case_id 'c1' repeats line 1"
    many = "\n".join(line(case_id=f"c{i}") for i in range(MAX_CASES + 1)).encode()
    assert refusal(many) == f"line {MAX_CASES + 1}: more than {MAX_CASES} cases in one file"
    assert len(parse_cases(many.rsplit(b"\n", 1)[0])) == MAX_CASES
    assert refusal(line().encode() + b"\n\xff\xfe\n") == "line 2: not UTF-8"
    assert refusal(b"\n  \n") == "line 1: the file holds no cases"


@pytest.mark.parametrize(
    ("hits", "k", "cited", "outcome"),
    [
        (3, 0.6, 1, "recommendation_delivered"),
        (3, 0.5999, 1, "insufficient_evidence"),
        (0, 0.9, 1, "insufficient_evidence"),
        (3, 1.0, 0, "insufficient_evidence"),
    ],
)
def test_the_outcome_is_the_researchers_weak_rule(hits: int, k: float, cited: int, outcome: str) -> None:
    assert outcome_for(hits, k, cited) == outcome


def test_a_case_passes_only_on_its_outcome_its_provenance_and_every_expected_document() -> None:
    case = Case(case_id="c", question="q", expected_document_ids=["a", "b", "a"])
    assert judge(case, "recommendation_delivered", 2, 0) is None  # a repeated id is one expectation
    assert judge(case, "recommendation_delivered", 1, 0) == "expected_documents_missing"
    assert judge(case, "insufficient_evidence", 2, 0) == "outcome_mismatch"
    assert judge(case, "recommendation_delivered", 2, 1) == "citation_outside_evidence"
    weak = Case(case_id="w", question="q", expected_outcome="insufficient_evidence")
    assert judge(weak, "insufficient_evidence", None, 0) is None
    assert judge(weak, "recommendation_delivered", None, 0) == "outcome_mismatch"


def test_totals_count_gave_up_as_failed_and_average_every_case() -> None:
    def result(outcome: Any, k: float, passed: bool) -> CaseResult:
        return CaseResult(
            case_id="c",
            outcome=outcome,
            composite_k=k,
            hits=0,
            cited=0,
            expected=0,
            expected_found=None,
            passed=passed,
            reason=None,
            flow_id=None,
        )

    totals = totals_of([result("recommendation_delivered", 0.9, True), result("gave_up", 0.3, False)])
    assert (totals.cases, totals.passed, totals.failed, totals.gave_up, totals.mean_composite_k) == (2, 1, 1, 1, 0.6)
    assert totals_of([]).mean_composite_k == 0.0


# ---- the CLI refuses before it reaches a store ------------------------------------------------------------


@pytest.fixture
def no_store(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(data_dir: str | None) -> Any:
        raise AssertionError("the store was reached")

    monkeypatch.setattr("flowledger.cli.store.services", refuse)


def test_eval_run_of_a_bad_file_is_one_line_naming_it_and_exit_2(
    no_store: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "cases.jsonl"
    bad.write_text(f"{line()}\n{line(case_id='c2', question='')}\n")
    assert main(["eval", "run", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"flowledger: error: {bad} line 2: question: String should have at least 1 character\n"
    )
    assert main(["eval", "run", str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err == f"flowledger: error: {tmp_path / 'missing.jsonl'}: No such file or directory\n"


def test_eval_run_refuses_a_malformed_run_id_before_reading_anything(
    no_store: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "run", str(FIXTURE), "--run-id", "a/b"]) == 2
    assert capsys.readouterr().err == (
        "flowledger: error: run id 'a/b' must be 1 to 64 letters, digits, '_', '.' or '-'\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["research", "correlate", "User Question"],
        ["research", "run", "--trigger-type", "Lab", "--trigger-ref", "lab/x", "Why?"],
        ["research", "run", "--trigger-type", "lab", "--trigger-ref", "", "Why?"],
        ["research", "run", "--trigger-type", "lab", "--trigger-ref", "lab/x", "x" * 2001],
    ],
)
def test_research_commands_refuse_malformed_arguments_as_usage_errors(
    no_store: None, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_a_file_over_the_size_bound_is_refused_before_any_line_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flowledger.research.evaluation.MAX_FILE_BYTES", 2 * 1024 * 1024)
    assert refusal(b"{" * (2 * 1024 * 1024 + 1)) == "line 1: the file is larger than 2 MB"
