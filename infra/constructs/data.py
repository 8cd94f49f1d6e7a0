"""Tables and buckets from ``flowledger.store.tables``, encrypted with one customer-managed key."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from flowledger.store.tables import (
    BUCKETS,
    TABLES,
    BucketSpec,
    Key,
    TableSpec,
    physical_bucket_name,
    physical_table_name,
)

CHECKPOINT_RETENTION = Duration.days(365 * 7)  # audit evidence outlives the HIPAA six-year window
BUCKET_SUFFIX = f"{Aws.ACCOUNT_ID}-{Aws.REGION}"


def _attribute(key: Key) -> dynamodb.Attribute:
    kind = dynamodb.AttributeType.NUMBER if key.type == "N" else dynamodb.AttributeType.STRING
    return dynamodb.Attribute(name=key.name, type=kind)


class Data(Construct):
    """The KMS key, every declared table and every declared bucket."""

    def __init__(self, scope: Construct, construct_id: str, *, prefix: str) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description="Flowledger data at rest",
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.tables = {spec.name: self._table(spec, prefix) for spec in TABLES}
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            removal_policy=RemovalPolicy.RETAIN,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
        )
        Validations.of(self.access_logs).acknowledge(
            Acknowledgment(
                id="AwsSolutions-S1", reason="This is the access-log bucket; logging it into itself would loop."
            )
        )
        self.buckets = {spec.name: self._bucket(spec, prefix) for spec in BUCKETS}

    def _table(self, spec: TableSpec, prefix: str) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            f"Table-{spec.name}",
            table_name=physical_table_name(prefix, spec.name),
            partition_key=_attribute(spec.partition),
            sort_key=_attribute(spec.sort) if spec.sort else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=spec.ttl_attribute,
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index in spec.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition),
                sort_key=_attribute(index.sort) if index.sort else None,
            )
        return table

    def _bucket(self, spec: BucketSpec, prefix: str) -> s3.Bucket:
        return s3.Bucket(
            self,
            f"Bucket-{spec.name}",
            bucket_name=physical_bucket_name(prefix, spec.name, BUCKET_SUFFIX),
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            versioned=spec.versioned or spec.object_lock,
            object_lock_enabled=spec.object_lock or None,
            object_lock_default_retention=(
                s3.ObjectLockRetention.compliance(CHECKPOINT_RETENTION) if spec.object_lock else None
            ),
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=f"{spec.name}/",
            removal_policy=RemovalPolicy.RETAIN,
        )
