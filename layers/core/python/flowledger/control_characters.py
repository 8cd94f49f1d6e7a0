"""The control characters no text Flowledger accepts may hold, in the three forms that need them.

C0 controls are refused in request text (the API's screening, 422), stated as JSON Schema patterns in
the OpenAPI document, and escaped by the recorder before it sends tool output. One list of ranges
here keeps the three the same set: text may hold tab, LF and CR; a query parameter holds none.
"""

from __future__ import annotations

import re

# Inclusive code point ranges.
IN_TEXT = ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F))  # C0 but tab, LF and CR
IN_PARAMETERS = ((0x00, 0x1F),)


def _class_body(ranges: tuple[tuple[int, int], ...]) -> str:
    # \uXXXX escapes mean the same in Python's re and in ECMA-262, JSON Schema's regex dialect.
    return "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in ranges)


def finder(ranges: tuple[tuple[int, int], ...]) -> re.Pattern[str]:
    """A regex that finds any character of ``ranges``."""
    return re.compile(f"[{_class_body(ranges)}]")


def schema_pattern(ranges: tuple[tuple[int, int], ...]) -> str:
    """A JSON Schema ``pattern`` a string matches only when it holds none of ``ranges``."""
    return f"^[^{_class_body(ranges)}]*$"
