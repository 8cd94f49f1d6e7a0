"""The real invokers: Flowledger's own agents on the offline model, each case on a fresh embedded store.

Every invoker builds the agent the way its command or function does (``research_recorder`` for the
research agents, ``build_use_case`` for chat and diagnosis), with one difference: the transport under
the recorder notes the id of each flow it starts, so the invoker can read back exactly the flows the
run recorded. The outcome returned is read from the store (``FlowService.flow_with_steps``), never
taken from the agent's return value: a step the agent thinks it recorded and the store does not hold
is drift.

The model is the offline model (deterministic, no network) unless another is given; a case's
``model_unavailable`` swaps in a model whose every call fails as a transport error, so a case can
replay an agent giving up. The agents are the real ones: a case that needs a document, a claim or a
family's earlier flows gets them written through the same services first.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from flowledger.config import Settings
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.llm.ports import (
    DEFAULT_MAX_TOKENS,
    ChatModel,
    JsonSchema,
    Message,
    ModelTransportError,
    Reply,
    ToolSpec,
)
from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
from flowledger.replay.cases import ChatInput, CorrelatorInput, CriticInput, DiagnosisInput, ReplayCase, ResearcherInput
from flowledger.replay.embedded import embedded_services, require_moto
from flowledger.replay.invokers import ReplayOutcome
from flowledger.services import Services

REPLAY_USER = Principal(kind="user", id="replay-user", scopes=frozenset({"chat"}))
DEMO_RUNBOOK = "checkout-incident-runbook.md"


class NoFlowRecorded(RuntimeError):
    """The run recorded no flow, or more than one, so there is nothing single to compare."""


class UnavailableModel:
    """A model whose every call fails as a transport error (the agent's retry policy sees a real failure)."""

    def __init__(self, inner: ChatModel) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def offline(self) -> bool:
        return self._inner.offline

    def complete(
        self,
        messages: list[Message],
        *,
        schema: JsonSchema | None = None,
        tools: list[ToolSpec] | None = None,
        timeout_seconds: float,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> Reply:
        raise ModelTransportError("replay: the model is unavailable for this case")


class _NotingTransport(InProcessTransport):
    """The in-process transport, noting the id of every flow it starts."""

    def __init__(self, service: Any, principal: Principal) -> None:
        super().__init__(service, principal)
        self.started: list[str] = []

    def start(self, body: dict[str, Any]) -> str:
        flow_id = super().start(body)
        self.started.append(flow_id)
        return flow_id


def creation_order(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Step records parents first, ties in (created_at, step_id) order: the order the agent recorded them.

    A step's parents are earlier steps of its flow, so this is the recording order even where two
    steps share a timestamp (a batch written at once).
    """
    pending = sorted(records, key=lambda r: (r.get("created_at", ""), r["step_id"]))
    ids = {r["step_id"] for r in pending}
    placed: set[str] = set()
    ordered: list[dict[str, Any]] = []
    while pending:
        # The first step whose parents (of this flow) are all placed; the first one left if none is.
        ready = next((r for r in pending if set(r.get("parent_step_ids") or ()) & ids <= placed), pending[0])
        pending.remove(ready)
        placed.add(ready["step_id"])
        ordered.append(ready)
    return ordered


def read_back(services: Services, flow_id: str) -> ReplayOutcome:
    """The recorded flow as the store holds it."""
    from flowledger.reasoning.service import FlowService

    flow, records = FlowService(services).flow_with_steps(flow_id)
    return ReplayOutcome(
        trigger_type=flow.trigger_type,
        trigger_ref=flow.trigger_ref,
        step_kinds=tuple(str(r["step_kind"]) for r in creation_order(records)),
        outcome_type=flow.outcome.type if flow.outcome else None,
        flow_state=flow.flow_state,
        flow_id=flow_id,
    )


def _add_documents(services: Services, documents: dict[str, str]) -> dict[str, Any]:
    """Index ``documents`` in the global scope; each name's stored document."""
    from flowledger.knowledge.index import KnowledgeIndex

    index = KnowledgeIndex(services)
    return {name: index.add_document(name, text.encode(), scope="global").document for name, text in documents.items()}


class _RealInvoker:
    """One agent's invoker: a fresh store per case, the agent run on it, its one flow read back."""

    name = ""

    def __init__(self, settings: Settings, model: Callable[[], ChatModel] | None = None) -> None:
        require_moto()  # say so before any case runs, not once per case
        self._settings = settings
        self._model = model or _offline_model

    def handles(self, case: ReplayCase) -> bool:
        return case.invoker == self.name

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        with tempfile.TemporaryDirectory(prefix="flowledger-replay-") as scratch:
            overrides = self._store_overrides(case, Path(scratch))
            with embedded_services(self._settings, **overrides) as services:
                writer = Principal(kind="user", id=f"service:replay-{self.name}", scopes=frozenset({"reasoning.write"}))
                transport = _NotingTransport(_flow_service(services), writer)
                model = self._model()
                if getattr(case.typed_input(), "model_unavailable", False):
                    model = UnavailableModel(model)
                self._run(services, case, model, ReasoningFlowRecorder(transport))
                if len(transport.started) != 1:
                    raise NoFlowRecorded(f"the {self.name} recorded {len(transport.started)} flows, expected 1")
                return read_back(services, transport.started[0])

    def _store_overrides(self, case: ReplayCase, scratch: Path) -> dict[str, Any]:
        return {}

    def _run(self, services: Services, case: ReplayCase, model: ChatModel, recorder: ReasoningFlowRecorder) -> None:
        raise NotImplementedError


class ResearcherInvoker(_RealInvoker):
    """The researcher on the case's question over its documents (global scope only)."""

    name = "researcher"

    def _run(self, services: Services, case: ReplayCase, model: ChatModel, recorder: ReasoningFlowRecorder) -> None:
        from flowledger.knowledge.scopes import GLOBAL
        from flowledger.research.agents.recording import AgentGaveUp
        from flowledger.research.agents.researcher import Researcher, ResearchQuestion

        given: ResearcherInput = case.typed_input()
        _add_documents(services, given.documents)
        question = ResearchQuestion(case.trigger_type, given.trigger_ref, given.question)
        # A researcher that gives up closed its flow aborted: that flow is what the case replays.
        with contextlib.suppress(AgentGaveUp):
            Researcher(services, model, recorder, scopes=(GLOBAL,)).research(question)


class CriticInvoker(_RealInvoker):
    """The critic on a claim citing the case's documents (some of them removed first when ``gone``)."""

    name = "critic"

    def _run(self, services: Services, case: ReplayCase, model: ChatModel, recorder: ReasoningFlowRecorder) -> None:
        from flowledger.knowledge.index import KnowledgeIndex
        from flowledger.knowledge.scopes import GLOBAL
        from flowledger.research.agents.critic import Citation, Claim, Critic
        from flowledger.research.agents.recording import AgentGaveUp

        given: CriticInput = case.typed_input()
        stored = _add_documents(services, given.documents)
        claim = Claim(
            claim_id=new_id("clm_"),
            trigger_type="user_question",
            trigger_ref=f"replay/{case.id}",
            question=given.question,
            statement=given.statement,
            citations=tuple(Citation(GLOBAL, stored[n].document_id, stored[n].version) for n in given.cited),
        )
        for name in given.gone:
            KnowledgeIndex(services).remove_document(stored[name].document_id)
        with contextlib.suppress(AgentGaveUp):
            Critic(services, model, recorder).check(claim)


class CorrelatorInvoker(_RealInvoker):
    """The correlator on the case's family, after its seed flows are recorded in that family."""

    name = "correlator"

    def _run(self, services: Services, case: ReplayCase, model: ChatModel, recorder: ReasoningFlowRecorder) -> None:
        from flowledger.research.agents.correlator import Correlator
        from flowledger.research.agents.recording import AgentGaveUp, research_recorder

        given: CorrelatorInput = case.typed_input()
        seeder = research_recorder(services)  # its own transport: seed flows are not the flow under replay
        for number, seed in enumerate(given.seed_flows, start=1):
            with seeder.flow(given.family, f"replay/seed-{number}", "A seeded flow of the family") as flow:
                flow.step("retrieval", "researcher", "Seeded step of a replay case")
                flow.outcome(seed.outcome, "Seeded outcome of a replay case", confidence=seed.confidence)
        with contextlib.suppress(AgentGaveUp):
            Correlator(services, model, recorder).correlate(given.family)


class ChatInvoker(_RealInvoker):
    """One chat turn through the chat use case, over the case's documents."""

    name = "chat"

    def _run(self, services: Services, case: ReplayCase, model: ChatModel, recorder: ReasoningFlowRecorder) -> None:
        given: ChatInput = case.typed_input()
        _add_documents(services, given.documents)
        _chat_turn(services, model, recorder, given.query)


class DiagnosisInvoker(_RealInvoker):
    """One chat turn the router sends to the diagnosis agent; the demo incident's logs, database and runbook."""

    name = "diagnosis"
    _seeded_at = datetime.min.replace(tzinfo=UTC)

    def _store_overrides(self, case: ReplayCase, scratch: Path) -> dict[str, Any]:
        given: DiagnosisInput = case.typed_input()
        if not given.demo_incident:
            return {"diagnosis_sqlite_path": None}
        from flowledger.diagnosis.demo_database import build_demo_database

        self._seeded_at = _now()  # the logs and the database tell the same night
        return {"diagnosis_sqlite_path": str(build_demo_database(scratch / "demo.sqlite", self._seeded_at))}

    def _run(self, services: Services, case: ReplayCase, model: ChatModel, recorder: ReasoningFlowRecorder) -> None:
        given: DiagnosisInput = case.typed_input()
        if given.demo_incident:
            from flowledger.diagnosis.demo_logs import seed_demo_logs

            seed_demo_logs(services.aws.logs, self._seeded_at)
            runbook = resources.files("flowledger.local").joinpath("demo_documents", DEMO_RUNBOOK).read_text()
            _add_documents(services, {DEMO_RUNBOOK: runbook})
        _chat_turn(services, model, recorder, given.query)


def _chat_turn(services: Services, model: ChatModel, recorder: ReasoningFlowRecorder, query: str) -> None:
    from flowledger.chat.models import ChatRequest
    from flowledger.chat.usecase import CancelToken
    from flowledger.chat.wiring import build_use_case

    use_case = build_use_case(services, model=model)
    use_case.recorder = recorder
    for _ in use_case.run(REPLAY_USER, ChatRequest(query=query), CancelToken()):
        pass  # the turn records its flow when its events are consumed


def _flow_service(services: Services) -> Any:
    from flowledger.reasoning.service import FlowService  # the flow service pulls in the pathway library

    return FlowService(services)


def _offline_model() -> ChatModel:
    from flowledger.llm.offline import OfflineChatModel

    return OfflineChatModel()


def _now() -> datetime:
    # moto keeps 14 days of log events, as CloudWatch does: the demo incident is seeded in the present.
    return datetime.now(UTC).replace(microsecond=0)


REAL_INVOKERS: dict[str, type[_RealInvoker]] = {
    invoker.name: invoker
    for invoker in (ChatInvoker, DiagnosisInvoker, ResearcherInvoker, CriticInvoker, CorrelatorInvoker)
}
