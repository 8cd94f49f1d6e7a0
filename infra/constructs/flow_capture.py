"""Reasoning-flow capture in AWS: on unless the CDK context switches it off.

Every agent run is meant to leave a flow in the ledger; a deployment that records none has no audit
trail. ``flowledger:flowCapture`` (default ``true``) sets ``REASONING_FLOW_CAPTURE_ENABLED`` on every
function where an agent records flows: the chat function (system chat, knowledge answers, diagnosis)
and the jobs function (the research agents: researcher, critic, correlator, and their evaluation).
``-c flowledger:flowCapture=false`` turns it off there; so does setting the variable to ``false`` on a
function by hand, which is how an operator switches one function off without a deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_lambda as lambda_
from constructs import Node

from infra.constructs.context import boolean_context

FLOW_CAPTURE_CONTEXT = "flowledger:flowCapture"
FLOW_CAPTURE_VARIABLE = "REASONING_FLOW_CAPTURE_ENABLED"


@dataclass(frozen=True)
class FlowCapture:
    enabled: bool = True

    @classmethod
    def from_context(cls, node: Node) -> FlowCapture:
        """The switch; anything but true or false fails the synth naming the key."""
        return cls(boolean_context(node, FLOW_CAPTURE_CONTEXT, default=True))

    def apply(self, *functions: lambda_.Function) -> None:
        """Tell each function whose agents record flows (always set: a deployment says what it records)."""
        for function in functions:
            function.add_environment(FLOW_CAPTURE_VARIABLE, str(self.enabled).lower())
