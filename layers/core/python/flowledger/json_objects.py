"""One JSON object read into a strict pydantic model, with one reason when it cannot be: what every file the
CLI reads (a flows export line, a signature corpus, a replay case, an evaluation case) needs.

The caller says where (a line number, a file name) by wrapping :class:`ObjectInvalid`'s reason in its own
error; the reasons read the same everywhere: ``not UTF-8``, ``not JSON (... at column N)``, ``a record is a
JSON object``, ``steps.2.step_kind: ...``.
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


class ObjectInvalid(ValueError):
    """The bytes are not one object the model accepts; ``reason`` says why, and where inside it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_object(raw: bytes, model: type[Model], noun: str) -> Model:
    """``raw`` (UTF-8 JSON holding one object) as ``model``; :class:`ObjectInvalid` naming the first problem."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ObjectInvalid("not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ObjectInvalid(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise ObjectInvalid(f"a {noun} is a JSON object")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or noun
        raise ObjectInvalid(f"{where}: {str(error['msg']).removeprefix('Value error, ')}") from None
