"""Tables and buckets from ``flowledger.store.tables``, encrypted with one customer-managed key.

The stage (``infra.constructs.stage``) decides what deleting the stack does to them; the same key
encrypts the log groups, so its policy lets CloudWatch Logs of this account and region use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Acknowledgment, Aws, Duration, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from flowledger.ledger.checkpoint_notes import KMS_ALGORITHM
from flowledger.store.provision import (
    UPLOAD_BUCKET,
    UPLOAD_EXPOSED_HEADERS,
    UPLOAD_HEADERS,
    UPLOAD_METHODS,
    UPLOAD_PREFLIGHT_MAX_AGE_SECONDS,
)
from flowledger.store.tables import (
    BUCKETS,
    TABLES,
    BucketSpec,
    Key,
    TableSpec,
    physical_bucket_name,
    physical_table_name,
)
from infra.constructs.nag import checkov_skip
from infra.constructs.stage import StagePolicy

BUCKET_SUFFIX = f"{Aws.ACCOUNT_ID}-{Aws.REGION}"
# The access-log bucket is versioned so that a log overwritten or deleted can still be read for a while.
ACCESS_LOG_NONCURRENT_DAYS = 30
ABORT_MULTIPART_DAYS = 7  # a log upload never takes a week: what is left is a failed one, still billed
# A deleted or replaced document (or artifact) is recoverable for a month, then gone: versioning guards
# against a mistake, not against an erasure request, which must end in deletion.
ERASED_VERSION_DAYS = 30
# The KMS encryption context key that names a sealed field's flow (FieldRef.kms_context; a test ties the two).
FLOW_CONTEXT_KEY = "flowledger:flow_id"
SUBJECT_CONTEXT_KEY = "flowledger:subject"


@dataclass(frozen=True)
class DataAccess:
    """What one function may touch, by logical table and bucket name."""

    read_tables: tuple[str, ...] = ()
    write_tables: tuple[str, ...] = ()
    read_buckets: tuple[str, ...] = ()
    write_buckets: tuple[str, ...] = ()
    seal_fields: bool = False  # envelope-encrypts PII fields with the data key
    sign_checkpoints: bool = False  # signs checkpoint notes with the ledger's Ed25519 key (kms:Sign)
    read_ledger_key: bool = False  # serves the ledger's public key (kms:GetPublicKey)
    # Deletes every version of objects (erasure and retention alone): s3:DeleteObject*, the version listing, and
    # aborting multipart uploads.
    erase_buckets: tuple[str, ...] = ()


def _attribute(key: Key) -> dynamodb.Attribute:
    kind = dynamodb.AttributeType.NUMBER if key.type == "N" else dynamodb.AttributeType.STRING
    return dynamodb.Attribute(name=key.name, type=kind)


class Data(Construct):
    """The KMS key, every declared table and every declared bucket."""

    def __init__(self, scope: Construct, construct_id: str, *, prefix: str, stage: StagePolicy) -> None:
        super().__init__(scope, construct_id)
        self.stage = stage
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description="Flowledger data at rest",
            removal_policy=stage.removal,
            pending_window=stage.key_pending_window,
            alias=f"alias/{prefix}-data",
        )
        self._let_logs_use_the_key()
        # Signs each checkpoint as a C2SP signed note. Asymmetric: KMS does not rotate it (a new key is a new
        # verifier key, published anew); it never leaves KMS, and outsiders check with its public half.
        self.ledger_key = kms.Key(
            self,
            "LedgerSigningKey",
            key_spec=kms.KeySpec.ECC_NIST_EDWARDS25519,
            key_usage=kms.KeyUsage.SIGN_VERIFY,
            description="Flowledger ledger checkpoints (Ed25519 signed notes)",
            removal_policy=stage.removal,
            pending_window=stage.key_pending_window,
            alias=f"alias/{prefix}-ledger-signing",
        )
        self.tables = {spec.name: self._table(spec, prefix) for spec in TABLES}
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            removal_policy=stage.removal,
            auto_delete_objects=stage.auto_delete_objects,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            versioned=True,
            lifecycle_rules=[self._access_log_lifecycle()],
        )
        itself = "This is the access-log bucket; logging it into itself would loop."
        Validations.of(self.access_logs).acknowledge(Acknowledgment(id="AwsSolutions-S1", reason=itself))
        checkov_skip(self.access_logs, "CKV_AWS_18", itself)
        self.buckets = {spec.name: self._bucket(spec, prefix) for spec in BUCKETS}
        self.locked_buckets = tuple(self.buckets[spec.name] for spec in BUCKETS if spec.lock_days)

    def allow_browser_uploads(self, origins: list[str]) -> None:
        """Let the console's ``origins`` PUT a large upload to the documents bucket's presigned URL (CORS).

        The same rule the dev server writes on its embedded bucket (``flowledger.store.provision``): PUT
        only, the headers the presigned PUT needs (none: it signs the host alone), ``ETag`` readable.
        """
        if not origins or "*" in origins:
            raise ValueError("browser uploads need the console's origins, never a wildcard")
        self.buckets[UPLOAD_BUCKET].add_cors_rule(
            allowed_methods=[s3.HttpMethods(method) for method in UPLOAD_METHODS],
            allowed_origins=list(origins),
            allowed_headers=list(UPLOAD_HEADERS) or None,
            exposed_headers=list(UPLOAD_EXPOSED_HEADERS),
            max_age=UPLOAD_PREFLIGHT_MAX_AGE_SECONDS,
        )

    def _access_log_lifecycle(self) -> s3.LifecycleRule:
        """Expire access logs after the stage's retention, their overwritten or deleted versions a month later.

        No storage-class transition: log objects are mostly a few KB, under the 128 KB an infrequent-access
        class bills each object at, so moving them would cost more than keeping them. The current versions' expiry
        also removes the delete markers it leaves once their old versions are gone (S3 does so for a
        rule with Days).
        """
        return s3.LifecycleRule(
            id="ExpireAccessLogs",
            expiration=self.stage.access_log_retention,
            noncurrent_version_expiration=Duration.days(ACCESS_LOG_NONCURRENT_DAYS),
            abort_incomplete_multipart_upload_after=Duration.days(ABORT_MULTIPART_DAYS),
        )

    def _let_logs_use_the_key(self) -> None:
        """CloudWatch Logs encrypts a log group with the key only for a log group of this account and region."""
        log_groups = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsEncryptThisAccountsLogGroups",
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}},
            )
        )

    def grant(self, function: lambda_.Function, access: DataAccess) -> None:
        """Grant exactly ``access`` (and use of the key for it) to ``function``'s own role."""
        stack = Stack.of(self)
        findings = []
        for name in access.read_tables:
            self.tables[name].grant_read_data(function)
        # Whoever appends to the ledger leases the chain it appends to (ledger/leases.py).
        write_tables = (*access.write_tables, *(("ledger_leases",) if "ledger" in access.write_tables else ()))
        for name in write_tables:
            self.tables[name].grant_read_write_data(function)
        for name in {*access.read_tables, *write_tables}:
            table_id = stack.get_logical_id(self.tables[name].node.default_child)  # type: ignore[arg-type]
            findings.append(f"Resource::<{table_id}.Arn>/index/*")
        for name in access.read_buckets:
            self.buckets[name].grant_read(function)
            findings += ["Action::s3:GetBucket*", "Action::s3:GetObject*", "Action::s3:List*"]
        for name in access.write_buckets:
            self.buckets[name].grant_put(function)
            findings += ["Action::s3:Abort*"]
        for name in access.erase_buckets:
            bucket = self.buckets[name]
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload"],
                    resources=[bucket.arn_for_objects("*")],
                )
            )
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"],
                    resources=[bucket.bucket_arn],
                )
            )
        for name in {*access.read_buckets, *access.write_buckets, *access.erase_buckets}:
            bucket_id = stack.get_logical_id(self.buckets[name].node.default_child)  # type: ignore[arg-type]
            findings.append(f"Resource::<{bucket_id}.Arn>/*")
        if access.seal_fields:
            self._grant_sealing(function)
        if access.sign_checkpoints or access.read_ledger_key:
            self._grant_ledger_key(function, sign=access.sign_checkpoints)
        if access.read_buckets or access.write_buckets or access.read_tables or access.write_tables:
            findings += ["Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"]
        reason = (
            "CDK grant helper scoped to the named table or bucket (its indexes and objects) and to the "
            "data key that encrypts it; the wildcard covers that resource's own sub-resources only."
        )
        Validations.of(function).acknowledge(
            *(Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason) for finding in sorted(set(findings)))
        )

    def _grant_ledger_key(self, function: lambda_.Function, *, sign: bool) -> None:
        """The ledger key's public half; with ``sign``, Ed25519 signatures of RAW messages (the notes) too."""
        key = self.ledger_key.key_arn
        function.add_to_role_policy(iam.PolicyStatement(actions=["kms:GetPublicKey"], resources=[key]))
        if sign:
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["kms:Sign"],
                    resources=[key],
                    conditions={"StringEquals": {"kms:SigningAlgorithm": KMS_ALGORITHM, "kms:MessageType": "RAW"}},
                )
            )

    def _grant_sealing(self, function: lambda_.Function) -> None:
        """Data keys for sealed fields, only under a flow's or a subject's encryption context.

        The sealer asks KMS with ``flowledger:flow_id`` in the context (``flowledger.store.envelope``), a subject's
        key is made and opened with ``flowledger:subject`` (``flowledger.subjects.keys``); an allow for each. Since
        the table grants allow kms:Decrypt on the same key (for DynamoDB and S3 encryption at rest), a deny refuses
        a direct decrypt with neither context unless DynamoDB or S3 makes it for the function.
        """
        key = self.key.key_arn
        for context_key in (FLOW_CONTEXT_KEY, SUBJECT_CONTEXT_KEY):
            function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["kms:GenerateDataKey", "kms:Decrypt"],
                    resources=[key],
                    conditions={"StringLike": {f"kms:EncryptionContext:{context_key}": "*"}},
                )
            )
        function.add_to_role_policy(
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["kms:Decrypt"],
                resources=[key],
                conditions={
                    "Null": {
                        f"kms:EncryptionContext:{FLOW_CONTEXT_KEY}": "true",
                        f"kms:EncryptionContext:{SUBJECT_CONTEXT_KEY}": "true",
                    },
                    "StringNotEquals": {
                        "kms:ViaService": [f"dynamodb.{Aws.REGION}.amazonaws.com", f"s3.{Aws.REGION}.amazonaws.com"]
                    },
                },
            )
        )

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
            removal_policy=self.stage.removal,
            deletion_protection=self.stage.deletion_protection,
        )
        for index in spec.indexes:
            projection = dynamodb.ProjectionType.ALL
            if index.include == ():
                projection = dynamodb.ProjectionType.KEYS_ONLY
            elif index.include:
                projection = dynamodb.ProjectionType.INCLUDE
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition),
                sort_key=_attribute(index.sort) if index.sort else None,
                projection_type=projection,
                non_key_attributes=list(index.include) if index.include else None,
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
            versioned=spec.versioned or bool(spec.lock_days),
            object_lock_enabled=bool(spec.lock_days) or None,
            object_lock_default_retention=self.stage.lock_retention(spec.lock_days) if spec.lock_days else None,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=f"{spec.name}/",
            removal_policy=self.stage.removal,
            # A locked bucket's versions need the governance bypass CDK's auto-delete lacks: a trial
            # empties it with infra.constructs.trial_cleanup instead.
            auto_delete_objects=self.stage.auto_delete_objects and not spec.lock_days,
            # A locked bucket's versions are kept by their lock (checkpoints are evidence); the others' old
            # versions expire.
            lifecycle_rules=None
            if spec.lock_days
            else [
                s3.LifecycleRule(
                    id="ExpireOldVersions",
                    noncurrent_version_expiration=Duration.days(ERASED_VERSION_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(ABORT_MULTIPART_DAYS),
                )
            ],
        )
