"""What every text a client may see goes through: tool-call ids and chat-template tokens scrubbed, length
bounded.

Tool-call ids are internal (the knowledge invocation's ``call_`` + ULID from ``flowledger.ids``, or
a provider's ``call_...``); a model may still echo one in its prose, so public text is scrubbed
whatever the model was told.
"""

from __future__ import annotations

import re

from flowledger.llm.output_checks import without_template_tokens

# Any token that starts a word with "call_": ours (call_ + 26 Crockford characters) and providers' ids.
CALL_ID = re.compile(r"\bcall_[A-Za-z0-9][A-Za-z0-9_-]*", re.IGNORECASE)
CALL_ID_PLACEHOLDER = "[tool call]"


def scrub_call_ids(text: str) -> str:
    """``text`` with every tool-call id replaced by a fixed placeholder."""
    return CALL_ID.sub(CALL_ID_PLACEHOLDER, text)


def bounded(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def public_text(text: str, limit: int) -> str:
    """Scrubbed, stripped and bounded: the one way model text becomes public (scrubbing first, so a cut
    can never leave part of an id behind that the pattern would have caught whole).

    A model reply holding a template token is refused before it gets here (``output_checks``); removing any
    that still arrives is the last net, so none is ever shown.
    """
    return bounded(scrub_call_ids(without_template_tokens(text)).strip(), limit)


MAX_PUBLIC_CELL_CHARS = 200


def public_cell(value: str | int | float | bool | None) -> str | int | float | bool | None:
    """A table cell as a client sees it: text scrubbed and bounded like any public text, other values as they are."""
    return public_text(value, MAX_PUBLIC_CELL_CHARS) if isinstance(value, str) else value
