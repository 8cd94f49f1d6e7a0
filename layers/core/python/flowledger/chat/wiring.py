"""Builds the chat use case from the services: the model, the router, the three executors."""

from __future__ import annotations

import time

from flowledger.chat.executors import Budget, KnowledgeExecutor, SystemChatExecutor
from flowledger.chat.models import Intent
from flowledger.chat.router import IntentRouter
from flowledger.chat.runs import RunStore
from flowledger.chat.usecase import ChatApplicationUseCase
from flowledger.config import Settings
from flowledger.continuity.grounding import ContinuityService
from flowledger.diagnosis.wiring import build_diagnosis_executor
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
    index = index or KnowledgeIndex(services)
    return ChatApplicationUseCase(
        runs=RunStore(services),
        router=IntentRouter(model, HarnessRetryPolicies.intent_router(), timeout),
        executors={
            Intent.SYSTEM_CHAT: SystemChatExecutor(model, answer, timeout),
            Intent.KNOWLEDGE_QUERY: KnowledgeExecutor(model, index, answer, timeout),
            Intent.DIAGNOSIS: build_diagnosis_executor(services, model, index),
        },
        model=model,
        recorder=recorder_for(services.settings, InProcessTransport(FlowService(services), CHAT_RECORDER)),
        budget=lambda: turn_budget(services.settings),
        continuity=_continuity(services, model, index),
    )


def _continuity(services: Services, model: ChatModel, index: KnowledgeIndex) -> ContinuityService | None:
    settings = services.settings
    if not settings.enable_mixed_source_conversation_continuity:
        return None
    return ContinuityService(
        services,
        model,
        index,
        native_reruns=settings.continuity_native_reruns,
        timeout=settings.model_timeout_seconds,
    )


def turn_budget(settings: Settings) -> Budget:
    """A turn's budget from the settings; its deadline is the diagnosis's wall-clock limit from now."""
    return Budget(
        max_model_calls=settings.diagnosis_max_model_calls,
        max_tool_calls=settings.diagnosis_max_tool_calls,
        max_tokens=settings.diagnosis_max_tokens,
        deadline=time.monotonic() + settings.diagnosis_max_seconds,
    )
