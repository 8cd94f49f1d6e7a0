from __future__ import annotations

import json

import pytest

from flowledger.chat.previous_turn import MAX_DOCUMENTS, MAX_FIELD_CHARS, previous_turn_from

VALID = {
    "query": "why is checkout failing?",
    "conclusion": "The payment service times out.",
    "scope": "checkout",
    "limitations": "Logs only.",
    "documents": [{"document_id": "doc_1", "title": "Runbook"}],
}


def test_last_safe_diagnosis_exists() -> None:
    turn = previous_turn_from(json.dumps(VALID))
    assert turn is not None
    assert (turn.query, turn.conclusion, turn.scope, turn.limitations) == (
        VALID["query"],
        VALID["conclusion"],
        VALID["scope"],
        VALID["limitations"],
    )
    assert [d.document_id for d in turn.documents] == ["doc_1"]


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "{not json",
        "[]",
        json.dumps({**VALID, "conclusion": "   "}),
        json.dumps({**VALID, "scope": ""}),
        json.dumps({k: v for k, v in VALID.items() if k != "query"}),
        json.dumps({**VALID, "tool_call_id": "call_1"}),  # a published result never carries tool ids
    ],
)
def test_published_result_is_corrupt(raw: str | None) -> None:
    assert previous_turn_from(raw) is None


def test_fields_and_documents_are_bounded_deterministically() -> None:
    long = {
        **VALID,
        "conclusion": "x" * 5000,
        "documents": [{"document_id": f"doc_{n}", "title": "t"} for n in range(20)],
    }
    first, second = previous_turn_from(json.dumps(long)), previous_turn_from(json.dumps(long))
    assert first == second and first is not None
    assert len(first.conclusion) == MAX_FIELD_CHARS and len(first.documents) == MAX_DOCUMENTS
