"""A restart replays the journal into the same store: every item, object version, log event and key.

The server is stopped without a snapshot after the writes, as a kill would leave it, and moto's
backends are emptied: what comes back can only come from the snapshot and the journal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from flowledger.api.errors import unavailable
from flowledger.config import load_settings
from flowledger.local import moto_state
from flowledger.local.datadir import EMBEDDED_CREDENTIALS
from flowledger.local.journal import FaultInjection
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all
from flowledger.store.tables import BUCKETS, TABLES


def journaled(data: Path, faults: FaultInjection | None = None) -> tuple[LockedMotoServer, Services]:
    server = LockedMotoServer()
    server.bind()
    server.use_journal(data / "journal", data / "aws-state.pickle", faults)
    server.restore(data / "aws-state.pickle")
    server.serve()
    settings = load_settings(aws_endpoint_url=server.endpoint_url, resource_prefix="replay")
    return server, build_services(settings, EMBEDDED_CREDENTIALS)


@pytest.fixture
def data(tmp_path: Path, clean_environment: None) -> Iterator[Path]:
    moto_state.reset_state()
    yield tmp_path
    moto_state.reset_state()


def everything(services: Services) -> dict[str, Any]:
    """Every item of every table, every object version with its body, every log event, every key."""
    aws = services.aws
    state: dict[str, Any] = {}
    for table in TABLES:
        items = aws.dynamodb.scan(TableName=aws.table_name(table.name))["Items"]
        state[f"table:{table.name}"] = sorted(items, key=repr)
    for bucket in BUCKETS:
        name = aws.bucket_name(bucket.name)
        listing = aws.s3.list_object_versions(Bucket=name)
        versions = []
        for version in listing.get("Versions", []):
            body = aws.s3.get_object(Bucket=name, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
            versions.append((version["Key"], version["VersionId"], version["ETag"], body))
        markers = [(m["Key"], m["VersionId"]) for m in listing.get("DeleteMarkers", [])]
        state[f"bucket:{bucket.name}"] = (sorted(versions), sorted(markers))
    for group in aws.logs.describe_log_groups()["logGroups"]:
        events = aws.logs.filter_log_events(logGroupName=group["logGroupName"])["events"]
        state[f"logs:{group['logGroupName']}"] = sorted((e["timestamp"], e["message"]) for e in events)
    state["keys"] = sorted(k["KeyId"] for k in aws.kms.list_keys()["Keys"])
    return state


def write_every_kind(services: Services) -> None:
    aws = services.aws
    ddb, consents, steps = aws.dynamodb, aws.table_name("consents"), aws.table_name("steps")
    # First: it is saved by a snapshot before it is answered (its key material is random), and a
    # snapshot starts a new journal segment, so every write after it is replayed from the journal.
    aws.kms.create_key(Description="made at random")
    for i in range(30):
        ddb.put_item(TableName=consents, Item={"patient_id": {"S": f"p-{i}"}, "blob": {"B": bytes([i, 0, 255])}})
    ddb.update_item(
        TableName=consents,
        Key={"patient_id": {"S": "p-1"}},
        UpdateExpression="SET n = :n, tags = :t",
        ExpressionAttributeValues={":n": {"N": "1.50"}, ":t": {"SS": ["a", "b"]}},
    )
    ddb.delete_item(TableName=consents, Key={"patient_id": {"S": "p-2"}})
    ddb.batch_write_item(
        RequestItems={
            consents: [
                {"PutRequest": {"Item": {"patient_id": {"S": "batch-1"}, "m": {"M": {"x": {"L": [{"N": "1"}]}}}}}},
                {"DeleteRequest": {"Key": {"patient_id": {"S": "p-3"}}}},
            ]
        }
    )
    key_schema = ddb.describe_table(TableName=steps)["Table"]["KeySchema"]
    key = {k["AttributeName"]: {"S": f"k-{k['KeyType']}"} for k in key_schema}
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": steps, "Item": {**key, "summary": {"S": "in a transaction"}}}},
            {"Delete": {"TableName": consents, "Key": {"patient_id": {"S": "p-4"}}}},
        ]
    )
    with pytest.raises(ClientError):  # refused by its condition: nothing to journal
        ddb.put_item(
            TableName=consents,
            Item={"patient_id": {"S": "p-5"}},
            ConditionExpression="attribute_not_exists(patient_id)",
        )
    bucket = aws.bucket_name(BUCKETS[0].name)
    aws.s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"first", b"second"):
        aws.s3.put_object(Bucket=bucket, Key="docs/a.md", Body=body)
    aws.s3.copy_object(Bucket=bucket, Key="docs/b.md", CopySource={"Bucket": bucket, "Key": "docs/a.md"})
    aws.s3.delete_object(Bucket=bucket, Key="docs/b.md")  # a delete marker, with its own random id
    aws.logs.create_log_group(logGroupName="/replay/test")
    aws.logs.create_log_stream(logGroupName="/replay/test", logStreamName="s")
    aws.logs.put_log_events(
        logGroupName="/replay/test", logStreamName="s", logEvents=[{"timestamp": 1_700_000_000_000, "message": "hi"}]
    )


def test_a_restart_after_a_kill_replays_the_journal_into_the_same_store(data: Path) -> None:
    server, services = journaled(data)
    provision_all(services.aws, services.settings)
    server.snapshot(data / "aws-state.pickle")  # some writes before the snapshot, the rest after
    write_every_kind(services)
    before = everything(services)
    assert server.journaled is not None and server.journaled.journal.written > 40
    server.stop()  # no snapshot: as a kill leaves it
    moto_state.reset_state()

    again, services = journaled(data)
    try:
        assert again.replayed > 40
        assert everything(services) == before
    finally:
        again.stop()


def test_an_item_write_the_journal_cannot_hold_is_undone_and_answered_503(data: Path) -> None:
    full = data / "disk-full"
    server, services = journaled(data, FaultInjection(full))
    try:
        provision_all(services.aws, services.settings)
        consents = services.aws.table_name("consents")
        full.touch()
        with pytest.raises(ClientError) as refused:
            services.aws.dynamodb.put_item(TableName=consents, Item={"patient_id": {"S": "p-full"}})
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert unavailable(refused.value) is not None  # the API answers its caller 503 with Retry-After
        assert services.aws.dynamodb.scan(TableName=consents)["Count"] == 0  # undone; reads still answer
        store = server.journaled
        assert store is not None and store.durability.health()["durable"] is False
        assert "No space left on device" in str(store.durability.health()["cause"])

        full.unlink()
        server.snapshot(data / "aws-state.pickle", force=True)  # the snapshot thread's retry
        assert store.durability.durable
        services.aws.dynamodb.put_item(TableName=consents, Item={"patient_id": {"S": "p-after"}})
    finally:
        server.stop()
