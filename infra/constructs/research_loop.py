"""The research loop in AWS: off unless the CDK context switches it on.

``cdk deploy -c flowledger:researchLoop=true`` sets, on the jobs function (where the backlog consumer
and the research agents run), ``RESEARCH_AUTO_ENQUEUE_ENABLED`` and ``CRITIC_AUTO_ENQUEUE_ENABLED`` (weak
results and rejected claims enqueue) and ``BACKLOG_CONSUMER_ENABLED`` (the consumer dispatches pulled rows
to the agents). The agents record their flows by ``flowledger:flowCapture`` (on by default,
``infra.constructs.flow_capture``), which the loop needs.
``-c flowledger:criticDispatchStrategy=re_research`` re-researches rejected claims instead of marking
them for a curator (``mark_for_review``, the default). The jobs function's grants are the same either
way: switching the loop is an environment change.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_lambda as lambda_
from constructs import Node

from flowledger.config import CriticDispatchStrategy
from infra.constructs.context import boolean_context

LOOP_CONTEXT = "flowledger:researchLoop"
STRATEGY_CONTEXT = "flowledger:criticDispatchStrategy"
LOOP_VARIABLES = (
    "RESEARCH_AUTO_ENQUEUE_ENABLED",
    "CRITIC_AUTO_ENQUEUE_ENABLED",
    "BACKLOG_CONSUMER_ENABLED",
)


@dataclass(frozen=True)
class ResearchLoopSwitches:
    enabled: bool = False
    strategy: str = CriticDispatchStrategy.MARK_FOR_REVIEW.value

    @classmethod
    def from_context(cls, node: Node) -> ResearchLoopSwitches:
        """The switch and the strategy; a value that is neither fails the synth naming its key."""
        strategy = node.try_get_context(STRATEGY_CONTEXT) or CriticDispatchStrategy.MARK_FOR_REVIEW.value
        allowed = [s.value for s in CriticDispatchStrategy]
        if strategy not in allowed:
            raise ValueError(f"{STRATEGY_CONTEXT} must be one of {', '.join(allowed)}, not {strategy!r}")
        return cls(boolean_context(node, LOOP_CONTEXT, default=False), strategy)

    def apply(self, jobs: lambda_.Function) -> None:
        """Tell the jobs function (every switch is set: a deployment says what it runs)."""
        for variable in LOOP_VARIABLES:
            jobs.add_environment(variable, str(self.enabled).lower())
        jobs.add_environment("CRITIC_DISPATCH_STRATEGY", self.strategy)
