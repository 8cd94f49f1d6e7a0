"""``lookup_knowledge`` for the diagnosis agent: the same knowledge index the knowledge executor reads."""

from __future__ import annotations

import json
from typing import Any

from flowledger.chat.executors import KnowledgeLookup
from flowledger.diagnosis.tools import ToolOutcome, ToolResult, bounded_text
from flowledger.errors import FlowledgerError
from flowledger.llm.ports import ToolSpec

MAX_EXCERPT_CHARS = 1200
MAX_QUERY_CHARS = 500
DOCUMENTS_PER_LOOKUP = 3


class LookupKnowledgeTool:
    def __init__(self, index: KnowledgeLookup) -> None:
        self._index = index

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            "lookup_knowledge",
            "Search the knowledge base (runbooks, architecture notes, policies) and return the best-matching "
            "documents with an excerpt each.",
            {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to look for, in plain words"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        )

    def run(self, arguments: dict[str, Any], *, timeout_seconds: float) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
            return ToolResult(ToolOutcome.REFUSED, f"query must be 1 to {MAX_QUERY_CHARS} characters of text")
        try:
            result = self._index.lookup(query.strip(), limit=DOCUMENTS_PER_LOOKUP)
        except FlowledgerError as exc:
            return ToolResult(ToolOutcome.FAILED, f"the knowledge index failed: {exc.code}")
        if result.status != "READY":
            return ToolResult(ToolOutcome.FAILED, "the knowledge index is not ready")
        if result.evidence == "NO_EVIDENCE" or not result.documents:
            return ToolResult(ToolOutcome.EMPTY, json.dumps({"documents": []}), details={"query": query.strip()})
        documents = [
            {"document_id": d.document_id, "title": d.title, "excerpt": d.excerpt[:MAX_EXCERPT_CHARS]}
            for d in result.documents
        ]
        text, truncated = bounded_text(json.dumps({"documents": documents}, ensure_ascii=False))
        return ToolResult(
            ToolOutcome.OK,
            text,
            rows=len(documents),
            truncated=truncated,
            documents=tuple({"document_id": d.document_id, "title": d.title} for d in result.documents),
            details={"query": query.strip(), "documents": documents},
        )
