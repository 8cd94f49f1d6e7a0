"""`flowledger flows lint` and `flowledger flows signature-check` through the console script's main()."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from flowledger.cli import build_parser, main

FLOWS = Path(__file__).resolve().parents[1] / "fixtures" / "flows"
CLEAN = str(FLOWS / "sample-flows-clean.jsonl")
LINT = str(FLOWS / "lint-one-rule-each.jsonl")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_lint_passes_the_clean_sample_and_fails_on_a_critical_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "flows", "lint", CLEAN) == (0, "9 flows: 0 critical, 0 warnings: PASS\n", "")
    status, out, _ = run(capsys, "flows", "lint", LINT)
    assert status == 1
    assert out.splitlines()[0].startswith("critical  line 1  fl_")
    assert out.splitlines()[-1] == "7 flows: 3 critical, 4 warnings: FAIL"


def test_lint_json_and_a_warnings_only_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, _ = run(capsys, "flows", "lint", LINT, "--json")
    body = json.loads(out)
    assert status == 1 and set(body) == {"verdict", "flows", "critical", "warnings", "findings"}
    assert body["findings"][2] == {
        "line": 3,
        "flow_id": body["findings"][2]["flow_id"],
        "rule": "no_model_call_ref",
        "severity": "critical",
        "detail": "1 model-call step(s) (llm_prompt at step 2) and no llm_call_log_ref on any step",
    }
    warnings_only = tmp_path / "warned.jsonl"
    warnings_only.write_text("".join(Path(LINT).read_text().splitlines(keepends=True)[3:]))
    status, out, _ = run(capsys, "flows", "lint", str(warnings_only), "--json")
    assert (status, json.loads(out)["verdict"], json.loads(out)["warnings"]) == (0, "PASS-WITH-NOTES", 4)


def test_an_unreadable_file_or_a_bad_line_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.jsonl"
    assert run(capsys, "flows", "lint", str(missing)) == (
        2,
        "",
        f"flowledger: error: {missing}: No such file or directory\n",
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text(Path(CLEAN).read_text().splitlines()[0] + '\n{"flow": {}, "steps": []}\n')
    for argv in (["flows", "lint", str(bad)], ["flows", "signature-check", "--input", str(bad)]):
        status, out, err = run(capsys, *argv)
        assert (status, out) == (2, "")
        assert err == f"flowledger: error: {bad} line 2: flow.flow_id: Field required\n"


def test_signature_check_passes_the_clean_sample_with_one_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "flows", "signature-check", "--input", CLEAN)
    assert status == 0
    assert out.splitlines()[0].startswith("skipped         line 9  fl_")
    assert out.splitlines()[-1] == (
        "9 flows: 8 matched, 0 sequence drift, 0 outcome drift, 1 skipped;"
        " drift 0.00% of 8 compared (threshold 0.00%): PASS"
    )
    body = json.loads(run(capsys, "flows", "signature-check", "--input", CLEAN, "--json")[1])
    assert {k: v for k, v in body.items() if k != "findings"} == {
        "passed": True,
        "threshold": 0.0,
        "flows": 9,
        "compared": 8,
        "matched": 8,
        "sequence_drift": 0,
        "outcome_drift": 0,
        "skipped": 1,
        "drift_share": 0.0,
    }
    assert set(body["findings"][0]) == {"line", "flow_id", "trigger_type", "finding", "detail", "signature"}


def test_drift_fails_unless_the_threshold_allows_its_share(capsys: pytest.CaptureFixture[str]) -> None:
    # The lint fixture: 7 user_question flows, 3 of them in no researcher shape (3/7 = 42.9 %).
    status, out, _ = run(capsys, "flows", "signature-check", "--input", LINT)
    assert status == 1 and out.count("sequence_drift") == 3 and out.endswith("(threshold 0.00%): FAIL\n")
    assert run(capsys, "flows", "signature-check", "--input", LINT, "--threshold", "0.42")[0] == 1
    assert run(capsys, "flows", "signature-check", "--input", LINT, "--threshold", "0.43")[0] == 0


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan", "lots"])
def test_a_threshold_outside_0_to_1_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["flows", "signature-check", "--input", CLEAN, "--threshold", value])
    assert stopped.value.code == 2
    assert "--threshold" in capsys.readouterr().err


def test_a_corpus_file_replaces_the_packaged_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({"version": 1, "trigger_types": {}}))
    status, out, _ = run(capsys, "flows", "signature-check", "--input", CLEAN, "--corpus", str(corpus))
    assert status == 0 and "9 skipped" in out
    corpus.write_text('{"version": 1}')
    assert run(capsys, "flows", "signature-check", "--input", CLEAN, "--corpus", str(corpus)) == (
        2,
        "",
        f"flowledger: error: {corpus}: trigger_types: Field required\n",
    )


def test_every_flows_option_has_help() -> None:
    flows = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["flows"]
    actions = next(a for a in flows._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("lint", "signature-check"):
        parser = actions.choices[name]
        assert parser.description
        for action in parser._actions:
            assert action.help, (name, action.dest)
