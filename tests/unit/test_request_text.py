"""What people mean: each key once, no control characters in text (tab and line breaks in free text only),
and table cells a spreadsheet would run shown with a quote in front."""

from __future__ import annotations

import pytest

from flowledger.api.request_text import (
    ControlCharacter,
    DuplicateKey,
    parse_body,
    query_parameters,
    refuse_control_characters_in_query,
)
from flowledger.tabular.formulas import neutralised


def test_a_key_repeated_in_a_nested_object_is_refused_naming_it() -> None:
    with pytest.raises(DuplicateKey, match='"b"'):
        parse_body('{"a": [{"b": 1, "b": 2}]}')
    assert parse_body('{"a": {"b": 1}, "b": 2}') == {"a": {"b": 1}, "b": 2}  # one per object


def test_a_control_character_is_located_and_free_text_keeps_tab_and_line_breaks() -> None:
    with pytest.raises(ControlCharacter) as refused:
        parse_body('{"steps": [{"summary_text": "ok"}, {"summary_text": "a\\u0007b"}]}')
    assert refused.value.fields[0]["loc"] == ["body", "steps", 1, "summary_text"]
    assert "body.steps[1].summary_text" in refused.value.message and "U+0007" in refused.value.message
    assert parse_body('{"t": "a\\tb\\r\\nc"}') == {"t": "a\tb\r\nc"}


def test_a_query_parameter_may_hold_no_control_character_at_all() -> None:
    event = {"multiValueQueryStringParameters": {"cursor": ["ok", "a\tb"]}, "queryStringParameters": {"cursor": "a\tb"}}
    with pytest.raises(ControlCharacter) as refused:
        refuse_control_characters_in_query(query_parameters(event))
    assert refused.value.fields[0]["loc"] == ["query", "cursor"]
    refuse_control_characters_in_query(query_parameters({"queryStringParameters": {"limit": "5"}}))


@pytest.mark.parametrize("cell", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
def test_a_cell_a_spreadsheet_would_run_is_shown_with_a_quote_in_front(cell: str) -> None:
    assert neutralised(cell) == "'" + cell


def test_any_other_cell_is_shown_as_it_is() -> None:
    assert [neutralised(c) for c in ["north", "", "1=1", " =1", "'=1"]] == ["north", "", "1=1", " =1", "'=1"]
