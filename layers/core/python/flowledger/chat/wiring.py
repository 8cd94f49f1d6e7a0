"""Builds the chat use case from the services: the model, the router, the three executors."""

from __future__ import annotations

from flowledger.chat.executors import (
    DiagnosisExecutor,
    DiagnosisRelease,
    KnowledgeExecutor,
    SystemChatExecutor,
    UnconfiguredDiagnosisAgent,
)
from flowledger.chat.models import Intent
from flowledger.chat.router import IntentRouter
from flowledger.chat.runs import RunStore
from flowledger.chat.usecase import ChatApplicationUseCase
from flowledger.identity import Principal
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.factory import chat_model_for
from flowledger.llm.ports import ChatModel
from flowledger.llm.retry import HarnessRetryPolicies
from flowledger.reasoning.recorder import InProcessTransport, recorder_for
from flowledger.reasoning.service import FlowService
from flowledger.services import Services

# The identity chat turns are recorded under (the flow's writer).
CHAT_RECORDER = Principal(kind="user", id="service:chat", scopes=frozenset({"reasoning.write"}))


def build_use_case(
    services: Services, model: ChatModel | None = None, index: KnowledgeIndex | None = None
) -> ChatApplicationUseCase:
    """The use case for one process (the knowledge index keeps its corpus cache across turns)."""
    model = model or chat_model_for(services.settings)
    timeout = services.settings.model_timeout_seconds
    answer = HarnessRetryPolicies.executor_answer()
    return ChatApplicationUseCase(
        runs=RunStore(services),
        router=IntentRouter(model, HarnessRetryPolicies.intent_router(), timeout),
        executors={
            Intent.SYSTEM_CHAT: SystemChatExecutor(model, answer, timeout),
            Intent.KNOWLEDGE_QUERY: KnowledgeExecutor(model, index or KnowledgeIndex(services), answer, timeout),
            Intent.DIAGNOSIS: DiagnosisExecutor(UnconfiguredDiagnosisAgent(), DiagnosisRelease()),
        },
        model=model,
        recorder=recorder_for(services.settings, InProcessTransport(FlowService(services), CHAT_RECORDER)),
    )
