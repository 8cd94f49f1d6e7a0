"""DynamoDB's answers read faster: attribute values taken from the JSON as they come.

botocore turns every JSON answer into Python by walking the operation's output shape node by node. For
DynamoDB that walk descends into each attribute value (a tagged union: ``{"S": …}``, ``{"M": {…}}``, …)
and costs more than the JSON decoding itself: about half of a 500-step page read in a function. An
attribute value's JSON is already the Python botocore returns, except binary values, which arrive in
base64. So a map of attribute values (an item, a key) and a lone attribute value are converted in one
recursive pass here, decoding only ``B`` and ``BS``; every other shape is parsed by botocore as ever.
"""

from __future__ import annotations

import base64
from typing import Any

from botocore.parsers import JSONParser, ResponseParserFactory

ATTRIBUTE_VALUE = "AttributeValue"


def attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """One attribute value as botocore returns it: binaries decoded, lists and maps converted inside."""
    parsed: dict[str, Any] = {}
    for tag, content in value.items():
        if tag == "M":
            parsed[tag] = {name: attribute_value(inner) for name, inner in content.items()}
        elif tag == "L":
            parsed[tag] = [attribute_value(inner) for inner in content]
        elif tag == "B":
            parsed[tag] = base64.b64decode(content)
        elif tag == "BS":
            parsed[tag] = [base64.b64decode(inner) for inner in content]
        else:  # S, N, SS, NS, BOOL, NULL: their JSON is their Python
            parsed[tag] = content
    return parsed


class AttributeValueParser(JSONParser):  # type: ignore[misc]  # botocore is untyped
    """botocore's JSON parser, with attribute values and maps of them converted in one pass."""

    def _handle_structure(self, shape: Any, value: Any) -> Any:
        if shape.name == ATTRIBUTE_VALUE and isinstance(value, dict):
            return attribute_value(value)
        return super()._handle_structure(shape, value)

    def _handle_map(self, shape: Any, value: Any) -> Any:
        if shape.value.name == ATTRIBUTE_VALUE and isinstance(value, dict):
            return {name: attribute_value(inner) for name, inner in value.items()}
        return super()._handle_map(shape, value)


class DynamoDBParserFactory(ResponseParserFactory):  # type: ignore[misc]  # botocore is untyped
    """The session component a DynamoDB client takes its answer parser from."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "json":
            return AttributeValueParser(**self._defaults)
        return super().create_parser(protocol_name)
