from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from flowledger.ledger.events import (
    GENESIS_HASH,
    AuditEntry,
    canonical,
    event_hash,
    parse_event_id,
    seal,
)

AT = datetime(2026, 11, 30, 21, 0, 0, 123456, tzinfo=UTC)


def entry(**overrides: object) -> AuditEntry:
    fields: dict[str, object] = {
        "action": "reasoning.flow.started",
        "actor": "user:alice",
        "subject": "flow:f1",
        "refs": {"trace_id": "t-9"},
        "payload": {"steps": 3, "patient_safe": True},
    }
    return AuditEntry.model_validate({**fields, **overrides})


def test_rfc8785_example_values_serialize_canonically() -> None:
    # RFC 8785 section 3.2.2
    source = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical(json.loads(source)) == expected.encode()


def test_rfc8785_sorts_keys_by_utf16_code_units() -> None:
    # RFC 8785 section 3.2.3
    source = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
    order = list(json.loads(canonical(source)))
    assert order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_sealed_event_hash_covers_every_field_but_itself() -> None:
    event = seal(entry(), "chain-004", 7, GENESIS_HASH, AT)
    assert event.event_id == "chain-004.7" and event.at == "2026-11-30T21:00:00.123456Z"
    assert event.hash == event_hash(event.unsealed())
    for field, value in [
        ("actor", "user:mallory"),
        ("seq", 8),
        ("prev_hash", "1" * 64),
        ("at", "x"),
        ("payload", {"steps": 4, "patient_safe": True}),
    ]:
        assert event_hash({**event.unsealed(), field: value}) != event.hash


@pytest.mark.parametrize(
    "payload",
    [
        {"summary": "reviewed metformin 500mg"},  # free text: spaces are not allowed in tokens
        {"note": "x" * 200},
        {"count": 2**60},  # would not survive RFC 8785's IEEE doubles
        {"ratio": 0.5},  # counts, not measurements
        {"Bad-Key": 1},
    ],
)
def test_payload_holds_counts_and_tokens_only(payload: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        entry(payload=payload)


@pytest.mark.parametrize("action", ["started", "Reasoning.flow", "reasoning..x", "reasoning.flow started"])
def test_actions_are_dotted_lowercase_names(action: str) -> None:
    with pytest.raises(ValidationError):
        entry(action=action)


def test_event_ids_round_trip_and_reject_garbage() -> None:
    assert parse_event_id("chain-003.42") == ("chain-003", 42)
    for bad in ("chain-3.42", "chain-003.0", "chain-003", "x"):
        with pytest.raises(ValueError):
            parse_event_id(bad)
