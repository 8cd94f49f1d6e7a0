"""Builds the DIAGNOSIS executor from the settings: the tools that are configured, the loop, the guards.

A tool is offered only when what it reads is configured (log groups for ``query_logs``, a database
for ``query_sql``); the knowledge lookup is always there. With no tool for what a question needs,
the model says so and release answers with a missing-context fallback.
"""

from __future__ import annotations

from flowledger.chat.executors import KnowledgeLookup
from flowledger.config import DiagnosisSqlBackend, Settings
from flowledger.diagnosis.agent import ReActDiagnosisAgent
from flowledger.diagnosis.executor import DiagnosisExecutor
from flowledger.diagnosis.release import DiagnosisRelease
from flowledger.diagnosis.semantic import SemanticGuard
from flowledger.diagnosis.tool_knowledge import LookupKnowledgeTool
from flowledger.diagnosis.tools import DiagnosisTool
from flowledger.llm.ports import ChatModel
from flowledger.llm.retry import HarnessRetryPolicies
from flowledger.services import Services


def diagnosis_tools(services: Services, index: KnowledgeLookup) -> list[DiagnosisTool]:
    """The tools this deployment can offer, in the order the model sees them."""
    settings = services.settings
    tools: list[DiagnosisTool] = []
    if settings.diagnosis_log_group_list:
        from flowledger.diagnosis.tool_logs import QueryLogsTool

        tools.append(QueryLogsTool(services.aws.logs, settings.diagnosis_log_group_list, services.clock))
    if _sql_configured(settings):
        from flowledger.diagnosis.sql_sources import sql_source_for
        from flowledger.diagnosis.tool_sql import QuerySqlTool

        tools.append(QuerySqlTool(sql_source_for(settings), settings.diagnosis_sql_row_cap))
    tools.append(LookupKnowledgeTool(index))
    return tools


def _sql_configured(settings: Settings) -> bool:
    backend = settings.diagnosis_sql_backend
    if backend is DiagnosisSqlBackend.SQLITE:
        return settings.diagnosis_sqlite_path is not None
    if backend is DiagnosisSqlBackend.DATA_API:
        return bool(settings.diagnosis_data_api_resource_arn and settings.diagnosis_data_api_secret_arn)
    return backend is DiagnosisSqlBackend.MYSQL


def build_diagnosis_executor(
    services: Services, model: ChatModel, index: KnowledgeLookup, tools: list[DiagnosisTool] | None = None
) -> DiagnosisExecutor:
    """The executor for one process; ``tools`` replaces the configured ones (tests, benchmarks)."""
    timeout = services.settings.model_timeout_seconds
    agent = ReActDiagnosisAgent(
        model,
        tools if tools is not None else diagnosis_tools(services, index),
        HarnessRetryPolicies.diagnosis_step(),
        timeout,
    )
    guard = SemanticGuard(model, HarnessRetryPolicies.executor_answer(), timeout)
    return DiagnosisExecutor(agent, DiagnosisRelease(guard))
