"""The AgentInvoker port, what an invocation yields, and the stub invoker.

An invoker runs one case and returns the :class:`ReplayOutcome` of the flow that run *recorded*: the
real invokers (:mod:`flowledger.replay.agents`) read it back from the store, so what is compared is
what an operator would see, not what the agent meant to record.

The stub runs nothing: it answers every case with the canonical recording of the case's expectation
(its shortest step sequence, its first allowed outcome). Comparing that with the golden corpus is the
fixture's self-check: a case whose expectation the corpus does not accept, or a corpus change that
breaks a case, drifts under the stub before any agent runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from flowledger.replay.cases import ReplayCase


@dataclass(frozen=True)
class ReplayOutcome:
    """The recorded flow of one invocation; ``flow_id`` is None for the stub (nothing was recorded)."""

    trigger_type: str
    trigger_ref: str
    step_kinds: tuple[str, ...]
    outcome_type: str | None
    flow_state: str = "completed"
    flow_id: str | None = None


class AgentInvoker(Protocol):
    """Runs replay cases for one agent."""

    @property
    def name(self) -> str: ...

    def handles(self, case: ReplayCase) -> bool:
        """Whether this invoker runs ``case`` (the others are skipped)."""
        ...

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        """Run ``case`` and return the flow it recorded; raises when no flow could be read back."""
        ...


class StubAgentInvoker:
    """Every case, answered with its expectation's canonical recording (no agent, no store)."""

    name = "stub"

    def handles(self, case: ReplayCase) -> bool:
        return True

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        return ReplayOutcome(
            trigger_type=case.trigger_type,
            trigger_ref=f"replay/{case.id}",
            step_kinds=tuple(case.expected.canonical_steps()),
            outcome_type=case.expected.outcomes[0],
        )
