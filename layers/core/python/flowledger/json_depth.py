"""How deep a JSON text nests, found without parsing it: what a body must pass before anything parses it (the
API's screening; the OTLP receiver's JSON), so that 100,000 nested arrays cost one pass, not a RecursionError."""

from __future__ import annotations

import re

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text``, counted without parsing it.

    Strings are cut out first (they may hold brackets), then only brackets are visited: a body
    nested 100,000 deep costs one pass instead of a ``RecursionError`` in the parser.
    """
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest
