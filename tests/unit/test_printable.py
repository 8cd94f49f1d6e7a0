"""Recorded text keeps every character a person sees and loses the control codes the API refuses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flowledger.api.request_text import refuse_control_characters
from flowledger.reasoning.printable import escape_controls

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def test_ansi_codes_are_written_out_and_tab_and_line_ends_kept() -> None:
    assert escape_controls({"log\x07": ["\x1b[31mERROR\x1b[0m\r\n\tnext"]}) == {
        "log\\u0007": ["\\u001b[31mERROR\\u001b[0m\r\n\tnext"]
    }


@given(JSON)
def test_whatever_a_tool_returns_passes_the_api_s_text_screening_once_escaped(value: object) -> None:
    refuse_control_characters(escape_controls(value), ["body"])  # raises ControlCharacter if one is left


@given(JSON)
def test_escaped_text_is_escaped_once_only(value: object) -> None:
    clean = escape_controls(value)
    assert escape_controls(clean) == clean
