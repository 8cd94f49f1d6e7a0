"""DynamoDB answers parsed by the one-pass attribute value reader equal botocore's own parse, for every
kind of attribute value, nested, in every read and write answer that carries items."""

from __future__ import annotations

import json
from typing import Any

import botocore.session
from botocore.parsers import JSONParser
from hypothesis import given
from hypothesis import strategies as st

from flowledger.config import load_settings
from flowledger.store.aws import AwsClients
from flowledger.store.dynamodb_parsing import AttributeValueParser
from tests.attribute_values import text, values

MODEL = botocore.session.get_session().get_service_model("dynamodb")
items = st.dictionaries(text, values, min_size=1, max_size=5)


def parsed(parser: JSONParser, operation: str, body: dict[str, Any]) -> Any:
    response = {"status_code": 200, "headers": {}, "body": json.dumps(body).encode()}
    return parser.parse(response, MODEL.operation_model(operation).output_shape)


@given(listed=st.lists(items, max_size=4), key=items, one=items)
def test_the_one_pass_reader_parses_every_item_answer_as_botocore_does(
    listed: list[dict[str, Any]], key: dict[str, Any], one: dict[str, Any]
) -> None:
    answers = {
        "Query": {"Items": listed, "Count": len(listed), "LastEvaluatedKey": key},
        "Scan": {"Items": listed, "Count": len(listed)},
        "GetItem": {"Item": one},
        "BatchGetItem": {"Responses": {"t": listed}, "UnprocessedKeys": {"t": {"Keys": [key]}}},
        "TransactGetItems": {"Responses": [{"Item": item} for item in listed]},
        "PutItem": {"Attributes": one},
        "UpdateItem": {"Attributes": one},
    }
    for operation, body in answers.items():
        assert parsed(AttributeValueParser(), operation, body) == parsed(JSONParser(), operation, body), operation


def test_the_store_s_dynamodb_client_reads_answers_with_the_one_pass_reader() -> None:
    client = AwsClients(load_settings(aws_endpoint_url="http://127.0.0.1:9"), ("key", "secret")).dynamodb
    factory = client._endpoint._response_parser_factory  # botocore keeps it there; no public accessor
    assert isinstance(factory.create_parser("json"), AttributeValueParser)
