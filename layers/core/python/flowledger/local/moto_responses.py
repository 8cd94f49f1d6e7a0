"""DynamoDB's item-returning answers written as JSON directly, not through moto's generic serializer.

moto builds each DynamoDB answer as a plain dict already shaped like the wire format (``{"S": ...}``,
numbers as strings) and then walks it against the botocore output shape, value by value, to write
JSON. For item reads that walk is most of the fake's cost: profiled on the admin flow page, 83 % of
the embedded server's time in a 500-step read went to it. For the actions below the walk does nothing
but base64 binary values and drop top-level fields the API does not have, so this writes the dict
with :func:`json.dumps`, doing those two things as the serializer does; anything else it meets (a
datetime, an error) goes back to moto's serializer, as do all other actions.
``tests/integration/test_moto_responses.py`` checks both give the same answer for every attribute
type. Installed by the locked server, like :mod:`moto_reads`.
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

import botocore.session
from moto.core.responses import ActionResult, BaseResponse
from moto.dynamodb.responses import DynamoHandler

# Answers made only of attribute values, keys, counts and consumed capacity.
FAST_ACTIONS = frozenset(
    {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems", "PutItem", "UpdateItem", "DeleteItem"}
)
_CONTENT_TYPE = "application/x-amz-json-1.0"
_INSTALLED = False


class _NotPlain(TypeError):
    """A value the direct path does not write (the serializer will)."""


def _binary(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise _NotPlain(type(value).__name__)


def encode(result: dict[str, Any]) -> str:
    """The JSON body for ``result``: binary values base64-encoded; ``_NotPlain`` for anything else."""
    return json.dumps(result, default=_binary, separators=(",", ":"))


@functools.cache
def _members(action: str) -> frozenset[str]:
    """The top-level fields of ``action``'s answer (moto keeps some the API does not have; they go)."""
    shape = botocore.session.get_session().get_service_model("dynamodb").operation_model(action).output_shape
    return frozenset(shape.members) if shape is not None else frozenset()


def install() -> None:
    """Patch ``DynamoHandler.serialized`` (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    original = DynamoHandler.serialized

    def serialized(self: BaseResponse, action_result: ActionResult) -> Any:
        result = action_result.result
        action = self._get_action()
        if isinstance(result, dict) and action in FAST_ACTIONS:
            try:
                body = encode({k: v for k, v in result.items() if k in _members(action)})
            except (TypeError, ValueError):  # _NotPlain among them
                return original(self, action_result)
            headers = {"Content-Type": _CONTENT_TYPE}
            headers.update(self.response_headers)
            return 200, headers, body
        return original(self, action_result)

    DynamoHandler.serialized = serialized  # type: ignore[method-assign]
    _INSTALLED = True
