"""Conversation continuity in AWS: off unless the CDK context switches it on, and its rollback switch.

``cdk deploy -c flowledger:continuity=true`` turns ``ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY`` on
for the chat function; ``-c flowledger:continuityNativeReruns=false`` is the seed's rollback (no engine
reruns on prior sources: history and the fallback search only). The chat function reads workspaces and
documents (and the tables' Parquet in the documents bucket) whichever way, so switching the flag is an
environment change, never a change of permissions.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_lambda as lambda_
from constructs import Node

from infra.constructs.context import boolean_context

CONTINUITY_CONTEXT = "flowledger:continuity"
NATIVE_RERUNS_CONTEXT = "flowledger:continuityNativeReruns"


@dataclass(frozen=True)
class ContinuitySwitches:
    enabled: bool = False
    native_reruns: bool = True

    @classmethod
    def from_context(cls, node: Node) -> ContinuitySwitches:
        """The two switches from the context; anything but a boolean (or "true"/"false") fails the synth."""
        return cls(
            enabled=boolean_context(node, CONTINUITY_CONTEXT, default=False),
            native_reruns=boolean_context(node, NATIVE_RERUNS_CONTEXT, default=True),
        )

    def apply(self, function: lambda_.Function) -> None:
        """Tell the chat function (both are always set: a deployment says what it runs)."""
        function.add_environment("ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY", str(self.enabled).lower())
        function.add_environment("CONTINUITY_NATIVE_RERUNS_ENABLED", str(self.native_reruns).lower())
