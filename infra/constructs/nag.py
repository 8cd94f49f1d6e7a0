"""cdk-nag finding ids as cdk-nag prints them for the environment the stack is synthesized for, and
checkov's per-resource skips.

A finding id names a resource the way cdk-nag resolves it: a pseudo parameter that is still a token
reads ``<AWS::Region>``, a concrete one its value. ``cdk deploy`` sets ``CDK_DEFAULT_ACCOUNT`` and
``CDK_DEFAULT_REGION`` from the caller's credentials, and the app passes them to the stack, so an
acknowledgement written with placeholders matches only an environment-agnostic synth. These helpers
write the id from the stack's own values, so it matches whichever way the app is synthesized.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Acknowledgment, CfnResource, Stack, Token, Validations
from constructs import IConstruct


@dataclass(frozen=True)
class NagEnvironment:
    """The partition, region and account as they appear in a cdk-nag finding of this stack."""

    partition: str
    region: str
    account: str

    @classmethod
    def of(cls, scope: IConstruct) -> NagEnvironment:
        """The environment of ``scope``'s stack: concrete values where the stack has them, placeholders elsewhere."""
        stack = Stack.of(scope)
        return cls(
            partition=_as_nag(stack.partition, "<AWS::Partition>"),
            region=_as_nag(stack.region, "<AWS::Region>"),
            account=_as_nag(stack.account, "<AWS::AccountId>"),
        )

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        """``arn:<partition>:<service>:<region>:<account>:<resource>``; S3-style ARNs leave region and account out."""
        return (
            f"arn:{self.partition}:{service}:{self.region if region else ''}:"
            f"{self.account if account else ''}:{resource}"
        )


def _as_nag(value: str, placeholder: str) -> str:
    return placeholder if Token.is_unresolved(value) else value


def checkov_skip(scope: IConstruct, check_id: str, reason: str) -> None:
    """Skip checkov's ``check_id`` on ``scope``'s CloudFormation resource, for ``reason`` (its template metadata).

    For a check that is right for every resource but this one; a check wrong for the whole stack is skipped
    in ``.checkov.yaml`` instead. The reason is in the template, beside the resource, as cdk-nag's are.
    """
    resource = scope if isinstance(scope, CfnResource) else scope.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{scope.node.path} has no CloudFormation resource to skip {check_id} on")
    metadata = resource.get_metadata("checkov") or {}
    skips = [*metadata.get("skip", []), {"id": check_id, "comment": reason}]
    resource.add_metadata("checkov", {**metadata, "skip": skips})


def acknowledge_basic_execution_role(stack: Stack) -> None:
    """Every function's role carries AWS's basic execution policy (its logs): acknowledged once per stack."""
    Validations.of(stack).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]",
            reason="The AWS-managed basic execution role grants only CloudWatch Logs writes.",
        ),
    )
