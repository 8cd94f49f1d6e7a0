"""Chat requests, runs and the protocol-neutral events a turn produces."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from flowledger.continuity.request import SourceRequest

SESSION_PATTERN = r"^ses_[0-9A-Z]{26}$"
RUN_PATTERN = r"^run_[0-9A-Z]{26}$"
MAX_QUERY_CHARS = 4000
MAX_SESSIONS_PAGE = 50  # sessions per page of GET /api/chat/sessions
MAX_TITLE_CHARS = 120  # a session's title: its first query, cut here
_TEXT = re.compile(r"\S")  # a query needs one character that is not whitespace


class Intent(StrEnum):
    SYSTEM_CHAT = "SYSTEM_CHAT"
    KNOWLEDGE_QUERY = "KNOWLEDGE_QUERY"
    DIAGNOSIS = "DIAGNOSIS"


class RunStatus(StrEnum):
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class ReleaseOutcome(StrEnum):
    SUCCESS = "SUCCESS"
    FALLBACK = "FALLBACK"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class StatusCode(StrEnum):
    """The only progress codes a client ever sees: fixed, and free of model output."""

    ROUTING = "ROUTING"
    ROUTED_SYSTEM_CHAT = "ROUTED_SYSTEM_CHAT"
    ROUTED_KNOWLEDGE_QUERY = "ROUTED_KNOWLEDGE_QUERY"
    ROUTED_DIAGNOSIS = "ROUTED_DIAGNOSIS"
    RESOLVING_SOURCES = "RESOLVING_SOURCES"
    ANALYZING_TABLE = "ANALYZING_TABLE"
    LOOKING_UP_KNOWLEDGE = "LOOKING_UP_KNOWLEDGE"
    COMPOSING_ANSWER = "COMPOSING_ANSWER"
    DIAGNOSING = "DIAGNOSING"
    QUERYING_LOGS = "QUERYING_LOGS"
    QUERYING_DATABASE = "QUERYING_DATABASE"
    CHECKING_EVIDENCE = "CHECKING_EVIDENCE"
    RELEASING = "RELEASING"


def _has_text(query: str) -> str:
    # Kept as sent (the router and executors get the query unchanged); only a blank one is refused.
    if not _TEXT.search(query):
        raise ValueError("query must contain a character other than whitespace")
    return query


class ChatRequest(SourceRequest):
    """A chat turn: the query, the session it continues, and its source fields (``SourceRequest``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: Annotated[
        str,
        StringConstraints(strict=True, min_length=1, max_length=MAX_QUERY_CHARS),
        AfterValidator(_has_text),
        Field(json_schema_extra={"pattern": _TEXT.pattern}),
    ]
    session_id: Annotated[str, StringConstraints(strict=True, pattern=SESSION_PATTERN)] | None = None


def _is_none(value: Any) -> bool:
    return value is None


class Reference(BaseModel):
    document_id: str
    title: str
    # Knowledge-base documents have no versions: their references stay as they always were.
    version: int | None = Field(
        None, description="the document version the answer read, when it has versions", exclude_if=_is_none
    )


ReasonCode = Literal[
    "model_refused_request",
    "model_timeout",
    "model_transport",
    "model_invalid_output",
    "model_degenerate_output",
    "model_error",
]
SourceHow = Literal["selected", "all", "history", "relevance"]
SourceOutcomeCode = Literal["read", "reused", "rerun", "changed", "revoked", "deleted", "failed"]


class SourceUse(BaseModel):
    """One source of a grounded turn, as the source-context indicator shows it."""

    document_id: str
    file_name: str
    version: int | None = None
    how: SourceHow = Field(description="what brought it in: the selection, all documents, history or a search")
    engine: Literal["narrative", "tabular", "history"] | None = Field(None, description="what read it this turn")
    outcome: SourceOutcomeCode
    evidence_status: Literal["completed", "partial", "failed", "skipped"] | None = None
    coverage: float | None = None


class SourceContext(BaseModel):
    """How a turn was grounded (conversation continuity): its basis, decision, engines and sources."""

    basis: SourceHow
    decision: Literal["history", "narrative", "tabular", "both"] = Field(
        description="history: answered from the conversation, no engine ran; else the engines that ran"
    )
    engines: list[Literal["narrative", "tabular"]]
    sources: list[SourceUse] = Field(default_factory=list, max_length=100)


MAX_PUBLIC_TABLE_ROWS = 50  # rows of a table answer a client is sent (the answer model reads the same)
TableCell = str | int | float | bool | None


def _is_empty(value: Any) -> bool:
    return not value


class PublicTable(BaseModel):
    """A table answer's result as data: its columns and the rows shown, in the plan's order."""

    document_id: str
    title: str
    columns: list[str]
    rows: list[list[TableCell]] = Field(max_length=MAX_PUBLIC_TABLE_ROWS)
    total_rows: int = Field(ge=0, description="the rows the plan's answer has; more than rows_shown when cut")
    rows_shown: int = Field(ge=0, description="len(rows)")


class PublicContent(BaseModel):
    """What a client may see of an answer: never tool-call ids, raw evidence or guard reasons."""

    text: str
    references: list[Reference] = Field(default_factory=list)
    limitations: str | None = None
    # With continuity off there is no source context, and the content is what it always was.
    source_context: SourceContext | None = Field(None, exclude_if=_is_none)
    tables: list[PublicTable] = Field(
        default_factory=list,
        max_length=10,
        description="the result of each table the answer computed on, as data beside the text",
        exclude_if=_is_empty,
    )


FLOW_ID_DESCRIPTION = (
    "the reasoning flow recording this turn (GET /admin/v1/reasoning/flows/{flow_id}; the console's "
    "/console/flows/{flow_id}); null when flow capture is off or the flow could not be recorded"
)


class StartEvent(BaseModel):
    type: Literal["start"] = "start"
    session_id: str
    run_id: str
    flow_id: str | None = Field(
        None,
        description=FLOW_ID_DESCRIPTION + ". Chosen when the turn starts; the flow is written when the turn "
        "ends, so read it after done or error, which repeat it only if it was written",
    )


class StatusEvent(BaseModel):
    type: Literal["status"] = "status"
    code: StatusCode


class ContentEvent(BaseModel):
    type: Literal["content"] = "content"
    content: PublicContent


class DoneEvent(BaseModel):
    type: Literal["done"] = "done"
    session_id: str
    run_id: str
    status: RunStatus
    intent: Intent | None
    release_outcome: ReleaseOutcome
    model: str
    offline_model: bool
    flow_id: str | None = Field(None, description=FLOW_ID_DESCRIPTION + "; sent once the flow is written")


class ErrorEvent(BaseModel):
    type: Literal["error"] = "error"
    session_id: str | None = None
    run_id: str | None = None
    code: str
    message: str
    flow_id: str | None = Field(None, description=FLOW_ID_DESCRIPTION + "; sent once the flow is written")


ChatEvent = StartEvent | StatusEvent | ContentEvent | DoneEvent | ErrorEvent


class RunView(BaseModel):
    """One run as its owner sees it: the question asked and the public answer, never the published result."""

    session_id: str
    run_id: str
    query: str
    status: RunStatus
    intent: Intent | None = None
    release_outcome: ReleaseOutcome | None = None
    created_at: str
    finished_at: str | None = None
    duration_ms: int | None = None
    budget_usage: dict[str, Any] | None = None
    flow_id: str | None = Field(
        None,
        description=FLOW_ID_DESCRIPTION + ". Stored when the turn starts and removed if the flow is lost, so "
        "a run still RUNNING names a flow not written yet",
    )
    model: str | None = None
    offline_model: bool | None = None
    content: PublicContent | None = None  # what the turn published to its client; None unless it succeeded
    reason_code: ReasonCode | None = Field(
        None,
        description="why a model call failed, for operators (beside the public outcome)",
        exclude_if=_is_none,
    )
    model_modes: dict[str, str] | None = Field(
        None, description="how the model server was asked for structured output and tools", exclude_if=_is_none
    )


class RunPage(BaseModel):
    runs: list[RunView]
    next_cursor: str | None


class SessionView(BaseModel):
    """One of the caller's chat sessions: its first question as a title, when it began and last ran a turn."""

    session_id: str
    title: str = Field(description=f"the session's first query, at most {MAX_TITLE_CHARS} characters")
    created_at: str
    last_active_at: str


class SessionPage(BaseModel):
    sessions: list[SessionView]
    next_cursor: str | None


class ErrorDetail(BaseModel):
    code: str
    message: str


class ChatResult(BaseModel):
    """The JSON variant of a turn (``Accept: application/json``): what the stream would have ended with."""

    status_codes: list[StatusCode]
    session_id: str | None = None
    run_id: str | None = None
    content: PublicContent | None = None
    status: RunStatus | None = None
    intent: Intent | None = None
    release_outcome: ReleaseOutcome | None = None
    model: str | None = None
    offline_model: bool | None = None
    flow_id: str | None = Field(None, description=FLOW_ID_DESCRIPTION)
    error: ErrorDetail | None = None
