"""DynamoDB's item-returning answers written as JSON directly, not through moto's generic converters.

moto turns each DynamoDB answer into wire-shaped dicts twice over: ``DynamoResult`` first rebuilds the
result's attribute values as plain dicts (decoding binary values to bytes), then the response
serializer walks that dict against the botocore output shape, value by value, to write JSON. For item
reads the two passes were most of the fake's cost: profiled on the admin flow page, 83 % of the
embedded server's time in a 500-step read went to the serializer alone. For the actions below they do
nothing but base64 binary values and drop top-level fields the API does not have, so this writes the
result as it stands with :func:`json.dumps`, each attribute value as ``{type: value}``, doing those two
things as moto does. Anything else it meets (a datetime, an error, an object it does not know) goes the
way moto goes, as do all other actions. ``tests/integration/test_moto_responses.py`` checks both give
the same answer for every attribute type. Installed by the locked server, like :mod:`moto_reads`.
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

import botocore.session
from moto.core.responses import ActionResult, BaseResponse
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.utilities import dynamo_to_dict
from moto.dynamodb.responses import DynamoHandler, DynamoResult

# Answers made only of attribute values, keys, counts and consumed capacity.
FAST_ACTIONS = frozenset(
    {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems", "PutItem", "UpdateItem", "DeleteItem"}
)
_CONTENT_TYPE = "application/x-amz-json-1.0"
_BINARY = frozenset({"B", "BS"})
_INSTALLED = False
_moto_serialized = DynamoHandler.serialized


class _NotPlain(TypeError):
    """A value the direct path does not write (moto will)."""


def _base64(value: Any) -> Any:
    return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value


def _wire(value: Any) -> Any:
    if isinstance(value, DynamoType):
        if value.type in _BINARY:  # moto keeps what the client sent (base64 text) or bytes
            inner = [_base64(v) for v in value.value] if value.type == "BS" else _base64(value.value)
            return {value.type: inner}
        return {value.type: value.value}  # M and L values hold DynamoTypes: json.dumps comes back here
    if isinstance(value, bytes):
        return _base64(value)
    raise _NotPlain(type(value).__name__)


def encode(result: dict[str, Any]) -> str:
    """The JSON body for ``result``: attribute values on the wire, bytes base64; ``_NotPlain`` for others."""
    return json.dumps(result, default=_wire, separators=(",", ":"))


def serialized_by_moto(handler: BaseResponse, action_result: ActionResult) -> Any:
    """The answer as moto itself writes it (its converter, then its serializer)."""
    return _moto_serialized(handler, ActionResult(dynamo_to_dict(action_result.result)))


@functools.cache
def _members(action: str) -> frozenset[str]:
    """The top-level fields of ``action``'s answer (moto keeps some the API does not have; they go)."""
    shape = botocore.session.get_session().get_service_model("dynamodb").operation_model(action).output_shape
    return frozenset(shape.members) if shape is not None else frozenset()


def install() -> None:
    """Patch ``DynamoResult`` (no eager conversion) and ``DynamoHandler.serialized`` (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return

    def keep(self: ActionResult, result: object) -> None:
        ActionResult.__init__(self, result)  # converted only if moto's own path writes it

    def serialized(self: BaseResponse, action_result: ActionResult) -> Any:
        result = action_result.result
        action = self._get_action()
        if isinstance(result, dict) and action in FAST_ACTIONS:
            try:
                body = encode({k: v for k, v in result.items() if k in _members(action)})
            except (TypeError, ValueError):  # _NotPlain among them
                return serialized_by_moto(self, action_result)
            headers = {"Content-Type": _CONTENT_TYPE}
            headers.update(self.response_headers)
            return 200, headers, body
        return serialized_by_moto(self, action_result)

    DynamoResult.__init__ = keep  # type: ignore[method-assign]
    DynamoHandler.serialized = serialized  # type: ignore[method-assign]
    _INSTALLED = True
