"""Public text: tool-call ids never survive, whatever their form; lengths are bounded."""

from __future__ import annotations

import pytest

from flowledger.chat.executors import MAX_LIMITATIONS_CHARS, NO_EVIDENCE_ANSWER, ExecutionFailed, verified_answer
from flowledger.chat.public_text import bounded, public_text, scrub_call_ids
from flowledger.ids import new_id

CALL = new_id("call_")


@pytest.mark.parametrize(
    "text",
    [
        f"see {CALL}",
        f"({CALL}).",
        f"{CALL.lower()} said so",
        "per Call_AbC123xyz-9_q",  # a provider's id, capitalised at a sentence start
        f"two: {CALL} and {new_id('call_')}",
    ],
    # Named, not shown: the ids are minted at import, and every xdist worker must collect the same tests.
    ids=["in-prose", "in-brackets", "lower-case", "provider-form", "two-ids"],
)
def test_every_call_id_is_scrubbed(text: str) -> None:
    assert "call_" not in scrub_call_ids(text).lower()


def test_words_merely_containing_call_are_kept() -> None:
    assert scrub_call_ids("recall_policy and call them back") == "recall_policy and call them back"


def test_bounded_cuts_with_an_ellipsis_and_keeps_short_text() -> None:
    assert bounded("short", 10) == "short"
    cut = bounded("x" * 50, 10)
    assert len(cut) == 10 and cut.endswith("…")
    assert public_text(f"  {CALL} " + "y" * 20, 12) == "[tool call]…"


def test_a_document_cited_twice_is_referenced_once() -> None:
    item = {"text": "It checkpoints.", "invocation_id": CALL, "document_ids": ["doc_a", "doc_b", "doc_a"]}
    content = verified_answer(
        {"answer_items": [item, {**item, "document_ids": ["doc_b"]}], "limitations": "l" * 5000},
        CALL,
        {"doc_a": "A", "doc_b": "B"},
    )
    assert [r.document_id for r in content.references] == ["doc_a", "doc_b"]
    assert content.limitations is not None and len(content.limitations) == MAX_LIMITATIONS_CHARS


def test_an_empty_item_list_is_no_evidence_and_a_missing_one_fails_closed() -> None:
    assert verified_answer({"answer_items": [], "limitations": "x"}, CALL, {}) == NO_EVIDENCE_ANSWER
    for data in ({}, {"answer_items": None}, {"answer_items": "none"}):
        with pytest.raises(ExecutionFailed):
            verified_answer(data, CALL, {})
