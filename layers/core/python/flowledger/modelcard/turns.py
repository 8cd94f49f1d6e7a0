"""The report card's turns: a fixed, versioned set shipped with the package, and any a user adds.

A turn file is JSON: ``{"version": 1, "turns": [...]}``. Each turn names its capability and what passing
means for it; ``select`` picks the demo table, ``follows`` continues an earlier turn's session, ``cancel``
cancels the turn as soon as it starts.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from flowledger.chat.models import MAX_QUERY_CHARS, Intent
from flowledger.errors import InvalidInput

VERSION = 1
CAPABILITIES = ("routing", "knowledge", "diagnosis", "table", "cancellation")
Capability = Literal["routing", "knowledge", "diagnosis", "table", "cancellation"]
MAX_TURNS = 200
TURN_ID = r"^[a-z0-9][a-z0-9-]{0,62}$"


class Turn(BaseModel):
    """One turn of the card and what it must do to pass."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=TURN_ID)
    capability: Capability
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    label: str | None = Field(None, max_length=40, description="what a routing question is (small talk, table...)")
    intent: Intent | None = Field(None, description="the intent the router must choose")
    references: bool = Field(False, description="the answer must cite at least one returned document")
    select: Literal["demo_table"] | None = None
    follows: str | None = Field(None, pattern=TURN_ID, description="the turn whose session this one continues")
    cancel: bool = False

    @model_validator(mode="after")
    def _what_passing_means(self) -> Turn:
        if self.capability == "routing" and self.intent is None:
            raise ValueError("a routing turn names the intent it must be routed to")
        if self.cancel != (self.capability == "cancellation"):
            raise ValueError("cancel is set on the cancellation turns and only on them")
        return self


class TurnSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    about: str = ""
    turns: list[Turn] = Field(min_length=1, max_length=MAX_TURNS)


def builtin_turns() -> list[Turn]:
    """The package's own turns, version :data:`VERSION`."""
    text = resources.files("flowledger.modelcard").joinpath("turns", f"v{VERSION}.json").read_text()
    return _parsed(text, f"the built-in turns v{VERSION}")


def load_turns(extra: list[Path]) -> list[Turn]:
    """The built-in turns and those of each file in ``extra``; ids are unique and every ``follows`` comes first."""
    turns = builtin_turns()
    for path in extra:
        try:
            text = path.read_text()
        except OSError as exc:
            raise InvalidInput(f"{path}: cannot be read ({exc.strerror or exc})") from None
        turns += _parsed(text, str(path))
    seen: set[str] = set()
    for turn in turns:
        if turn.id in seen:
            raise InvalidInput(f"turn {turn.id} is given twice: each turn needs an id of its own")
        if turn.follows is not None and turn.follows not in seen:
            raise InvalidInput(f"turn {turn.id} follows {turn.follows}, which no earlier turn is")
        seen.add(turn.id)
    if len(turns) > MAX_TURNS:
        raise InvalidInput(f"{len(turns)} turns; a card runs at most {MAX_TURNS}")
    return turns


def _parsed(text: str, where: str) -> list[Turn]:
    try:
        return TurnSet.model_validate(json.loads(text)).turns
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(part) for part in first["loc"])
        raise InvalidInput(f"{where}: {place}: {first['msg']}") from None
