"""The locked server's partition-narrowed Query answers exactly as moto's own: order, key conditions,
paging, projection and filters, on a table with many partitions; index queries are untouched."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table

from flowledger.config import load_settings
from flowledger.local.datadir import EMBEDDED_CREDENTIALS
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def steps(locked_moto: str) -> tuple[Any, str]:
    services = build_services(
        load_settings(aws_endpoint_url=locked_moto, resource_prefix="reads"), EMBEDDED_CREDENTIALS
    )
    create_table(services.aws, table_spec("steps"))
    table = services.aws.table_name("steps")
    db = services.aws.dynamodb
    for flow in range(20):
        for step in (7, 3, 11, 1, 5):  # written out of key order
            db.put_item(
                TableName=table,
                Item={
                    "flow_id": {"S": f"fl_{flow:02d}"},
                    "step_id": {"S": f"st_{step:02d}"},
                    "kind": {"S": "even" if step % 2 == 0 else "odd"},
                    "n": {"N": str(step)},
                    "nested": {"M": {"a": {"S": f"a{step}"}, "b": {"S": "b"}}},
                },
            )
    return db, table


def query(db: Any, table: str, **extra: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    request = {"TableName": table, **extra}
    while True:
        response = db.query(**request)
        found.extend(response["Items"])
        if "LastEvaluatedKey" not in response:
            return found
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def test_a_partition_query_reads_only_its_partition_in_key_order(
    steps: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, table = steps
    sorted_whole_table = []
    monkeypatch.setattr(
        "moto.dynamodb.models.table.sorted",
        lambda *a, **k: sorted_whole_table.append(1) or sorted(*a, **k),
        raising=False,
    )
    keyed = {"KeyConditionExpression": "flow_id = :f", "ExpressionAttributeValues": {":f": {"S": "fl_07"}}}

    assert [i["step_id"]["S"] for i in query(db, table, **keyed)] == ["st_01", "st_03", "st_05", "st_07", "st_11"]
    assert sorted_whole_table == []  # moto's all_items sorts the whole table; the narrowed read never does
    backwards = query(db, table, **keyed, ScanIndexForward=False, Limit=2)
    assert [i["step_id"]["S"] for i in backwards] == ["st_11", "st_07", "st_05", "st_03", "st_01"]
    ranged = {
        "KeyConditionExpression": "flow_id = :f AND step_id BETWEEN :a AND :b",
        "ExpressionAttributeValues": {":f": {"S": "fl_07"}, ":a": {"S": "st_03"}, ":b": {"S": "st_07"}},
    }
    assert [i["step_id"]["S"] for i in query(db, table, **ranged)] == ["st_03", "st_05", "st_07"]
    projected = query(db, table, **keyed, ProjectionExpression="step_id, nested.a", Limit=3)
    assert projected[0] == {"step_id": {"S": "st_01"}, "nested": {"M": {"a": {"S": "a1"}}}}
    assert len(projected) == 5
    filtered = query(
        db,
        table,
        KeyConditionExpression="flow_id = :f",
        FilterExpression="n > :n",
        ExpressionAttributeValues={":f": {"S": "fl_07"}, ":n": {"N": "4"}},
    )
    assert [i["step_id"]["S"] for i in filtered] == ["st_05", "st_07", "st_11"]
    missing = {"KeyConditionExpression": "flow_id = :f", "ExpressionAttributeValues": {":f": {"S": "fl_99"}}}
    assert query(db, table, **missing) == []


def test_an_index_on_the_tables_partition_key_reads_only_that_partition(
    steps: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, table = steps
    for flow in ("fl_07", "fl_08"):
        for step, at in (("st_01", "3"), ("st_03", "1"), ("st_05", "2")):  # created in another order than keys
            db.update_item(
                TableName=table,
                Key={"flow_id": {"S": flow}, "step_id": {"S": step}},
                UpdateExpression="SET created_at = :at",
                ExpressionAttributeValues={":at": {"S": f"2026-12-02T00:00:0{at}.000000Z"}},
            )
    sorted_whole_table = []
    monkeypatch.setattr(
        "moto.dynamodb.models.table.sorted",
        lambda *a, **k: sorted_whole_table.append(1) or sorted(*a, **k),
        raising=False,
    )
    by_created = {
        "IndexName": "by_created",
        "KeyConditionExpression": "flow_id = :f",
        "ExpressionAttributeValues": {":f": {"S": "fl_07"}},
    }
    assert [i["step_id"]["S"] for i in query(db, table, **by_created, Limit=2)] == ["st_03", "st_05", "st_01"]
    assert sorted_whole_table == []  # moto's all_items sorts the whole table; the narrowed read never does


def test_a_scan_still_sees_every_partition(steps: tuple[Any, str]) -> None:
    db, table = steps
    assert Table.all_items.__name__ == "all_items"  # installed with functools.wraps: moto's own name
    assert len(db.scan(TableName=table)["Items"]) == 100


def test_a_query_reads_the_stored_items_without_copying_them_and_projecting_changes_none(
    steps: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, table = steps
    deep_copies = []
    real_deepcopy = copy.deepcopy

    def counted_deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        deep_copies.append(type(value).__name__)
        return real_deepcopy(value, memo)

    monkeypatch.setattr(copy, "deepcopy", counted_deepcopy)
    keyed = {"KeyConditionExpression": "flow_id = :f", "ExpressionAttributeValues": {":f": {"S": "fl_03"}}}

    assert len(query(db, table, **keyed)) == 5
    assert deep_copies == []  # the items moto keeps are read as they are stored
    assert query(db, table, **keyed, ProjectionExpression="step_id", Limit=2)[0] == {"step_id": {"S": "st_01"}}
    whole = db.get_item(TableName=table, Key={"flow_id": {"S": "fl_03"}, "step_id": {"S": "st_01"}})["Item"]
    assert whole["nested"] == {"M": {"a": {"S": "a1"}, "b": {"S": "b"}}} and whole["kind"] == {"S": "odd"}
    assert len(query(db, table, **keyed)[0]) == 5  # every attribute still there after the projections


def test_an_index_query_orders_by_its_string_keys_ties_by_the_tables_key_without_comparing_in_python(
    steps: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, table = steps
    created = {"st_01": "2", "st_03": "1", "st_05": "2", "st_07": "1", "st_11": "0"}  # ties on purpose
    for step, at in created.items():
        db.update_item(
            TableName=table,
            Key={"flow_id": {"S": "fl_04"}, "step_id": {"S": step}},
            UpdateExpression="SET created_at = :at",
            ExpressionAttributeValues={":at": {"S": f"2026-12-02T00:00:0{at}.000000Z"}},
        )
    comparisons = []
    real_less_than = DynamoType.__lt__

    def counted_less_than(self: DynamoType, other: DynamoType) -> bool:
        comparisons.append(1)
        return real_less_than(self, other)

    monkeypatch.setattr(DynamoType, "__lt__", counted_less_than)
    by_created = {
        "IndexName": "by_created",
        "KeyConditionExpression": "flow_id = :f",
        "ExpressionAttributeValues": {":f": {"S": "fl_04"}},
    }

    in_order = [i["step_id"]["S"] for i in query(db, table, **by_created)]
    assert in_order == ["st_11", "st_03", "st_07", "st_01", "st_05"]  # created_at, then step_id
    assert comparisons == []
    backwards = [i["step_id"]["S"] for i in query(db, table, **by_created, ScanIndexForward=False, Limit=2)]
    assert backwards == list(reversed(in_order))
