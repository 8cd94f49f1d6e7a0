"""A trial stage's Object Lock buckets, emptied when the stack is deleted.

CDK's auto-delete cannot delete a version still inside its GOVERNANCE retention (it never sends the
bypass header), so ``cdk destroy`` of a ``dev`` stage would stop at the checkpoint bucket for a day.
A custom resource per locked bucket runs ``functions/locked_bucket_emptier`` on delete; it depends on
the bucket (deleted after it) and on the function with its role and policy (still there when it runs).
Only a trial builds this: prod's COMPLIANCE lock is not to be bypassed, and prod keeps its buckets.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CustomResource, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.functions import FunctionDefaults, python_function

RESOURCE_TYPE = "Custom::EmptyLockedBucket"
EMPTIER_ACTIONS = ("s3:ListBucketVersions", "s3:DeleteObjectVersion", "s3:BypassGovernanceRetention")


class LockedBucketCleanup(Construct):
    """Empties each of ``buckets`` (versions, delete markers, locked or not) before CloudFormation deletes it."""

    def __init__(
        self, scope: Construct, construct_id: str, *, buckets: tuple[s3.Bucket, ...], defaults: FunctionDefaults
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = python_function(
            self,
            "Function",
            name="locked_bucket_emptier",
            defaults=defaults,
            description="Trial stage only: empties the Object Lock buckets when the stack is deleted",
            timeout=Duration.minutes(15),  # Lambda's longest: a trial's checkpoints are few, but never cut short
            memory_size=256,
        )
        stack = Stack.of(self)
        # It empties only while the stack itself is being deleted, which it reads from the stack's status.
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[stack.stack_id])
        )
        findings = []
        for bucket in buckets:
            self.function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=list(EMPTIER_ACTIONS), resources=[bucket.bucket_arn, bucket.arn_for_objects("*")]
                )
            )
            bucket_id = stack.get_logical_id(bucket.node.default_child)  # type: ignore[arg-type]
            findings.append(f"Resource::<{bucket_id}.Arn>/*")
            emptied = CustomResource(
                self,
                f"Empty-{bucket.node.id}",
                service_token=self.function.function_arn,
                resource_type=RESOURCE_TYPE,
                properties={"BucketName": bucket.bucket_name},
            )
            emptied.node.add_dependency(self.function)  # its role's policy too: it must outlive the emptying
        Validations.of(self.function).acknowledge(
            *(
                Acknowledgment(
                    id=f"AwsSolutions-IAM5[{finding}]",
                    reason="Emptying a bucket deletes every version of every object in it, and only in it.",
                )
                for finding in findings
            )
        )
