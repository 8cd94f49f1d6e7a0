"""Stored items read through one gate: what cannot be decoded raises ``UndecodableItem`` naming the item.

A route turns that into a 409 that names the item, instead of a 500 on every later call; a job
logs it, counts it as skipped and goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from flowledger.errors import UndecodableItem
from flowledger.store import items

logger = logging.getLogger("flowledger.store")
T = TypeVar("T")

# What reading a malformed item raises: a pydantic ValidationError is a ValueError, so are
# binascii and Unicode errors; a missing or mistyped attribute gives KeyError, TypeError,
# AttributeError, or StopIteration (an attribute value with no type).
DECODE_ERRORS: tuple[type[Exception], ...] = (KeyError, TypeError, ValueError, AttributeError, StopIteration)


def key_of(item: Mapping[str, Any], name: str) -> str:
    """The string key attribute ``name`` of a raw item, or ``?`` when even that is missing."""
    value = item.get(name)
    return str(value["S"]) if isinstance(value, Mapping) and isinstance(value.get("S"), str) else "?"


def undecodable(what: str, item: str, exc: Exception) -> UndecodableItem:
    """The error for stored ``what`` (ids only) that failed with ``exc``; names fields, never values."""
    detail = type(exc).__name__
    if isinstance(exc, ValidationError):
        # The first element of a location is a stored attribute's name (schema, not data).
        fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        detail += f" in {', '.join(fields)}" if fields else ""
    return UndecodableItem(f"the stored {what} cannot be read ({detail}); it needs repair", item)


def decoded(item: Mapping[str, Any], read: Callable[[dict[str, Any]], T], what: str, item_id: str) -> T:
    """``read`` of the item's plain values, or ``UndecodableItem`` for ``what`` (e.g. ``flow fl_...``)."""
    try:
        return read(items.from_item(item))
    except DECODE_ERRORS as exc:
        raise undecodable(what, item_id, exc) from None


class Skips:
    """The items a job could not decode: each logged by its ids, counted, and passed over."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.count = 0

    def note(self, exc: UndecodableItem) -> None:
        self.count += 1
        logger.warning("%s skipped an item: %s", self.job, exc.message, extra={"job": self.job, "item": exc.item})

    def readable(self, raw: Iterable[Mapping[str, Any]], read: Callable[[Any], T]) -> Iterator[T]:
        """``read`` of each item, leaving out (and noting) those it cannot decode."""
        for item in raw:
            try:
                yield read(item)
            except UndecodableItem as exc:
                self.note(exc)
