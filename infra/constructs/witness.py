"""A witness of Flowledger logs as a Lambda: a function URL anyone may call (the logs' signatures are the
authentication), its state in a DynamoDB table keyed by origin, its cosignatures by a KMS Ed25519 key."""

from __future__ import annotations

import json

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from flowledger.ledger.checkpoint_notes import KMS_ALGORITHM
from infra.constructs.functions import FunctionDefaults, python_function
from infra.constructs.nag import checkov_skip
from infra.constructs.stage import StagePolicy
from infra.constructs.witnesses import WitnessSettings


class Witness(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        prefix: str,
        settings: WitnessSettings,
        defaults: FunctionDefaults,
        stage: StagePolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        # The last checkpoint cosigned per log: public checkpoints, nothing secret, so AWS's own key encrypts it.
        self.table = dynamodb.Table(
            self,
            "State",
            table_name=f"{prefix}-witness-state",
            partition_key=dynamodb.Attribute(name="origin", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=stage.removal,
            deletion_protection=stage.deletion_protection,
        )
        checkov_skip(self.table, "CKV_AWS_119", "The witness state holds public checkpoints only.")
        # Asymmetric: KMS does not rotate it (a new key is a new witness verifier key, given to the logs anew).
        self.key = kms.Key(
            self,
            "CosigningKey",
            key_spec=kms.KeySpec.ECC_NIST_EDWARDS25519,
            key_usage=kms.KeyUsage.SIGN_VERIFY,
            description=f"Flowledger witness {settings.name} (Ed25519 checkpoint cosignatures)",
            removal_policy=stage.removal,
            pending_window=stage.key_pending_window,
            alias=f"alias/{prefix}-witness",
        )
        self.function = python_function(
            self,
            "Function",
            name="witness",
            defaults=defaults,
            description="Cosigns the checkpoints of the logs it witnesses (POST /add-checkpoint)",
            timeout=Duration.seconds(10),
            environment={
                "FLOWLEDGER_WITNESS_NAME": settings.name,
                "FLOWLEDGER_WITNESS_KEY_ID": self.key.key_arn,
                "FLOWLEDGER_WITNESS_TABLE": self.table.table_name,
                "FLOWLEDGER_WITNESS_LOGS": json.dumps(list(settings.logs)),
            },
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["dynamodb:GetItem", "dynamodb:PutItem"], resources=[self.table.table_arn])
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["kms:GetPublicKey"], resources=[self.key.key_arn])
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["kms:Sign"],
                resources=[self.key.key_arn],
                conditions={"StringEquals": {"kms:SigningAlgorithm": KMS_ALGORITHM, "kms:MessageType": "RAW"}},
            )
        )
        # Public on purpose: a submission is checked against the logs' keys, and a witness answers anyone.
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.NONE)
        checkov_skip(
            self.url, "CKV_AWS_258", "A witness answers anyone: the logs' signatures authenticate a submission."
        )
        checkov_skip(
            self.function.log_group,
            "CKV_AWS_158",
            "The witness logs a request line per call about public checkpoints; it holds nothing to keep secret.",
        )
        stack = Stack.of(self)
        CfnOutput(stack, "WitnessUrl", value=self.url.url, description="Give it to the log (flowledger:witnesses)")
        CfnOutput(
            stack,
            "WitnessKeyArn",
            value=self.key.key_arn,
            description="`flowledger witness key --kms-key ARN --name NAME` prints the witness's verifier key",
        )
