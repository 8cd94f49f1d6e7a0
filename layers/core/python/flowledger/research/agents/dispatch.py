"""The backlog's real dispatcher: a pulled row's follow-up research, run by the agents.

Every row, whatever its trigger type, goes to the researcher with ``dispatched_from_backlog=True``
(so neither the researcher nor the critic after it can enqueue again: the loop break holds at every
hop). A ``claim_rejected`` row reaches here only under ``re_research``: its framing is the rejected
claim's question, and the re-run's claim is checked by the critic again. The row completes with the
researcher's flow id; an agent that gives up fails it with its reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flowledger.llm.ports import ChatModel
from flowledger.reasoning.recorder import ReasoningFlowRecorder
from flowledger.research.agents.critic import Claim, Critic
from flowledger.research.agents.recording import AgentGaveUp, research_recorder
from flowledger.research.agents.researcher import Researcher, ResearchQuestion
from flowledger.research.models import BacklogRow
from flowledger.services import Services

logger = logging.getLogger("flowledger.research.dispatch")


@dataclass
class AgentDispatcher:
    researcher: Researcher
    critic: Critic

    @classmethod
    def build(
        cls, services: Services, model: ChatModel, recorder: ReasoningFlowRecorder | None = None
    ) -> AgentDispatcher:
        """The dispatcher of one consumer run: both agents share the model and the recorder."""
        recorder = recorder or research_recorder(services)
        return cls(Researcher(services, model, recorder), Critic(services, model, recorder))

    def dispatch(self, row: BacklogRow) -> str | None:
        """Run the row's research; the researcher's flow id (None when flows are not captured).

        Raises :class:`AgentGaveUp` when the researcher gives up; a critic that gives up afterwards
        leaves the research standing (the row is still done) and is logged.
        """
        question = ResearchQuestion(
            trigger_type=row.trigger_type,
            trigger_ref=row.trigger_ref,
            question=row.question_framing,
            dispatched_from_backlog=True,
        )
        finding = self.researcher.research(question)
        claim = Claim.from_finding(finding)
        if claim is not None:
            try:
                self.critic.check(claim)
            except AgentGaveUp as exc:
                logger.warning("critic gave up on a re-researched claim", extra={"reason": exc.reason})
        return finding.flow_id
