"""The model report card's turns and scoring: the built-in set covers every capability and label, a user's
file is checked before anything runs, and the verdict follows the pass bar, junk and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowledger.errors import InvalidInput
from flowledger.modelcard.card import PASS_BAR, TurnResult, percentile, score_card
from flowledger.modelcard.run import _judged
from flowledger.modelcard.turns import CAPABILITIES, Turn, builtin_turns, load_turns

ROUTING_LABELS = {"small talk", "knowledge", "diagnosis", "table"}


def test_the_built_in_turns_cover_every_capability_and_routing_label() -> None:
    turns = builtin_turns()
    assert {turn.capability for turn in turns} == set(CAPABILITIES)
    assert {turn.label for turn in turns if turn.capability == "routing"} == ROUTING_LABELS
    assert len({turn.id for turn in turns}) == len(turns)
    table = [turn for turn in turns if turn.capability == "table"]
    assert table[0].select == "demo_table" and [t.follows for t in table[1:]] == [table[0].id, table[1].id]
    assert load_turns([]) == turns


def write(tmp_path: Path, turns: list[dict[str, object]], **top: object) -> Path:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"version": 1, "turns": turns, **top}))
    return path


def test_a_users_turns_run_after_the_built_in_ones(tmp_path: Path) -> None:
    mine = {"id": "my-greeting", "capability": "routing", "label": "small talk", "query": "hey"}
    mine["intent"] = "SYSTEM_CHAT"
    turns = load_turns([write(tmp_path, [mine])])
    assert turns[-1].id == "my-greeting" and turns[:-1] == builtin_turns()


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ([{"id": "x", "capability": "routing", "query": "hi"}], "names the intent"),
        ([{"id": "x", "capability": "knowledge", "query": "hi", "cancel": True}], "cancellation turns"),
        ([{"id": "x", "capability": "cooking", "query": "hi"}], "turns.0.capability"),
        ([{"id": "x", "capability": "knowledge", "query": ""}], "turns.0.query"),
        ([{"id": "x", "capability": "knowledge", "query": "hi", "extra": 1}], "turns.0.extra"),
        ([{"id": "Bad Id", "capability": "knowledge", "query": "hi"}], "turns.0.id"),
        ([{"id": "small-talk-hello", "capability": "knowledge", "query": "hi"}], "given twice"),
        ([{"id": "x", "capability": "table", "query": "hi", "follows": "nowhere"}], "follows nowhere"),
        ([], "turns"),
    ],
    ids=["no-intent", "cancel-elsewhere", "capability", "empty-query", "unknown-field", "id", "twice", "follows", "no"],
)
def test_a_bad_turn_file_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, turns: list[dict[str, object]], message: str
) -> None:
    path = write(tmp_path, turns)
    with pytest.raises(InvalidInput, match=message) as refused:
        load_turns([path])
    if message not in ("given twice", "follows nowhere"):
        assert str(path) in str(refused.value)


def test_a_turn_file_that_is_no_json_or_not_there_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(InvalidInput, match="not JSON"):
        load_turns([broken])
    with pytest.raises(InvalidInput, match="cannot be read"):
        load_turns([tmp_path / "missing.json"])
    with pytest.raises(InvalidInput, match="version"):
        load_turns([write(tmp_path, [{"id": "x", "capability": "knowledge", "query": "q"}], version=2)])


def result(capability: str, passed: bool = True, **fields: object) -> TurnResult:
    return TurnResult(f"{capability}-{id(fields)}", capability, passed, "SUCCESS", **fields)  # type: ignore[arg-type]


def test_a_capability_is_served_at_the_pass_bar_with_no_junk_and_no_refusal() -> None:
    at_bar = [result("knowledge")] * 4 + [result("knowledge", passed=False)]
    below = [result("diagnosis")] * 3 + [result("diagnosis", passed=False)] * 2
    junk = [result("table")] * 9 + [result("table", junk=True)]
    refused = [result("cancellation", refused=True)]
    card = score_card("m", "http://x/v1", at_bar + below + junk + refused)
    assert 4 / 5 >= PASS_BAR > 3 / 5
    # Below the bar, junk in one turn of ten, or one refusal: each costs its capability the verdict.
    assert card.served == ["knowledge"]
    rows = {score.capability: score for score in card.scores}
    assert (rows["table"].junk, rows["table"].junk_rate, rows["cancellation"].refusals) == (1, 0.1, 1)
    assert "this model can serve: knowledge" in card.lines()[-1]


def test_latency_tokens_and_routing_by_label_are_summed_per_capability() -> None:
    routed = [
        result("routing", seconds=1.0, tokens=10, label="small talk"),
        result("routing", passed=False, seconds=2.0, tokens=30, label="small talk", why="routed to DIAGNOSIS"),
        result("routing", seconds=9.0, tokens=20, label="table"),
    ]
    card = score_card("m", "offline", routed)
    (score,) = card.scores
    assert (score.p50_seconds, score.p95_seconds, score.tokens_per_turn) == (2.0, 9.0, 20.0)
    assert card.routing_by_label == {"small talk": (1, 2), "table": (1, 1)}
    assert any("routed to DIAGNOSIS" in line for line in card.lines())
    assert card.as_dict()["routing_by_label"]["small talk"] == {"right": 1, "asked": 2}


def test_percentiles_are_nearest_rank() -> None:
    values = [float(n) for n in range(1, 21)]
    assert (percentile(values, 50), percentile(values, 95), percentile([], 95)) == (10.0, 19.0, 0.0)


def _turn(turn_id: str) -> Turn:
    return next(t for t in builtin_turns() if t.id == turn_id)


def _outcome(text: str, **content: object) -> dict[str, object]:
    return {"status": "SUCCESS", "intent": "KNOWLEDGE_QUERY", "content": {"text": text, **content}}


@pytest.mark.parametrize(
    ("content", "passed"),
    [
        ({}, False),  # small talk about the table: no table was read
        ({"tables": [{"document_id": "dc_1", "columns": ["month"], "rows": [["2026-01"]]}]}, True),
        ({"source_context": {"decision": "history", "basis": "history", "engines": []}}, True),  # from the turn before
        ({"source_context": {"decision": "narrative", "basis": "selected", "engines": ["narrative"]}}, False),
    ],
)
def test_a_table_turn_passes_only_on_an_answer_that_read_the_table(content: dict[str, object], passed: bool) -> None:
    result = _judged(_turn("table-by-region"), _outcome("North leads.", **content), {}, 1.0)
    assert result.passed is passed, result.why


def test_a_published_template_token_or_loop_is_counted_apart_from_refused_junk() -> None:
    leaked = _judged(_turn("knowledge-answer-paging"), _outcome("Page them.<|im_end|>", references=[1]), {}, 1.0)
    refused = _judged(_turn("small-talk-hello"), _outcome("Hi!"), {"reason_code": "model_degenerate_output"}, 1.0)
    assert (leaked.passed, leaked.junk, leaked.published_junk) == (False, True, True)
    assert (refused.junk, refused.published_junk) == (True, False)
    card = score_card("m", "offline", [leaked, refused])
    assert card.published_junk == 1 and card.as_dict()["published_junk"] == 1
    assert "answers published with a template token or a loop: 1" in card.lines()
