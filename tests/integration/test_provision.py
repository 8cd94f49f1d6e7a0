"""The embedded store is built from the same specs CDK deploys."""

from __future__ import annotations

from flowledger.services import Services
from flowledger.store.provision import provision_all
from flowledger.store.tables import BUCKETS, TABLES


def test_every_table_gets_its_keys_indexes_and_ttl(moto_services: Services) -> None:
    provision_all(moto_services.aws, moto_services.settings)
    client = moto_services.aws.dynamodb
    for spec in TABLES:
        table = client.describe_table(TableName=moto_services.aws.table_name(spec.name))["Table"]
        keys = {k["KeyType"]: k["AttributeName"] for k in table["KeySchema"]}
        assert keys["HASH"] == spec.partition.name
        assert keys.get("RANGE") == (spec.sort.name if spec.sort else None)
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        indexes = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
        assert indexes == {index.name for index in spec.indexes}
        ttl = client.describe_time_to_live(TableName=table["TableName"])["TimeToLiveDescription"]
        assert ttl.get("AttributeName") == spec.ttl_attribute


def test_provisioning_twice_changes_nothing(moto_services: Services) -> None:
    provision_all(moto_services.aws, moto_services.settings)
    provision_all(moto_services.aws, moto_services.settings)
    assert len(moto_services.aws.dynamodb.list_tables()["TableNames"]) == len(TABLES)


def test_checkpoint_bucket_has_object_lock_and_the_rest_are_versioned(moto_services: Services) -> None:
    provision_all(moto_services.aws, moto_services.settings)
    s3 = moto_services.aws.s3
    for spec in BUCKETS:
        name = moto_services.aws.bucket_name(spec.name)
        assert s3.get_bucket_versioning(Bucket=name)["Status"] == "Enabled"
        if spec.lock_days:
            lock = s3.get_object_lock_configuration(Bucket=name)["ObjectLockConfiguration"]
            assert lock["ObjectLockEnabled"] == "Enabled"
            retention = lock["Rule"]["DefaultRetention"]
            assert (retention["Mode"], retention["Days"]) == ("COMPLIANCE", spec.lock_days)


def test_a_store_saved_before_an_index_existed_gets_it_with_its_items_readable(moto_services: Services) -> None:
    """A dev server restored from an older data directory: the table is there, a newer index is not."""
    from dataclasses import replace

    from flowledger.store.provision import create_table

    flows = next(spec for spec in TABLES if spec.name == "flows")
    older = replace(flows, indexes=tuple(i for i in flows.indexes if i.name != "by_family"))
    create_table(moto_services.aws, older)
    name = moto_services.aws.table_name("flows")
    client = moto_services.aws.dynamodb
    client.put_item(
        TableName=name,
        Item={"flow_id": {"S": "fl_1"}, "trigger_type": {"S": "t"}, "closed_at": {"S": "2026-12-01T00:00:00Z"}},
    )
    provision_all(moto_services.aws, moto_services.settings)
    indexes = {i["IndexName"] for i in client.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]}
    assert indexes == {index.name for index in flows.indexes}
    found = client.query(
        TableName=name,
        IndexName="by_family",
        KeyConditionExpression="trigger_type = :t",
        ExpressionAttributeValues={":t": {"S": "t"}},
    )["Items"]
    assert [item["flow_id"]["S"] for item in found] == ["fl_1"]
