"""Create the declared tables and buckets through the AWS API (embedded server and tests).

In AWS, CDK creates them from the same specs; this module never runs there. The one browser-facing
rule both share is here: the documents bucket's CORS, for a large upload's presigned PUT from the console.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from flowledger.store.aws import AwsClients
from flowledger.store.tables import BUCKETS, TABLES, BucketSpec, Index, Key, TableSpec

if TYPE_CHECKING:
    from flowledger.config import Settings

# The bucket the console PUTs a large upload into, through the URL workspaces/documents.py presigns.
UPLOAD_BUCKET = "documents"
UPLOAD_METHODS = ("PUT",)  # the browser only ever writes there; reads go through the API
# The presigned PUT signs only ``host``, and the page sends its bytes with no header of its own, so the
# preflight asks for none; a header the page adds (or a signed one) must be allowed here too.
UPLOAD_HEADERS: tuple[str, ...] = ()
UPLOAD_EXPOSED_HEADERS = ("ETag",)
UPLOAD_PREFLIGHT_MAX_AGE_SECONDS = 600


def _key_schema(partition: Key, sort: Key | None) -> list[dict[str, str]]:
    schema = [{"AttributeName": partition.name, "KeyType": "HASH"}]
    if sort is not None:
        schema.append({"AttributeName": sort.name, "KeyType": "RANGE"})
    return schema


def _index(index: Index) -> dict[str, Any]:
    projection: dict[str, Any] = {"ProjectionType": "ALL"}
    if index.include == ():
        projection = {"ProjectionType": "KEYS_ONLY"}
    elif index.include:
        projection = {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(index.include)}
    return {"IndexName": index.name, "KeySchema": _key_schema(index.partition, index.sort), "Projection": projection}


def _table_exists(client: Any, name: str) -> bool:
    # One DescribeTable, not ListTables: a listing comes 100 names a page and costs more with every
    # table in the account (a shared test account holds hundreds).
    try:
        client.describe_table(TableName=name)
    except client.exceptions.ResourceNotFoundException:
        return False
    return True


def create_table(aws: AwsClients, spec: TableSpec) -> None:
    """Create one table (on-demand, with its indexes and TTL) if it does not exist yet."""
    name = aws.table_name(spec.name)
    client = aws.dynamodb
    if _table_exists(client, name):
        add_missing_indexes(aws, spec)
        return
    request: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": _key_schema(spec.partition, spec.sort),
        "AttributeDefinitions": [
            {"AttributeName": attr, "AttributeType": kind} for attr, kind in spec.attributes().items()
        ],
    }
    if spec.indexes:
        request["GlobalSecondaryIndexes"] = [_index(index) for index in spec.indexes]
    client.create_table(**request)
    if spec.ttl_attribute:
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
        )


def add_missing_indexes(aws: AwsClients, spec: TableSpec) -> list[str]:
    """Add the declared indexes an existing table lacks (a store saved by an older version); their names.

    DynamoDB builds one new index of a table at a time, so each is added and waited for in turn.
    """
    name = aws.table_name(spec.name)
    client = aws.dynamodb
    table = client.describe_table(TableName=name)["Table"]
    present = {index["IndexName"] for index in table.get("GlobalSecondaryIndexes", [])}
    added = []
    for index in spec.indexes:
        if index.name in present:
            continue
        keys = [index.partition, *([index.sort] if index.sort else [])]
        client.update_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": key.name, "AttributeType": key.type} for key in keys],
            GlobalSecondaryIndexUpdates=[{"Create": _index(index)}],
        )
        client.get_waiter("table_exists").wait(TableName=name)
        _wait_until_active(client, name, index.name)
        added.append(index.name)
    return added


def _wait_until_active(client: Any, table: str, index: str, attempts: int = 120) -> None:
    import time

    for _ in range(attempts):
        described = client.describe_table(TableName=table)["Table"].get("GlobalSecondaryIndexes", [])
        if all(i.get("IndexStatus", "ACTIVE") == "ACTIVE" for i in described if i["IndexName"] == index):
            return
        time.sleep(1)
    raise TimeoutError(f"index {index} of {table} did not become active")


def _bucket_exists(client: Any, name: str) -> bool:
    # HeadBucket, not ListBuckets: the listing returns every bucket of the account, each time.
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket"):
            return False
        raise
    return True


def create_bucket(aws: AwsClients, spec: BucketSpec, region: str) -> None:
    """Create one bucket (versioned, Object Lock where declared) if it does not exist yet."""
    name = aws.bucket_name(spec.name)
    if _bucket_exists(aws.s3, name):
        return
    request: dict[str, Any] = {"Bucket": name}
    if region != "us-east-1":
        request["CreateBucketConfiguration"] = {"LocationConstraint": region}
    if spec.lock_days:
        request["ObjectLockEnabledForBucket"] = True
    aws.s3.create_bucket(**request)
    if spec.lock_days:  # Object Lock turns versioning on by itself
        aws.s3.put_object_lock_configuration(
            Bucket=name,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": spec.lock_days}},
            },
        )
    elif spec.versioned:
        aws.s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


def create_key(aws: AwsClients, alias: str, description: str, existing: set[str], **spec: str) -> None:
    """A customer-managed KMS key under ``alias`` (``spec``: its KeyUsage and KeySpec), unless ``existing`` has it."""
    if alias in existing:
        return
    key_id = aws.kms.create_key(Description=description, **spec)["KeyMetadata"]["KeyId"]
    aws.kms.create_alias(AliasName=alias, TargetKeyId=key_id)


def upload_cors_rule(origins: Iterable[str]) -> dict[str, Any]:
    """The documents bucket's CORS rule (S3's ``CORSRule`` shape): PUT only, from the console's ``origins``."""
    allowed = sorted(set(origins))
    if not allowed or "*" in allowed:
        raise ValueError("browser uploads need the console's origins, never a wildcard")
    rule: dict[str, Any] = {
        "AllowedMethods": list(UPLOAD_METHODS),
        "AllowedOrigins": allowed,
        "ExposeHeaders": list(UPLOAD_EXPOSED_HEADERS),
        "MaxAgeSeconds": UPLOAD_PREFLIGHT_MAX_AGE_SECONDS,
    }
    if UPLOAD_HEADERS:
        rule["AllowedHeaders"] = list(UPLOAD_HEADERS)
    return rule


def allow_browser_uploads(aws: AwsClients, origins: Iterable[str]) -> None:
    """Let a page of ``origins`` PUT to the documents bucket (its CORS, replaced whole on every start)."""
    aws.s3.put_bucket_cors(
        Bucket=aws.bucket_name(UPLOAD_BUCKET), CORSConfiguration={"CORSRules": [upload_cors_rule(origins)]}
    )


def provision_all(aws: AwsClients, settings: Settings, *, upload_origins: Iterable[str] = ()) -> None:
    """Every declared table and bucket (in the settings' region), the data key and the ledger's signing key.

    With ``upload_origins``, also the uploads' CORS.

    The CORS rule is written even for a bucket that exists (a restored store), since the dev server's
    origin changes with its port.
    """
    for table in TABLES:
        create_table(aws, table)
    for bucket in BUCKETS:
        create_bucket(aws, bucket, settings.aws_region)
    origins = list(upload_origins)
    if origins:
        allow_browser_uploads(aws, origins)
    aliases = {a["AliasName"] for a in aws.kms.list_aliases().get("Aliases", [])}
    create_key(aws, settings.data_key_id, "Flowledger data at rest", aliases)  # seals PII fields
    create_key(
        aws,
        settings.ledger_signing_key_id,
        "Flowledger ledger checkpoints",  # signs them as notes (ledger/checkpoint_notes.py)
        aliases,
        KeyUsage="SIGN_VERIFY",
        KeySpec="ECC_NIST_EDWARDS25519",
    )
