"""What every diagnosis tool is: a strict tool schema for the model, and a bounded, typed result.

A tool never raises for something the model asked badly (a refused statement, an unknown log
group, a window too wide): it answers ``REFUSED`` with a reason the model may read, so the refusal
becomes an observation and the loop goes on. ``FAILED`` is a dependency that did not answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from flowledger.llm.ports import ToolSpec

# What one observation may hold, as the model and the evidence guard see it.
MAX_OBSERVATION_CHARS = 6000
MAX_OBSERVATION_ROWS = 200


class ToolOutcome(StrEnum):
    OK = "ok"  # the tool answered with at least one row, event or document
    EMPTY = "empty"  # the tool answered, and found nothing
    REFUSED = "refused"  # the request was not run (unsafe SQL, a log group outside the allow-list, ...)
    FAILED = "failed"  # the dependency did not answer (timeout, throttling, connection refused)


@dataclass(frozen=True)
class ToolResult:
    outcome: ToolOutcome
    # Compact JSON (or a one-line reason when refused or failed), at most MAX_OBSERVATION_CHARS:
    # what the model reads and what the evidence guard searches for quoted facts.
    text: str
    rows: int = 0
    truncated: bool = False
    # lookup_knowledge only: the documents returned, as {"document_id": ..., "title": ...}
    documents: tuple[dict[str, str], ...] = ()
    # What the tool ran and found, structured, for the flow's step (bounded there; never sent to the model):
    # query_sql {"statement", "tables", "columns", "rows"}, query_logs {"log_group", "start", "end", "terms",
    # "limit", "events"}, lookup_knowledge {"query", "documents"}.
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def safe(self) -> bool:
        """True when this result is evidence: the tool ran and answered (rows or an honest empty)."""
        return self.outcome in (ToolOutcome.OK, ToolOutcome.EMPTY)


class DiagnosisTool(Protocol):
    """One tool of the agent. ``run`` gets the model's arguments, already validated against ``spec``."""

    @property
    def spec(self) -> ToolSpec: ...

    def run(self, arguments: dict[str, Any], *, timeout_seconds: float) -> ToolResult: ...


def bounded_text(text: str, limit: int = MAX_OBSERVATION_CHARS) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters, and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[: limit - 1] + "…", True)
