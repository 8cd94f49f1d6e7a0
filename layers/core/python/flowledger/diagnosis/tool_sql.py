"""``query_sql``: one read-only SELECT against the application's database, as a diagnosis tool.

The statement is checked (:func:`flowledger.diagnosis.sql.check_read_only`) before anything runs;
a refused statement is answered ``REFUSED`` with the reason and never reaches the database. The
rows come back as compact JSON, ``{"columns": [...], "rows": [[...], ...], "truncated": bool}``,
cut by whole rows to MAX_OBSERVATION_ROWS and MAX_OBSERVATION_CHARS so it always stays valid JSON.
"""

from __future__ import annotations

import json
from typing import Any

from flowledger.diagnosis.sql import CheckedQuery, UnsafeQuery, check_read_only
from flowledger.diagnosis.sql_sources import SqlError, SqlRejected, SqlRows, SqlSource, TableSchema
from flowledger.diagnosis.tools import MAX_OBSERVATION_CHARS, MAX_OBSERVATION_ROWS, ToolOutcome, ToolResult
from flowledger.llm.ports import ToolSpec

TOOL_NAME = "query_sql"
_DIALECT_NAMES = {"sqlite": "SQLite", "mysql": "MySQL"}
_DESCRIBE_TIMEOUT_SECONDS = 5.0
_MAX_SCHEMA_CHARS = 3000  # the description is sent with every model call


class QuerySqlTool:
    """The ``query_sql`` tool over one :class:`SqlSource`."""

    def __init__(self, source: SqlSource, row_cap: int = MAX_OBSERVATION_ROWS) -> None:
        self._source = source
        self._row_cap = max(1, min(row_cap, MAX_OBSERVATION_ROWS))
        self._schema: tuple[TableSchema, ...] | None = None

    def _tables(self) -> tuple[TableSchema, ...] | None:
        # Described once; a failure is not cached, so a database that comes back is described then.
        if self._schema is None:
            try:
                self._schema = self._source.describe(_DESCRIBE_TIMEOUT_SECONDS)
            except SqlError:
                return None
        return self._schema

    @property
    def spec(self) -> ToolSpec:
        """The strict tool schema, its description naming the dialect, the rules and the tables."""
        dialect = self._source.dialect
        tables = self._tables()
        listed = (
            "; ".join(f"{t.name}({', '.join(f'{c} {k}' for c, k in t.columns)})" for t in tables)
            if tables
            else "(the table list is unavailable right now)"
        )
        if len(listed) > _MAX_SCHEMA_CHARS:
            listed = listed[: _MAX_SCHEMA_CHARS - 1] + "…"
        description = (
            f"Run one read-only SELECT against the application's {_DIALECT_NAMES.get(dialect, dialect)} database "
            f"(SQL dialect: {dialect}). One statement only: SELECT, WITH (not recursive), UNION, INTERSECT, EXCEPT; "
            "no writes, INTO, locking reads, variables, hints or system tables; common aggregate, window, "
            f"text and date functions only. At most {self._row_cap} rows come back (LIMIT is added or lowered). "
            f"Tables: {listed}."
        )
        return ToolSpec(
            name=TOOL_NAME,
            description=description,
            parameters={
                "type": "object",
                "properties": {"sql": {"type": "string", "description": f"One {dialect} SELECT statement."}},
                "required": ["sql"],
                "additionalProperties": False,
            },
        )

    def run(self, arguments: dict[str, Any], *, timeout_seconds: float) -> ToolResult:
        """Check, then run the statement; REFUSED (not run) when unsafe, FAILED when the database did not answer."""
        sql = arguments.get("sql")
        if not isinstance(sql, str):
            return _refused("the sql argument must be a string")
        try:
            checked = check_read_only(sql, self._source.dialect, self._row_cap)
        except UnsafeQuery as refusal:
            return _refused(refusal.reason)
        try:
            result = self._source.execute(checked, timeout_seconds)
        except SqlRejected as exc:
            return _refused(exc.reason)
        except SqlError as exc:
            return ToolResult(ToolOutcome.FAILED, f"failed: {exc.reason}")
        return observation(checked, result)


def observation(checked: CheckedQuery, result: SqlRows) -> ToolResult:
    """The rows as the model reads them: compact JSON within the observation bounds, cut by whole rows.

    ``details`` keeps the statement as it ran and every row returned, for the flow's step to bound.
    """
    details: dict[str, Any] = {
        "statement": checked.sql,
        "tables": list(checked.tables),
        "columns": list(result.columns),
        "rows": [list(row.values()) for row in result.rows],
        "more_rows": bool(result.truncated) or (checked.capped and len(result.rows) >= checked.limit),
    }
    if not result.rows:
        return ToolResult(ToolOutcome.EMPTY, _render(result.columns, [], False), details=details)
    rows = [list(row.values()) for row in result.rows[:MAX_OBSERVATION_ROWS]]
    # More rows may exist when the check set the LIMIT and the database filled it.
    truncated = (
        result.truncated or len(result.rows) > len(rows) or (checked.capped and len(result.rows) >= checked.limit)
    )
    text = _render(result.columns, rows, truncated)
    if len(text) > MAX_OBSERVATION_CHARS:
        truncated = True
        low, high = 0, len(rows)  # the most rows whose rendering fits
        while low < high:
            middle = (low + high + 1) // 2
            if len(_render(result.columns, rows[:middle], True)) <= MAX_OBSERVATION_CHARS:
                low = middle
            else:
                high = middle - 1
        rows = rows[:low]
        text = _render(result.columns, rows, True)
        if len(text) > MAX_OBSERVATION_CHARS:  # the column names alone are too long
            return ToolResult(
                ToolOutcome.FAILED, "failed: the result's columns do not fit in one observation", details=details
            )
    return ToolResult(ToolOutcome.OK, text, rows=len(rows), truncated=truncated, details=details)


def _render(columns: tuple[str, ...], rows: list[list[Any]], truncated: bool) -> str:
    payload = {"columns": list(columns), "rows": rows, "truncated": truncated}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


def _refused(reason: str) -> ToolResult:
    text = f"refused: {' '.join(reason.split())}"
    return ToolResult(ToolOutcome.REFUSED, text[:MAX_OBSERVATION_CHARS])
