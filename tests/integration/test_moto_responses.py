"""The locked server writes DynamoDB's item answers directly, and they say exactly what moto's serializer says:
every attribute type (binary and binary sets included), counts, keys, paging keys and consumed capacity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from moto.core.responses import BaseResponse
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.responses import DynamoHandler

from flowledger.config import load_settings
from flowledger.local import moto_responses
from flowledger.local.datadir import EMBEDDED_CREDENTIALS
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

pytestmark = pytest.mark.usefixtures("clean_environment")

ITEM = {
    "flow_id": {"S": "fl_a"},
    "step_id": {"S": "st_1"},
    "blob": {"B": b"\x00\xff binary"},
    "blobs": {"BS": [b"x", b"\x01y"]},
    "names": {"SS": ["é", "b\u2028c"]},
    "numbers": {"NS": ["1", "2.50"]},
    "amount": {"N": "1.50"},
    "nested": {"M": {"none": {"NULL": True}, "no": {"BOOL": False}, "list": {"L": [{"S": "x"}, {"N": "3"}]}}},
}
KEY = {"flow_id": {"S": "fl_a"}, "step_id": {"S": "st_1"}}


@pytest.fixture
def db(locked_moto: str) -> tuple[Any, str]:
    services = build_services(
        load_settings(aws_endpoint_url=locked_moto, resource_prefix="answers"), EMBEDDED_CREDENTIALS
    )
    create_table(services.aws, table_spec("steps"))
    return services.aws.dynamodb, services.aws.table_name("steps")


def test_item_answers_match_the_serializer_for_every_attribute_type(
    db: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, table = db
    answers: list[tuple[str, Any, Any]] = []
    direct = DynamoHandler.serialized

    def both(self: BaseResponse, action_result: Any) -> Any:
        answer = direct(self, action_result)
        by_moto = moto_responses.serialized_by_moto(self, action_result)
        answers.append((self._get_action(), json.loads(answer[2]), json.loads(by_moto[2])))
        return answer

    monkeypatch.setattr(DynamoHandler, "serialized", both)
    written_directly: list[str] = []
    encode = moto_responses.encode

    def counted(result: dict[str, Any]) -> str:
        body = encode(result)
        written_directly.append(body)
        return body

    monkeypatch.setattr(moto_responses, "encode", counted)
    client.put_item(TableName=table, Item=ITEM, ReturnConsumedCapacity="TOTAL")
    client.put_item(TableName=table, Item={**ITEM, "step_id": {"S": "st_2"}}, ReturnValues="ALL_OLD")
    read = client.get_item(TableName=table, Key=KEY, ReturnConsumedCapacity="TOTAL")
    client.query(
        TableName=table,
        KeyConditionExpression="flow_id = :f",
        ExpressionAttributeValues={":f": {"S": "fl_a"}},
        Limit=1,
        ReturnConsumedCapacity="INDEXES",
    )
    names = {"#b": "blob", "#l": "list"}
    client.scan(TableName=table, ProjectionExpression="#b, nested.#l", ExpressionAttributeNames=names)
    client.batch_get_item(RequestItems={table: {"Keys": [KEY]}})
    client.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": KEY}}])
    client.update_item(
        TableName=table,
        Key=KEY,
        UpdateExpression="SET extra = :b",
        ExpressionAttributeValues={":b": {"B": b"\x02"}},
        ReturnValues="ALL_NEW",
    )
    client.delete_item(TableName=table, Key=KEY, ReturnValues="ALL_OLD")
    client.describe_table(TableName=table)  # not an item answer: the serializer's own

    actions = [action for action, _, _ in answers]
    assert set(moto_responses.FAST_ACTIONS) <= set(actions)
    for action, written, serialized in answers:
        assert written == serialized, action
    # Every item answer took the direct path (none fell back to moto's serializer).
    assert len(written_directly) == sum(action in moto_responses.FAST_ACTIONS for action in actions)
    assert read["Item"] == ITEM  # and the client reads its binary values back as it wrote them


def test_an_answer_the_direct_path_cannot_write_goes_to_the_serializer() -> None:
    with pytest.raises(TypeError):
        moto_responses.encode({"Item": {"when": object()}})
    binary = {"Item": {"b": {"B": b"\xff"}, "t": DynamoType({"BS": [b"\xff", "/w=="]})}}
    assert json.loads(moto_responses.encode(binary)) == {"Item": {"b": {"B": "/w=="}, "t": {"BS": ["/w==", "/w=="]}}}
