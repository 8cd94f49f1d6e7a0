"""The ``query_sql`` tool over the SQLite demo database: spec, refusals never run, empty, bounded rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flowledger.diagnosis import demo_incident as incident
from flowledger.diagnosis.demo_database import build_demo_database
from flowledger.diagnosis.sql import CheckedQuery
from flowledger.diagnosis.sql_sources import SqliteReadOnlySource, SqlRows, TableSchema
from flowledger.diagnosis.tool_sql import QuerySqlTool
from flowledger.diagnosis.tools import MAX_OBSERVATION_CHARS, ToolOutcome

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


class RecordingSource:
    """The real SQLite source, with a record of what reached it."""

    def __init__(self, path: Path) -> None:
        self.inner = SqliteReadOnlySource(path)
        self.executed: list[str] = []
        self.described = 0

    @property
    def dialect(self) -> str:
        return self.inner.dialect

    def execute(self, checked: CheckedQuery, timeout_seconds: float) -> SqlRows:
        self.executed.append(checked.sql)
        return self.inner.execute(checked, timeout_seconds)

    def describe(self, timeout_seconds: float) -> tuple[TableSchema, ...]:
        self.described += 1
        return self.inner.describe(timeout_seconds)


@pytest.fixture
def source(tmp_path: Path) -> RecordingSource:
    return RecordingSource(build_demo_database(tmp_path / "demo.sqlite", NOW))


@pytest.fixture
def tool(source: RecordingSource) -> QuerySqlTool:
    return QuerySqlTool(source, row_cap=200)


def test_the_spec_is_strict_and_names_dialect_and_tables(tool: QuerySqlTool) -> None:
    spec = tool.spec
    assert spec.name == "query_sql"
    assert spec.parameters == {
        "type": "object",
        "properties": {"sql": {"type": "string", "description": "One sqlite SELECT statement."}},
        "required": ["sql"],
        "additionalProperties": False,
    }
    assert "SQL dialect: sqlite" in spec.description
    assert "orders(id TEXT, created_at TEXT, status TEXT, amount_cents INTEGER, failure_code TEXT)" in spec.description
    assert "payment_attempts(" in spec.description and "deployments(" in spec.description
    assert "200 rows" in spec.description


def test_the_schema_is_described_once(tool: QuerySqlTool, source: RecordingSource) -> None:
    first, second = tool.spec, tool.spec
    assert first == second
    assert source.described == 1


def test_a_schema_that_could_not_be_read_is_read_again_later(tmp_path: Path) -> None:
    path = tmp_path / "later.sqlite"
    tool = QuerySqlTool(SqliteReadOnlySource(path))
    assert "unavailable" in tool.spec.description
    build_demo_database(path, NOW)
    assert "orders(" in tool.spec.description


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM orders; DROP TABLE orders",
        "SELECT SLEEP(5)",
        "ATTACH DATABASE '/tmp/x.sqlite' AS x",
        "SELECT * FROM orders FOR UPDATE",
        "WITH c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT * FROM c",
        "",
    ],
)
def test_a_refused_statement_is_an_observation_and_never_runs(
    tool: QuerySqlTool, source: RecordingSource, sql: str
) -> None:
    result = tool.run({"sql": sql}, timeout_seconds=5)
    assert result.outcome is ToolOutcome.REFUSED
    assert result.text.startswith("refused: ") and len(result.text) > len("refused: ")
    assert not result.safe
    assert source.executed == []


def test_a_statement_the_database_rejects_is_refused(tool: QuerySqlTool, source: RecordingSource) -> None:
    result = tool.run({"sql": "SELECT no_such_column FROM orders"}, timeout_seconds=5)
    assert result.outcome is ToolOutcome.REFUSED
    assert "no_such_column" in result.text
    assert len(source.executed) == 1


def test_a_non_text_argument_is_refused(tool: QuerySqlTool, source: RecordingSource) -> None:
    assert tool.run({"sql": 42}, timeout_seconds=5).outcome is ToolOutcome.REFUSED
    assert source.executed == []


def test_rows_come_back_as_compact_json(tool: QuerySqlTool) -> None:
    result = tool.run(
        {"sql": "SELECT status, COUNT(*) AS n FROM orders WHERE status = 'failed' GROUP BY status"}, timeout_seconds=5
    )
    assert result.outcome is ToolOutcome.OK
    assert result.safe
    assert json.loads(result.text) == {"columns": ["status", "n"], "rows": [["failed", 312]], "truncated": False}
    assert result.text == '{"columns":["status","n"],"rows":[["failed",312]],"truncated":false}'
    assert (result.rows, result.truncated) == (1, False)
    assert str(incident.FAILED_CHECKOUTS) in result.text


def test_no_rows_is_empty(tool: QuerySqlTool) -> None:
    result = tool.run({"sql": "SELECT id FROM orders WHERE status = 'refunded'"}, timeout_seconds=5)
    assert result.outcome is ToolOutcome.EMPTY
    assert result.safe
    assert json.loads(result.text) == {"columns": ["id"], "rows": [], "truncated": False}
    assert result.rows == 0


def test_rows_are_capped_and_the_cap_is_said(source: RecordingSource) -> None:
    tool = QuerySqlTool(source, row_cap=10)
    result = tool.run({"sql": "SELECT id FROM orders ORDER BY id"}, timeout_seconds=5)
    body = json.loads(result.text)
    assert body["rows"] == [[f"ord_{i:06d}"] for i in range(1, 11)]
    assert body["truncated"] is True
    assert (result.rows, result.truncated) == (10, True)
    assert source.executed == ["SELECT id FROM orders ORDER BY id LIMIT 10"]


def test_a_limit_of_ones_own_is_not_truncation(tool: QuerySqlTool) -> None:
    result = tool.run({"sql": "SELECT id FROM orders ORDER BY id LIMIT 5"}, timeout_seconds=5)
    assert (result.rows, result.truncated) == (5, False)
    assert json.loads(result.text)["truncated"] is False


def test_a_large_result_is_cut_by_whole_rows_to_the_observation_size(tool: QuerySqlTool) -> None:
    result = tool.run({"sql": "SELECT * FROM orders ORDER BY id"}, timeout_seconds=5)
    assert result.outcome is ToolOutcome.OK
    assert len(result.text) <= MAX_OBSERVATION_CHARS
    body = json.loads(result.text)  # still valid JSON: rows are dropped whole, never cut mid-value
    assert body["truncated"] is True and result.truncated
    assert 10 < len(body["rows"]) < 200
    assert result.rows == len(body["rows"])
    assert body["rows"][0][0] == "ord_000001"


def test_a_statement_past_its_deadline_failed(tool: QuerySqlTool) -> None:
    result = tool.run({"sql": "SELECT COUNT(*) FROM orders a, deployments d, payment_attempts p"}, timeout_seconds=0.05)
    assert result.outcome is ToolOutcome.FAILED
    assert "time limit" in result.text
    assert not result.safe


def test_a_missing_database_failed(tmp_path: Path) -> None:
    result = QuerySqlTool(SqliteReadOnlySource(tmp_path / "gone.sqlite")).run({"sql": "SELECT 1"}, timeout_seconds=5)
    assert result.outcome is ToolOutcome.FAILED
