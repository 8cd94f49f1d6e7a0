"""Positional column names: how the engine and the conversion name a table's columns to DuckDB.

DuckDB parses a ``ColumnExpression``'s name as a qualified name, so a column called ``we"ird`` (or
``a.b``) cannot be named through it safely. A relation is renamed ``#c0``, ``#c1``, ... by position
first (``#1 AS "#c0"``: generated text only, nothing from the file); plans and checks name those, and
an answer's columns get their real names back as aliases, which DuckDB never parses.
"""

from __future__ import annotations

import duckdb


def positional(table: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """``table`` with its columns renamed ``#c0``, ``#c1``, ... by position."""
    renamed = ", ".join(f'#{index + 1} AS "{position(index)}"' for index in range(len(table.columns)))
    return table.query("plan_input", f"SELECT {renamed} FROM plan_input")  # noqa: S608 - positions only


def position(index: int) -> str:
    """The positional name of column ``index``; "#" is in no alias a plan may give, so none clashes."""
    return f"#c{index}"
