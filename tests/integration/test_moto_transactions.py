"""moto's transactions with item-level rollback: a cancelled transaction leaves every item as it was."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from flowledger.services import Services


def _claim(services: Services, claim_id: str) -> dict[str, Any] | None:
    table = services.aws.table_name("claims_review")
    item: dict[str, Any] | None = services.aws.dynamodb.get_item(
        TableName=table, Key={"claim_id": {"S": claim_id}}
    ).get("Item")
    return item


def _event(services: Services, seq: int) -> dict[str, Any] | None:
    key = {"chain_id": {"S": "chain-000"}, "seq": {"N": str(seq)}}
    item: dict[str, Any] | None = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("ledger"), Key=key
    ).get("Item")
    return item


def test_a_cancelled_transaction_restores_updated_deleted_and_new_items(services: Services) -> None:
    db, claims, ledger = (
        services.aws.dynamodb,
        services.aws.table_name("claims_review"),
        services.aws.table_name("ledger"),
    )
    db.put_item(TableName=claims, Item={"claim_id": {"S": "kept"}, "status": {"S": "pending"}})
    db.put_item(TableName=claims, Item={"claim_id": {"S": "doomed"}, "status": {"S": "pending"}})
    with pytest.raises(ClientError, match="TransactionCanceled"):
        db.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": claims,
                        "Key": {"claim_id": {"S": "kept"}},
                        "UpdateExpression": "SET #s = :done",
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": {":done": {"S": "resolved"}},
                    }
                },
                {"Delete": {"TableName": claims, "Key": {"claim_id": {"S": "doomed"}}}},
                {"Put": {"TableName": ledger, "Item": {"chain_id": {"S": "chain-000"}, "seq": {"N": "1"}}}},
                {
                    "ConditionCheck": {
                        "TableName": claims,
                        "Key": {"claim_id": {"S": "absent"}},
                        "ConditionExpression": "attribute_exists(claim_id)",
                    }
                },
            ]
        )
    assert _claim(services, "kept") == {"claim_id": {"S": "kept"}, "status": {"S": "pending"}}
    assert _claim(services, "doomed") is not None
    assert _event(services, 1) is None


def test_a_committed_transaction_writes_every_item(services: Services) -> None:
    db, claims, ledger = (
        services.aws.dynamodb,
        services.aws.table_name("claims_review"),
        services.aws.table_name("ledger"),
    )
    db.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": claims, "Item": {"claim_id": {"S": "new"}, "status": {"S": "pending"}}}},
            {"Put": {"TableName": ledger, "Item": {"chain_id": {"S": "chain-000"}, "seq": {"N": "1"}}}},
        ]
    )
    assert _claim(services, "new") is not None and _event(services, 1) is not None
