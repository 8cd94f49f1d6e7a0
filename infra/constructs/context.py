"""Reading CDK context values: as ``cdk.json`` gives them (JSON already), or as ``cdk -c key=value`` does (a string).

Every structured setting (``flowledger:model``, ``apiThrottle``, ``waf``, ``domain`` ...) is read through
these, so a JSON string and an object in ``cdk.json`` mean the same, and a malformed one fails the synth
with a message naming its key.
"""

from __future__ import annotations

import json
from typing import Any

from constructs import Node


def json_context(node: Node, name: str, *, expected: str = "a JSON object") -> Any:
    """The context value ``name``, a string from ``cdk -c`` parsed as JSON; None when unset or empty.

    A string that is no JSON fails the synth: ``{name} must be {expected}``.
    """
    value = node.try_get_context(name)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError(f"{name} must be {expected}") from None
    return value


def context_object(node: Node, name: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The context value ``name`` as an object of ``keys`` only; None when it is not set. A bad value fails
    the synth with a message naming the key."""
    value = json_context(node, name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be an object with any of {', '.join(keys)}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise ValueError(f"{name}: unknown key {unknown[0]!r} (known: {', '.join(keys)})")
    return value


def boolean_context(node: Node, name: str, *, default: bool) -> bool:
    """The switch ``name``: true or false (a bool from cdk.json, a string from ``cdk -c``), ``default`` when
    unset; anything else fails the synth naming the key."""
    value = node.try_get_context(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{name} must be true or false, not {value!r}")
