"""Plain Python values to DynamoDB attribute values and back, without importing boto3.

Numbers keep their written form: an int comes back an int and a float a float (``repr`` round
trips exactly), which the ledger's hashes rely on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def to_attr(value: Any) -> dict[str, Any]:
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int):
        return {"N": str(value)}
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("DynamoDB cannot store NaN or infinity")
        return {"N": repr(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bytes):
        return {"B": value}
    if isinstance(value, Mapping):
        return {"M": {str(k): to_attr(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [to_attr(v) for v in value]}
    raise TypeError(f"cannot store a {type(value).__name__}")


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
    raise ValueError(f"unsupported attribute type {kind}")


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    """An item from a dict; None values are left out (absent attributes keep sparse indexes sparse)."""
    return {k: to_attr(v) for k, v in values.items() if v is not None}


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: from_attr(v) for k, v in item.items()}
