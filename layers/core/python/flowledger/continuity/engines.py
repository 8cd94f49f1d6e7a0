"""The two native engines a turn may run on its sources, and what they hand the answer.

- :class:`NarrativeEngine`: text, Markdown and PDF sources through the scoped knowledge index: an
  excerpt of each named document (``read``), or a relevance search of the readable scopes (``search``);
- :class:`TabularEngine`: one table through the tabular engine: the model fills the bounded plan
  schema (given the columns and, on a follow-up, the previous plan), code checks and runs it on the
  version's Parquet. The plan is returned so that the run stores it and a replay reproduces the rows.

Both return :class:`Evidence`: what the answer may cite, and how completely each source was covered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from flowledger.chat.executors import Budget
from flowledger.chat.models import MAX_PUBLIC_TABLE_ROWS, PublicTable
from flowledger.chat.public_text import public_cell
from flowledger.continuity.refs import Engine, EvidenceStatus
from flowledger.errors import FlowledgerError, InvalidInput, NotFound
from flowledger.identity import Principal
from flowledger.knowledge.index import LookupResult
from flowledger.llm.ports import ChatModel, Message, ModelError
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import DocumentView

MAX_EVIDENCE_CHARS = 1500  # what one source gives the answer model, as the knowledge executor's excerpts
MAX_TABLE_ROWS_SHOWN = MAX_PUBLIC_TABLE_ROWS  # what the answer model reads is what the client is shown
PLAN_MAX_TOKENS = 512  # a table plan: columns, filters, groupings
PLAN_ATTEMPTS = 2  # one correction: the check's reason goes back to the model once


@dataclass(frozen=True)
class EvidenceDocument:
    """One citable piece of evidence: a document's excerpt, a table's result, or the previous answer."""

    document_id: str
    title: str
    text: str
    engine: Engine
    version: int | None = None
    kind: Literal["text", "table", "history"] = "text"  # history: the previous answer, reused
    table: PublicTable | None = None  # a table's result as data: published beside the answer's text


@dataclass(frozen=True)
class SourceRead:
    """How one source fared in an engine: its evidence status and coverage, and the plan a table ran."""

    document: DocumentView
    engine: Engine
    status: EvidenceStatus
    coverage: float
    plan: dict[str, Any] | None = None
    plan_fingerprint: str | None = None
    rows_digest: str | None = None
    rows: int | None = None


@dataclass
class Evidence:
    """What the engines of one turn produced: the citable documents and each source's read."""

    documents: list[EvidenceDocument]
    reads: list[SourceRead]


class ScopedLookup(Protocol):
    def lookup(self, query: str, limit: int = 4, *, scopes: Sequence[str] = ...) -> LookupResult: ...

    def read_documents(self, query: str, documents: Sequence[tuple[str, str]]) -> LookupResult: ...


class NarrativeEngine:
    """Narrative evidence through the scoped index: named documents, or a relevance search."""

    def __init__(self, index: ScopedLookup) -> None:
        self._index = index

    def read(self, query: str, sources: Sequence[DocumentView]) -> Evidence:
        """An excerpt of every source (its best chunk for ``query``); one that is not indexed is ``failed``."""
        result = self._index.read_documents(query, [(source.scope, source.document_id) for source in sources])
        found = {hit.document_id: hit for hit in result.documents}
        documents, reads = [], []
        for source in sources:
            hit = found.get(source.document_id)
            if hit is None:
                reads.append(SourceRead(source, "narrative", "failed", 0.0))
                continue
            documents.append(_excerpt(source.document_id, source.title or source.file_name, hit.excerpt, source))
            reads.append(SourceRead(source, "narrative", "completed", 1.0))
        return Evidence(documents, reads)

    def search(self, query: str, scopes: Sequence[str], limit: int = 4) -> LookupResult:
        """The best documents for ``query`` in ``scopes`` (relevance-bounded: at most ``limit``)."""
        return self._index.lookup(query, limit, scopes=scopes)


def _excerpt(document_id: str, title: str, text: str, source: DocumentView | None) -> EvidenceDocument:
    version = source.current_version if source is not None else None
    return EvidenceDocument(document_id, title, text[:MAX_EVIDENCE_CHARS], "narrative", version)


TABULAR_INSTRUCTIONS = (
    "Fill in the query plan that answers the question over the table whose columns are given. Use only "
    "those columns. When a previous plan is given, the question follows up on it: keep what it still asks "
    "for and change only what the question changes. Answer with the JSON object only."
)


class TabularEngine:
    """A table's evidence: a bounded plan from the model, checked and run by code on the version's Parquet."""

    def __init__(self, model: ChatModel, documents: DocumentService, timeout: float) -> None:
        self._model, self._documents, self._timeout = model, documents, timeout

    def read(
        self,
        principal: Principal,
        query: str,
        source: DocumentView,
        previous_plan: dict[str, Any] | None,
        budget: Budget,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Evidence:
        """The result of one plan on ``source``'s current version; ``failed`` when no valid plan was made.

        Each model call is checked against ``budget`` first (``BudgetExhausted`` ends the turn).
        """
        from flowledger import tabular  # DuckDB loads only when a table is read
        from flowledger.tabular.order import in_answer_order

        try:
            family, version, parquet = self._documents.table(principal, source.document_id)
        except (NotFound, InvalidInput):  # revoked or replaced since it was reauthorised: not read, and said
            return Evidence([], [SourceRead(source, "tabular", "failed", 0.0)])
        columns = [tabular.TabularColumn(**column) for column in version.conversion.columns]
        messages = [
            Message("system", TABULAR_INSTRUCTIONS),
            Message(
                "user",
                json.dumps(
                    {
                        "query": query,
                        "columns": [column.model_dump() for column in columns],
                        "previous_plan": previous_plan,
                    },
                    ensure_ascii=False,
                ),
            ),
        ]
        for _ in range(PLAN_ATTEMPTS):
            if cancelled():
                break
            budget.check_model_call(reserve=0)
            budget.model_calls += 1
            try:
                timeout, max_tokens = budget.call_bounds(self._timeout, PLAN_MAX_TOKENS)
                reply = self._model.complete(
                    messages, schema=tabular.TABULAR_PLAN_SCHEMA, timeout_seconds=timeout, max_tokens=max_tokens
                )
            except ModelError:
                break
            budget.tokens += reply.usage.total
            try:
                # Ordered by code, not by the model: a breakdown reads in key order unless the question ranks.
                plan = in_answer_order(tabular.parse_plan(reply.data), query)
                result = tabular.run_plan(parquet, plan, columns)
            except FlowledgerError as exc:  # an invalid or too expensive plan: its reason goes back once
                messages = [*messages, Message("user", json.dumps({"plan_refused": str(exc)[:500]}))]
                continue
            return _table_evidence(family, version.version, plan, result, query)
        return Evidence([], [SourceRead(family, "tabular", "failed", 0.0)])


def _table_evidence(family: DocumentView, version: int, plan: Any, result: Any, query: str) -> Evidence:
    from flowledger.tabular.order import answer_size

    shown = result.rows[:MAX_TABLE_ROWS_SHOWN]
    total = max(answer_size(plan, query, result.total_rows), len(shown))
    lines = [
        ", ".join(f"{name} {_cell(value)}" for name, value in zip(result.columns, row, strict=True)) + "."
        for row in shown
    ]
    head = f"The result has {total} rows; the first {len(shown)} are listed. " if len(shown) < total else ""
    text = (head + (" ".join(lines) or "No row matched."))[:MAX_EVIDENCE_CHARS]
    # The client gets every shown row as data; the answer model's text may stop earlier, said in coverage.
    more = len(shown) < total or len(head + " ".join(lines)) > MAX_EVIDENCE_CHARS
    # Coverage of a cut result is the share of its rows shown: strictly below 1, so a cut table is
    # never claimed as fully covered.
    coverage = 1.0 if not more else max(0.01, min(0.99, len(shown) / max(total, len(shown) + 1)))
    table = PublicTable(
        document_id=family.document_id,
        title=family.title or family.file_name,
        columns=list(result.columns),
        rows=[[public_cell(value) for value in row] for row in shown],
        total_rows=total,
        rows_shown=len(shown),
    )
    read = SourceRead(
        family,
        "tabular",
        "partial" if more else "completed",
        coverage,
        plan=plan.model_dump(mode="json"),
        plan_fingerprint=result.plan_fingerprint,
        rows_digest=result.rows_digest,
        rows=len(result.rows),
    )
    document = EvidenceDocument(
        family.document_id, family.title or family.file_name, text, "tabular", version, "table", table
    )
    return Evidence([document], [read])


def _cell(value: Any) -> str:
    return "empty" if value is None else str(value)
