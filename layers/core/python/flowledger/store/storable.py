"""Whether a JSON value can be stored in DynamoDB and read back exactly, and if not, where.

The rules are DynamoDB's own (Amazon DynamoDB Developer Guide):

- *Supported data types and naming rules* (``HowItWorks.NamingRulesDataTypes``): an attribute
  name, which is what a map key is, has at least one character and is under 64 KB; a number has
  at most 38 digits of precision and is zero or of magnitude 1E-130 to
  9.9999999999999999999999999999999999999E+125; strings are UTF-8.
- *Constraints*, attributes (``Constraints#limits-attributes``): attributes nest 32 levels deep,
  the top-level attribute being the first, so one attribute's value holds at most 31 levels of
  maps and lists (measured against DynamoDB: 31 nested maps are stored, 32 are refused).
- *Item sizes and formats* (``CapacityUnitCalculations``): how the 400 KB of an item are counted.

Stricter than DynamoDB in one place, on purpose: the codec (``items.py``) writes an integer digit
for digit, so one of more than 38 digits is refused even where DynamoDB could trim its trailing
zeros; boto3's decimal context, which moto and any boto3 reader use, cannot read it back. NaN and
infinity are not JSON and DynamoDB has no number for them. Floats are refused outside the range,
not rounded into it: a stored value is the value sent, or nothing is stored.

Pure: no I/O, so checking a payload costs no request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

MAX_DIGITS = 38
MIN_MAGNITUDE = Decimal("1E-130")
MAX_MAGNITUDE = Decimal("9.9999999999999999999999999999999999999E+125")
ATTRIBUTE_LEVELS = 31  # maps and lists inside one attribute, itself included
MAX_NAME_BYTES = 64 * 1024  # a name must be under this
MAX_ITEM_BYTES = 400 * 1024

Path = tuple[str | int, ...]
T = TypeVar("T")


@dataclass(frozen=True)
class Unstorable:
    """Where a value breaks a rule, and which rule; never the value itself (it may be PHI)."""

    path: Path
    reason: str


class _TooLarge(Exception):
    pass


def number_problem(number: int | float) -> str | None:
    """Why DynamoDB cannot hold ``number`` exactly as the codec writes it, or None."""
    if isinstance(number, float):
        if not math.isfinite(number):
            return "NaN and infinity cannot be stored"
        # repr is what the codec sends: at most 17 significant digits, so only the range can fail.
        magnitude = Decimal(repr(number)).copy_abs()
        if magnitude and not MIN_MAGNITUDE <= magnitude <= MAX_MAGNITUDE:
            return "a number must be zero or of magnitude 1E-130 to 9.99...E+125"
        return None
    if abs(number) >= 10**MAX_DIGITS:
        return f"an integer has at most {MAX_DIGITS} digits"
    return None


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot name a map entry in DynamoDB, or None."""
    if not isinstance(key, str):
        return "map keys must be strings"
    if not key:
        return "map keys must not be empty"
    encoded = _utf8(key)
    if encoded is None:
        return "map keys must be valid Unicode (no lone surrogates)"
    if len(encoded) >= MAX_NAME_BYTES:
        return "map keys must be under 64 KB"
    return None


def find_unstorable(
    value: Any, *, levels: int = ATTRIBUTE_LEVELS, max_bytes: int = MAX_ITEM_BYTES
) -> Unstorable | None:
    """The first part of ``value`` (depth first, in order) DynamoDB could not hold exactly, or None.

    ``value`` is one attribute's value: it may nest ``levels`` maps and lists, itself included,
    and weigh ``max_bytes`` as DynamoDB counts an item's size (a too-large value is reported at
    the root path).
    """
    walk = _Walk(levels, max_bytes)
    try:
        return walk.visit(value, (), 0)
    except _TooLarge:
        return Unstorable((), f"larger than {max_bytes:,} bytes as DynamoDB counts an item")


def require_storable(value: T) -> T:
    """A pydantic after-validator: ``value`` unchanged, or a ``not_storable`` error at the offending path."""
    problem = find_unstorable(value)
    if problem is None:
        return value
    raise refusal("not_storable", problem.reason, problem.path)


def refusal(code: str, reason: str, path: Path) -> ValidationError:
    """A validation error at ``path`` inside the field being validated (pydantic prefixes the field's location)."""
    # input=None: the error is echoed in logs and responses, and the value may hold PHI.
    details = InitErrorDetails(type=PydanticCustomError(code, reason), loc=path, input=None)
    return ValidationError.from_exception_data(code, [details])


class _Walk:
    def __init__(self, levels: int, max_bytes: int) -> None:
        self._levels = levels
        self._budget = max_bytes

    def _spend(self, size: int) -> None:
        self._budget -= size
        if self._budget < 0:
            raise _TooLarge

    def visit(self, value: Any, path: Path, depth: int) -> Unstorable | None:
        if value is None or isinstance(value, bool):
            self._spend(1)
            return None
        if isinstance(value, int | float):
            problem = number_problem(value)
            if problem:
                return Unstorable(path, problem)
            digits = len((repr(value) if isinstance(value, float) else str(value)).lstrip("-"))
            self._spend(digits // 2 + 2)
            return None
        if isinstance(value, str):
            encoded = _utf8(value)
            if encoded is None:
                return Unstorable(path, "text must be valid Unicode (no lone surrogates)")
            self._spend(len(encoded))
            return None
        if isinstance(value, dict | list):
            if depth + 1 > self._levels:
                return Unstorable(path, f"nested deeper than {self._levels} levels of maps and lists")
            self._spend(3 + len(value))
            return self._entries(value, path, depth + 1)
        return Unstorable(path, f"a {type(value).__name__} is not a JSON value")

    def _entries(self, container: dict[Any, Any] | list[Any], path: Path, depth: int) -> Unstorable | None:
        pairs = container.items() if isinstance(container, dict) else enumerate(container)
        for key, element in pairs:
            if isinstance(container, dict):
                problem = key_problem(key)
                if problem:
                    return Unstorable((*path, key if isinstance(key, str) else repr(key)), problem)
                self._spend(len(str(key).encode()))
            found = self.visit(element, (*path, key), depth)
            if found:
                return found
        return None


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None
