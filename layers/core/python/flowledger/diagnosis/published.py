"""PublishedResult as it is written: bounded, and free of tool-call ids, raw evidence and guard reasons.

Release builds it from the checked draft; the model validates it when written, so a result that
would carry an id or overflow a cap is never stored. (The read side, ``chat.previous_turn``, bounds
it again before it reaches a model.)
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# Tool-call ids (ours and the model's), run-scoped observation ids, and bare run or session ids.
INTERNAL_ID = re.compile(
    r"(?:run|ses)_[0-9A-Z]{26}(?:/(?:obs|model)-\d+)?"
    r"|\b(?:call|toolu|fc)_[A-Za-z0-9_-]{6,}"
    r"|\b(?:obs|model)-\d+\b"
)

MAX_QUERY_CHARS = 4000
MAX_CONCLUSION_CHARS = 2000
MAX_SCOPE_CHARS = 500
MAX_LIMITATIONS_CHARS = 1000
MAX_DOCUMENTS = 5


def scrub_ids(text: str, known: tuple[str, ...] = ()) -> str:
    """``text`` without internal ids (the patterns, and ``known`` ones such as this run's tool-call ids).

    The brackets and spaces the ids leave behind go too.
    """
    for identifier in sorted(known, key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9_-]){re.escape(identifier)}(?![A-Za-z0-9_-])", "", text)
    scrubbed = INTERNAL_ID.sub("", text)
    scrubbed = re.sub(r"\(\s*(?:[,;]\s*)*\)|\[\s*(?:[,;]\s*)*\]", "", scrubbed)
    return re.sub(r"[ \t]{2,}", " ", re.sub(r"\s+([.,;:])", r"\1", scrubbed)).strip()


class PublishedDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    title: Annotated[str, StringConstraints(max_length=200)] = ""


class PublishedResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUERY_CHARS)]
    conclusion: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_CONCLUSION_CHARS)]
    scope: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_SCOPE_CHARS)]
    limitations: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_LIMITATIONS_CHARS)]
    documents: list[PublishedDocument] = Field(default_factory=list, max_length=MAX_DOCUMENTS)

    @field_validator("conclusion", "scope", "limitations")
    @classmethod
    def _no_internal_ids(cls, value: str) -> str:
        if INTERNAL_ID.search(value):
            raise ValueError("a published result must not carry tool-call or observation ids")
        return value
