"""The output checks every model reply passes: template tokens of every family refused, loops refused,
ordinary answers (lists, tables, code, numbers) never taken for junk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowledger.chat.public_text import public_text
from flowledger.llm.output_checks import (
    STOP_SEQUENCES,
    TEMPLATE_TOKENS,
    check_model_text,
    checked_reply,
    degenerate_loop,
    template_token,
)
from flowledger.llm.ports import ModelDegenerateOutput, Reply, ToolCall, reason_code

EVERY_TOKEN = [(family, token) for family, tokens in TEMPLATE_TOKENS.items() for token in tokens]
RECORDED = Path(__file__).parents[1] / "fixtures" / "model_junk"
# Answers a model gives that are not junk: they must pass as they are.
ORDINARY = [
    "Hello! How can I help you today?",
    "no, no, no",
    "Sure. Here are the steps:\n1. Check the logs.\n2. Compare max_connections with the last deploy.\n3. Roll back.",
    "| region | total |\n| --- | --- |\n| north | 1,200 |\n| south | 950 |\n| east | 700 |",
    "- payments-api logged DB_POOL_EXHAUSTED at 23:05\n- the deploy at 22:58 halved max_connections\n- roll back",
    "```python\nfor row in rows:\n    total += row.amount\n```",
    "The runbook says: page the on-call engineer, then page the on-call engineer's lead if nobody answers.",
    "Ratings: 5, 5, 4, 5, 3. The average is 4.4.",
    "a < b and c|d > e, and [x] is a list; <b>bold</b> is HTML.",
    "Thanks!\n\nThanks for asking. Anything else?",
]


@pytest.mark.parametrize(("family", "token"), EVERY_TOKEN, ids=[f"{f}-{t}" for f, t in EVERY_TOKEN])
def test_every_familys_template_tokens_are_found_anywhere_in_a_text(family: str, token: str) -> None:
    for text in (f"{token}Hello", f"Hello{token}", f"Hello!\n{token}\nassistant\nHi"):
        assert template_token(text) == token
        with pytest.raises(ModelDegenerateOutput, match="chat-template token"):
            check_model_text(text)


def test_every_stop_sequence_is_a_template_token() -> None:
    assert all(template_token(stop) == stop for stop in STOP_SEQUENCES)


def test_tokens_of_no_listed_family_in_the_shared_shapes_are_found_too() -> None:
    for token in (
        "<|system_prompt|>",
        "<|tool_call|>",
        "<START_OF_TURN>",
        "<\uff5cplace\u2581holder\uff5c>",
        "[AVAILABLE_TOOLS]",
    ):
        assert template_token(f"ok {token} ok") == token


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_answers_pass(text: str) -> None:
    check_model_text(text)
    assert checked_reply(Reply(text=text)) == Reply(text=text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("I am a bot. " * 10, "a phrase of 5 words repeated to the end"),
        ("yes " * 20, "a phrase of 1 words repeated to the end"),
        ("The pool is exhausted.\n" * 3, "a line repeated 3 times"),
        ("Answer: the pool.\nThe pool is small.\nAnswer: the pool.\nThe pool is small.\nAnswer: the pool.\n", "line"),
        (
            " ".join(f"step {n} is to check the pool and the deploy again" for n in range(8)),
            "of its 4-word phrases repeated",
        ),
    ],
    ids=["phrase", "word", "line", "alternating-lines", "mostly-repeated"],
)
def test_loops_are_refused_and_say_which_kind(text: str, why: str) -> None:
    with pytest.raises(ModelDegenerateOutput, match="loop") as refused:
        check_model_text(text)
    assert why in str(refused.value)
    assert degenerate_loop(text) is not None


def test_a_refusal_names_the_junk_never_the_answer() -> None:
    with pytest.raises(ModelDegenerateOutput) as refused:
        check_model_text("Patient Ann Lee takes metformin<|im_end|>")
    assert "Ann" not in str(refused.value) and "metformin" not in str(refused.value)
    assert reason_code(refused.value) == "model_degenerate_output"


def test_an_objects_strings_and_a_tool_calls_arguments_are_checked() -> None:
    with pytest.raises(ModelDegenerateOutput):
        checked_reply(Reply(text="{}", data={"answer_items": [{"text": "Pool<|eot_id|>"}], "limitations": ""}))
    with pytest.raises(ModelDegenerateOutput):
        checked_reply(Reply(data={"limitations": "none " * 20}))
    with pytest.raises(ModelDegenerateOutput):
        checked_reply(Reply(tool_calls=(ToolCall("c1", "query_logs", {"terms": ["<end_of_turn>"]}),)))
    # A tool call's text is the tool's to check for loops: repeated terms are a query, not junk.
    checked_reply(Reply(tool_calls=(ToolCall("c1", "query_logs", {"terms": ["pool"] * 20}),)))


def recorded() -> list[tuple[str, dict[str, str]]]:
    """The recorded real junk (tests/fixtures/model_junk): each file's name and what it holds."""
    return [(path.stem, json.loads(path.read_text())) for path in sorted(RECORDED.glob("*.json"))]


@pytest.mark.parametrize(("name", "sample"), recorded(), ids=[name for name, _ in recorded()])
def test_recorded_real_degenerate_outputs_are_refused(name: str, sample: dict[str, str]) -> None:
    """Real answers of small models served with a template that did not fit them (each file says which)."""
    with pytest.raises(ModelDegenerateOutput):
        check_model_text(sample["content"])


def test_the_recordings_cover_template_tokens_and_loops() -> None:
    samples = [sample["content"] for _, sample in recorded()]
    assert any(template_token(text) for text in samples)
    assert any(template_token(text) is None and degenerate_loop(text) for text in samples)


WORDS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@given(before=WORDS, token=st.sampled_from([token for _, token in EVERY_TOKEN]), after=WORDS)
def test_no_text_holding_a_template_token_passes_the_checks(before: str, token: str, after: str) -> None:
    with pytest.raises(ModelDegenerateOutput):
        checked_reply(Reply(text=before + token + after))


@given(
    parts=st.lists(st.one_of(WORDS, st.sampled_from([token for _, token in EVERY_TOKEN])), max_size=12),
    limit=st.integers(min_value=1, max_value=400),
)
def test_no_published_text_holds_a_template_token(parts: list[str], limit: int) -> None:
    """The last net: whatever reaches ``public_text`` (every answer, limitation and cell a client sees) comes out
    with no template token, even one a cut or a removal would leave behind."""
    assert template_token(public_text("".join(parts), limit)) is None
