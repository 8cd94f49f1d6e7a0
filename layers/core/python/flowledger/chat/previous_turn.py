"""PreviousTurn: the session's last safe, published diagnosis, bounded deterministically.

Only a run with intent DIAGNOSIS, release outcome SUCCESS and a valid published result
qualifies (the sparse index holds nothing else). Corrupt JSON or a blank required field gives
None, and no raw stored value ever reaches a model.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

MAX_FIELD_CHARS = 600
MAX_DOCUMENTS = 5


class SourceDocument(BaseModel):
    model_config = ConfigDict(extra="ignore")

    document_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    title: Annotated[str, StringConstraints(max_length=200)] = ""


class PublishedResult(BaseModel):
    """What a safe diagnosis publishes: no tool ids, raw evidence, draft or guard reasons."""

    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    conclusion: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    scope: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    limitations: str = ""
    documents: list[SourceDocument] = Field(default_factory=list)


class PreviousTurn(BaseModel):
    query: str
    conclusion: str
    scope: str
    limitations: str
    documents: list[SourceDocument]


def _bound(text: str) -> str:
    return text if len(text) <= MAX_FIELD_CHARS else text[: MAX_FIELD_CHARS - 1] + "…"


def previous_turn_from(raw: str | None) -> PreviousTurn | None:
    """The bounded PreviousTurn from a stored published result, or None if absent or unusable."""
    if not raw:
        return None
    try:
        result = PublishedResult.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return None
    return PreviousTurn(
        query=_bound(result.query),
        conclusion=_bound(result.conclusion),
        scope=_bound(result.scope),
        limitations=_bound(result.limitations),
        documents=result.documents[:MAX_DOCUMENTS],
    )
