"""Input people mean: a body's keys once each, and text without control characters.

JSON allows a key twice (the last one wins) and any character escaped in a string, NUL included;
no person means either, and both pass a schema. So a body is parsed here first, refusing a repeated
key (400, naming it), and every string in it, and every query parameter, is refused when it holds a
C0 control character (422, naming where). Free text may hold tab, line feed and carriage return;
a query parameter is never free text, so it may hold none. Runs after the caller's scope or IAM
check and before the route's schema validation (``screening.py``), for every route.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from flowledger import control_characters
from flowledger.errors import InvalidInput, MalformedBody

_IN_TEXT = control_characters.finder(control_characters.IN_TEXT)
_IN_PARAMETER = control_characters.finder(control_characters.IN_PARAMETERS)
MAX_KEY_SHOWN = 64  # a repeated key is named, cut to this: the schema's names are short, an attacker's need not be


class DuplicateKey(MalformedBody):
    """An object in the body names the same key twice."""

    code = "duplicate_key"


class ControlCharacter(InvalidInput):
    """Text holds a control character; ``fields`` locates it as a schema error would (never its value)."""

    code = "validation_error"

    def __init__(self, loc: list[str | int], character: str) -> None:
        where = _dotted(loc)
        super().__init__(f"{where} holds the control character U+{ord(character):04X}; send text without it")
        self.fields = [{"loc": loc, "type": "control_character", "msg": f"U+{ord(character):04X} is not allowed"}]


def parse_body(text: str) -> Any:
    """The JSON value of ``text``: ``DuplicateKey`` for a repeated key, ``ControlCharacter`` for such text.

    ``ValueError`` when it is no JSON at all (the caller's 400).
    """
    value = json.loads(text, object_pairs_hook=_object)
    refuse_control_characters(value, ["body"])
    return value


def refuse_control_characters(value: Any, loc: list[str | int]) -> None:
    """Raise ``ControlCharacter`` at the first string (or key) under ``value`` that holds one."""
    if isinstance(value, str):
        _check(value, loc, _IN_TEXT)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check(key, loc, _IN_TEXT)
            refuse_control_characters(item, [*loc, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            refuse_control_characters(item, [*loc, index])


def refuse_control_characters_in_query(parameters: Iterable[tuple[str, str]]) -> None:
    """Raise ``ControlCharacter`` for the first query parameter (name or value) holding any C0 character."""
    for name, value in parameters:
        _check(name, ["query"], _IN_PARAMETER)
        _check(value, ["query", name], _IN_PARAMETER)


def query_parameters(event: dict[str, Any]) -> list[tuple[str, str]]:
    """Every query parameter of an API Gateway proxy event, each value of a repeated one too."""
    multi = event.get("multiValueQueryStringParameters") or {}
    single = event.get("queryStringParameters") or {}
    pairs = [(str(k), str(v)) for k, values in multi.items() for v in values or []]
    return pairs + [(str(k), str(v)) for k, v in single.items() if k not in multi]


def _check(text: str, loc: list[str | int], forbidden: re.Pattern[str]) -> None:
    found = forbidden.search(text)
    if found is not None:
        raise ControlCharacter(loc, found.group())


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            shown = key if len(key) <= MAX_KEY_SHOWN else key[:MAX_KEY_SHOWN] + "…"
            raise DuplicateKey(f"the body names the key {json.dumps(shown)} twice in one object; send it once")
        value[key] = item
    return value


def _dotted(loc: list[str | int]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else (f".{part}" if i else part) for i, part in enumerate(loc))
