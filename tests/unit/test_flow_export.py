"""`flowledger flows export` without a store: its flags, its output file, the record it builds, the pairing rule."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.cli.flows.export import MAX_LIMIT, outcome_filter, utc_instant
from flowledger.errors import InvalidInput
from flowledger.reasoning.dataset import HIDDEN_SUMMARY, MAX_RECORDS
from flowledger.reasoning.export import OUTCOME_FILTERS, ExportWindow, record_of
from flowledger.reasoning.preference import (
    CLAIM_REVIEW,
    MAX_CONTENT_CHARS,
    Standing,
    answer_of,
    candidate_of,
    label_of,
    pair_of,
)

FLOW = "fl_01KDVDQ4K0S2V8MPKCZJAAZ7CW"
OTHER = "fl_01KDVDQ4K0S2V8MPKCZJAAZ7CX"
STEPS = ("st_01KDVDQ4KASQE86RVFWPN9F9WT", "st_01KDVDQ4KBVJC8V6S55GXQYB8Q", "st_01KDVDQ4KCCQZYDQX85EWY41AK")


def indexed_flow(**changes: Any) -> dict[str, Any]:
    """A flow as the by_closed index projects it."""
    flow = {
        "flow_id": FLOW,
        "closed_shard": "3",
        "closed_at": "2026-01-01T00:01:05.000000Z",
        "trigger_type": "user_question",
        "trigger_ref": "question/why",
        "flow_state": "completed",
        "created_at": "2026-01-01T00:01:00.000000Z",
        "outcome": {"type": "recommendation_delivered", "summary": "Recommended an answer", "confidence": 0.9},
        "patient_safe_summary": True,
        "step_count": 3,
    }
    return {**flow, **changes}


def step(n: int, **changes: Any) -> dict[str, Any]:
    values = {
        "step_id": STEPS[n],
        "step_kind": ("retrieval", "llm_prompt", "verdict")[n],
        "agent": ("researcher", "critic", "researcher")[n],
        "summary_text": f"Step {n} done",
        "created_at": f"2026-01-01T00:01:0{n + 1}.000000Z",
        "parent_step_ids": [STEPS[n - 1]] if n else [],
        "back_refs": {"llm_call_log_ref": "llm-7"} if n == 1 else {},
        "confidence": 0.95,
    }
    return {**values, **changes}


def test_a_record_hides_flagged_summaries_and_keeps_only_booleans_of_back_refs() -> None:
    steps = [step(2), step(0, confidence=1), step(1, summary_text="Dr. Smith reviewed metformin 500mg")]
    flow = indexed_flow(outcome={"type": "no_action", "summary": "Called 555-123-4567", "confidence": 1})

    record = record_of(flow, steps)

    assert [s.step_id for s in record.steps] == list(STEPS)  # creation order, whatever the read order
    hidden = record.steps[1]
    assert (hidden.summary_hidden, hidden.summary_text) == (True, HIDDEN_SUMMARY)
    assert record.steps[0].summary_text == "Step 0 done" and not record.steps[0].summary_hidden
    assert [s.back_refs.llm_call_log_ref for s in record.steps] == [False, True, False]
    assert record.flow.outcome is not None and record.flow.outcome.summary == HIDDEN_SUMMARY
    assert record.flow.agents == ["researcher", "critic"]
    assert record.flow.aggregate_confidence == 0.95
    assert record.steps[0].confidence == 1.0 and isinstance(record.steps[0].confidence, float)


def test_a_flow_whose_steps_were_not_all_read_is_no_record() -> None:
    with pytest.raises(ValueError, match="counts 3 steps"):
        record_of(indexed_flow(), [step(0), step(1)])


@pytest.mark.parametrize(
    ("window", "problem"),
    [
        ({"since": "2026-01-02T00:00:00.000000Z", "until": "2026-01-01T00:00:00.000000Z"}, "before until"),
        ({"since": "2026-01-01T00:00:00.000000Z", "until": "2026-01-01T00:00:00.000000Z"}, "before until"),
        ({"outcome": "won"}, "not one of"),
        ({"min_confidence": 1.5}, "between 0 and 1"),
        ({"min_confidence": float("nan")}, "between 0 and 1"),
        ({"limit": 0}, "between 1"),
        ({"limit": MAX_RECORDS + 1}, "between 1"),
    ],
)
def test_a_window_refuses_what_cannot_be_exported(window: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        ExportWindow(**window)


def test_the_window_flags_read_utc_instants_and_known_outcomes() -> None:
    assert utc_instant("2026-01-01") == "2026-01-01T00:00:00.000000Z"
    assert utc_instant("2026-01-01T08:30:00Z") == "2026-01-01T08:30:00.000000Z"
    assert utc_instant("2026-01-01T08:30:00.25+00:00") == "2026-01-01T08:30:00.250000Z"
    for bad in ("2026-01-01T08:30:00", "2026-01-01T08:30:00+02:00", "yesterday", "2026-13-01"):
        with pytest.raises(argparse.ArgumentTypeError):
            utc_instant(bad)
    assert [outcome_filter(o) for o in OUTCOME_FILTERS] == list(OUTCOME_FILTERS)
    assert MAX_LIMIT == MAX_RECORDS  # one export file is one file `flows lint` reads


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--since", "2026-01-01T08:00:00", "no time zone"),
        ("--until", "soon", "not an ISO-8601"),
        ("--limit", "0", "between 1 and 100,000"),
        ("--limit", "100001", "between 1 and 100,000"),
        ("--min-confidence", "2", "not between 0 and 1"),
        ("--outcome", "won", "not one of"),
        ("--format", "csv", "invalid choice"),
    ],
)
def test_a_bad_flag_is_a_usage_error_before_anything_is_written(
    flag: str, value: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "flows.jsonl"
    with pytest.raises(SystemExit) as stopped:
        main(["flows", "export", flag, value, "--out", str(out), "--data-dir", str(tmp_path / "none")])
    assert stopped.value.code == 2
    assert says in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_since_after_until_is_one_error_line_and_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "flows.jsonl"
    argv = ["flows", "export", "--since", "2026-02-01", "--until", "2026-01-01", "--out", str(out)]
    assert main([*argv, "--data-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flowledger: error: since (2026-02-01T00:00:00.000000Z) must be before until")
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_a_failed_export_leaves_no_file_and_keeps_the_old_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "flows.jsonl"
    out.write_text("the previous export\n")
    unreadable = tmp_path / "data"
    unreadable.mkdir()
    (unreadable / "local.json").write_text("{not json")
    assert main(["flows", "export", "--out", str(out), "--data-dir", str(unreadable), "--quiet"]) == 2
    assert "local.json is unreadable" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "flows.jsonl"]  # no .partial left behind
    assert out.read_text() == "the previous export\n"


def test_an_out_file_in_a_missing_directory_fails_before_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["flows", "export", "--out", str(tmp_path / "no" / "f.jsonl"), "--data-dir", str(tmp_path)]) == 2
    assert "cannot write in" in capsys.readouterr().err


def test_the_claim_review_family_is_the_critics() -> None:
    from flowledger.research.agents.critic import TRIGGER_TYPE

    assert CLAIM_REVIEW == TRIGGER_TYPE


def record(**changes: Any) -> Any:
    return record_of(indexed_flow(**changes), [step(0), step(1), step(2)])


@pytest.mark.parametrize(
    ("flow", "standing", "label"),
    [
        ({"flow_state": "aborted", "abort_reason": "timeout"}, None, ("rejected", "aborted")),
        ({}, Standing(hit_count=2, demoted=False), ("chosen", "pathway_reused")),
        ({}, Standing(hit_count=3, demoted=True), ("rejected", "pathway_demoted")),
        ({}, Standing(hit_count=0, demoted=False), None),  # seeded a pathway nobody reused yet
        ({}, None, None),  # seeded none
        (
            {"trigger_type": CLAIM_REVIEW, "outcome": {"type": "claim_created", "summary": "Accepted"}},
            None,
            ("chosen", "claim_accepted"),
        ),
        (
            {"trigger_type": CLAIM_REVIEW, "outcome": {"type": "no_action", "summary": "Rejected"}},
            None,
            ("rejected", "claim_rejected"),
        ),
        ({"trigger_type": CLAIM_REVIEW, "outcome": {"type": "error", "summary": "Broke"}}, None, None),
    ],
)
def test_the_pairing_rule(flow: dict[str, Any], standing: Standing | None, label: tuple[str, str] | None) -> None:
    assert label_of(record(**flow), standing) == label


def test_a_pair_shares_the_family_prompt_and_keeps_one_type_per_metadata_key() -> None:
    good = candidate_of(record(), "pathway_reused", Standing(1, False))
    bad = candidate_of(
        record(flow_id=OTHER, flow_state="aborted", abort_reason="timeout", outcome=None), "aborted", None
    )
    assert good is not None and bad is not None
    pair = pair_of("user_question", good, bad)
    assert pair.prompt[-1].content == "Trigger type: user_question"
    assert pair.rejected[0].content.endswith("Outcome: aborted (timeout)")
    metadata = pair.metadata.model_dump()
    assert (metadata["rejected_outcome"], metadata["rejected_hit_count"]) == ("", -1)
    assert isinstance(metadata["rejected_confidence"], float)
    assert None not in metadata.values()
    with pytest.raises(ValueError, match="preferred to itself"):
        pair_of("user_question", good, good)


def test_an_answer_holds_only_kinds_agents_visible_summaries_and_the_outcome() -> None:
    answer = answer_of(record())
    assert answer.splitlines() == [
        "1. retrieval by researcher: Step 0 done",
        "2. llm_prompt by critic: Step 1 done",
        "3. verdict by researcher: Step 2 done",
        "Outcome: completed, recommendation_delivered: Recommended an answer",
    ]
    assert "question/why" not in answer


def test_a_flow_too_long_for_a_pair_is_left_out() -> None:
    long = record_of(
        indexed_flow(step_count=40),
        [
            {
                **step(0),
                "step_id": f"st_01KDVDQ4KASQE86RVFWPN9F{n:03d}",
                "summary_text": "x" * 250,
                "parent_step_ids": [],
            }
            for n in range(40)
        ],
    )
    assert len(answer_of(long)) > MAX_CONTENT_CHARS
    assert candidate_of(long, "aborted", None) is None
