"""cdk-nag finding ids as cdk-nag prints them for the environment the stack is synthesized for.

A finding id names a resource the way cdk-nag resolves it: a pseudo parameter that is still a token
reads ``<AWS::Region>``, a concrete one its value. ``cdk deploy`` sets ``CDK_DEFAULT_ACCOUNT`` and
``CDK_DEFAULT_REGION`` from the caller's credentials, and the app passes them to the stack, so an
acknowledgement written with placeholders matches only an environment-agnostic synth. These helpers
write the id from the stack's own values, so it matches whichever way the app is synthesized.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Stack, Token
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
