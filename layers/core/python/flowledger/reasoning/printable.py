"""Recorded text made sendable: control characters written out as visible escapes.

The API refuses a C0 control character (but tab, LF and CR) in any text a body holds (422, see
``api/request_text.py``), and a whole batch of steps with it. Tool outputs hold them all the time:
a log line coloured with ANSI codes starts with ESC (``\\x1b[31m``). So the recorder writes each
one as the six characters ``\\u001b`` before it sends, keys included: the step is kept, the text
still shows where the code was, and a terminal that prints it is not driven by it.
"""

from __future__ import annotations

from typing import Any

from flowledger import control_characters

_CONTROL = control_characters.finder(control_characters.IN_TEXT)  # what the API refuses in text


def escape_controls(value: Any) -> Any:
    """``value`` with every control character in its strings and keys written as ``\\uXXXX``; else unchanged."""
    if isinstance(value, str):
        return _CONTROL.sub(lambda found: f"\\u{ord(found.group()):04x}", value)
    if isinstance(value, dict):
        return {escape_controls(key): escape_controls(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [escape_controls(item) for item in value]
    return value
