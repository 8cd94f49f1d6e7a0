"""Plain Python values to DynamoDB attribute values and back, without importing boto3.

Numbers keep their written form: an int comes back an int and a float a float (``repr`` round
trips exactly), which the ledger's hashes rely on. Nothing the codec writes needs a decimal context,
so none can raise ``Inexact``. DynamoDB itself stores numbers in a normal form (trailing zeros
trimmed), so on AWS a float with an integral value may come back as the equal int.

The codec refuses to write what it could not read back (an empty map key, a number outside
DynamoDB's, see ``storable.py``): a write that fails loudly, once, instead of an item that breaks
every later read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flowledger.store.storable import key_problem, number_problem


def to_attr(value: Any) -> dict[str, Any]:
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        problem = number_problem(value)
        if problem:
            raise ValueError(f"DynamoDB cannot store this number: {problem}")
        return {"N": repr(value) if isinstance(value, float) else str(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bytes):
        return {"B": value}
    if isinstance(value, Mapping):
        return {"M": {_map_key(k): to_attr(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [to_attr(v) for v in value]}
    raise TypeError(f"cannot store a {type(value).__name__}")


def _map_key(key: Any) -> str:
    name = str(key)
    problem = key_problem(name)
    if problem:
        raise ValueError(f"DynamoDB cannot store this map: {problem}")
    return name


def from_attr(attribute: Mapping[str, Any]) -> Any:
    kind, inner = next(iter(attribute.items()))
    if kind == "NULL":
        return None
    if kind == "BOOL":
        return bool(inner)
    if kind == "N":
        return float(inner) if any(c in inner for c in ".eE") else int(inner)
    if kind in ("S", "B"):
        return inner
    if kind == "M":
        return {k: from_attr(v) for k, v in inner.items()}
    if kind == "L":
        return [from_attr(v) for v in inner]
    if kind == "SS":  # a string set (a flow's agents): sorted, so it reads the same every time
        return sorted(inner)
    raise ValueError(f"unsupported attribute type {kind}")


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    """An item from a dict; None values are left out (absent attributes keep sparse indexes sparse)."""
    return {k: to_attr(v) for k, v in values.items() if v is not None}


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: from_attr(v) for k, v in item.items()}
