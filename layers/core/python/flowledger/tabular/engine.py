"""The engine: a checked plan compiled by code through DuckDB's relational API and run on one Parquet file.

No text from the plan reaches SQL as SQL: column names go through ``ColumnExpression`` (always quoted),
values through ``ConstantExpression``, functions are named by this module. The connection reads only the
one Parquet file, cannot change its configuration, and is interrupted at the deadline. Results are
bounded (rows, cell length, total bytes) and deterministic: after the plan's own order keys, ties are
broken by every group column (or every column when listing rows), and one thread adds floats in one order.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
from duckdb import ColumnExpression, ConstantExpression, Expression, FunctionExpression
from pydantic import BaseModel, ConfigDict

from flowledger.tabular.columns import TabularColumn
from flowledger.tabular.errors import InvalidPlan, MalformedTable, TableSchemaMismatch
from flowledger.tabular.formulas import neutralised
from flowledger.tabular.limits import DEFAULT_LIMITS, TabularLimits
from flowledger.tabular.plan import Aggregate, CheckedPlan, Filter, TabularPlan, check_plan, plan_fingerprint
from flowledger.tabular.positions import position as _position
from flowledger.tabular.positions import positional
from flowledger.tabular.sandbox import deadline, locked_connection, private_directory

Cell = str | int | float | bool | None
_TRUNCATION_MARK = "…"


class TabularResult(BaseModel):
    """The bounded answer to a plan: output column names and types, and JSON-ready rows."""

    model_config = ConfigDict(frozen=True)

    columns: list[str]
    types: list[str]
    rows: list[list[Cell]]
    more_rows: bool  # the plan matched more rows than are returned (its limit, or the byte budget)
    total_rows: int  # the rows (groups) the plan's filters and grouping give, before its limit
    truncated_cells: int  # text cells cut to the cell limit
    plan_fingerprint: str
    rows_digest: str  # SHA-256 of the canonical columns and rows: a replay must reproduce it


def run_plan(
    parquet: bytes | Path,
    plan: TabularPlan,
    columns: Sequence[TabularColumn],
    limits: TabularLimits = DEFAULT_LIMITS,
) -> TabularResult:
    """Run ``plan`` on one converted version (its Parquet bytes or file, and its stored columns).

    The plan is checked against ``columns`` first (InvalidPlan, 422); the Parquet must have exactly those
    columns (TableSchemaMismatch, 409). Past ``limits.query_seconds`` it is QueryTooExpensive (422).
    """
    checked = check_plan(plan, columns)
    if isinstance(parquet, Path):
        return _run(parquet.resolve(), checked, limits)
    with private_directory() as work:
        path = work / "table.parquet"
        path.write_bytes(parquet)
        return _run(path, checked, limits)


def _run(path: Path, checked: CheckedPlan, limits: TabularLimits) -> TabularResult:
    with (
        locked_connection(threads=limits.query_threads, memory_limit_mb=limits.memory_limit_mb, files=[path]) as con,
        deadline(con, limits.query_seconds, "the plan", "add filters or group by fewer columns"),
    ):
        try:
            table = con.read_parquet(str(path))
        except duckdb.IOException as exc:
            raise MalformedTable("the stored table is not readable Parquet") from exc
        found = [(name, str(column_type)) for name, column_type in zip(table.columns, table.types, strict=True)]
        if found != [(column.name, column.type) for column in checked.columns]:
            raise TableSchemaMismatch("the stored columns do not describe this table's Parquet; convert it again")
        relation = compile_plan(table, checked)
        try:
            raw = relation.fetchall()
            names, types = relation.columns, [str(column_type) for column_type in relation.types]
            # Counted only when the limit cut: one more aggregate over the same filters and groups.
            total = _counted(compile_plan(table, checked, limited=False)) if len(raw) > checked.plan.limit else None
        except (duckdb.InterruptException, duckdb.OutOfMemoryException):
            raise
        except duckdb.Error as exc:
            # A checked plan should always bind; what DuckDB still refuses is said in its first line, no SQL.
            raise InvalidPlan(f"the table cannot answer this plan: {str(exc).splitlines()[0][:300]}", "") from exc
    return _bounded(checked.plan, names, types, raw, limits, total)


def _counted(relation: duckdb.DuckDBPyRelation) -> int:
    found = relation.aggregate([FunctionExpression("count")]).fetchone()
    return int(found[0]) if found else 0


def compile_plan(
    table: duckdb.DuckDBPyRelation, checked: CheckedPlan, *, limited: bool = True
) -> duckdb.DuckDBPyRelation:
    """The relation that answers the plan: the table renamed by position (``positions.py``), filters, the
    aggregate, the order, the limit (left off when not ``limited``: to count what the plan matched), and
    the real column names back on the answer as aliases."""
    plan = checked.plan
    names = [column.name for column in checked.columns]
    at = {name: _position(index) for index, name in enumerate(names)}

    def column(name: str) -> Expression:  # a table column by its position, an aggregate by its alias
        return ColumnExpression(f'"{at[name]}"') if name in at else ColumnExpression(name)

    relation = positional(table)
    for item, value in zip(plan.filters, checked.values, strict=True):
        relation = relation.filter(_condition(column(item.column), item, value))
    if checked.aggregated:
        # No groups argument: the relation groups by every item that is not an aggregate (GROUP BY ALL),
        # which are exactly the group_by columns; without them it is one row of totals.
        items = [column(name) for name in plan.group_by]
        items += [_aggregate(aggregate, column).alias(aggregate.alias) for aggregate in plan.aggregates]
        relation = relation.aggregate(items)
    keys = [_ordered(column(key.key), key.direction) for key in plan.order_by]
    ordered = {key.key for key in plan.order_by}
    # Ties are broken by the group columns (by every column when listing rows), so a replay is identical.
    tie_breakers = plan.group_by if checked.aggregated else names
    keys += [_ordered(column(name), "asc") for name in tie_breakers if name not in ordered]
    if keys and limited:
        relation = relation.sort(*keys)
    if limited:  # one row past the limit says whether there were more
        relation = relation.limit(plan.limit + 1)
    shown = [*plan.group_by, *(a.alias for a in plan.aggregates)] if checked.aggregated else names
    return relation.project(*(column(name).alias(name) for name in shown))


def _condition(column: Expression, item: Filter, value: Any) -> Expression:
    match item.op:
        case "=":
            return column == ConstantExpression(value)
        case "!=":
            return column != ConstantExpression(value)
        case "<":
            return column < ConstantExpression(value)
        case "<=":
            return column <= ConstantExpression(value)
        case ">":
            return column > ConstantExpression(value)
        case ">=":
            return column >= ConstantExpression(value)
        case "in":
            return column.isin(*(ConstantExpression(v) for v in value))
        case "not_in":
            return column.isnotin(*(ConstantExpression(v) for v in value))
        case "contains":
            return FunctionExpression("contains", column, ConstantExpression(value))
        case "starts_with":
            return FunctionExpression("starts_with", column, ConstantExpression(value))
        case "is_null":
            return column.isnull()
        case "not_null":
            return column.isnotnull()
    raise InvalidPlan(f"unsupported filter op {item.op!r}", "filters.op")  # unreachable: the model's Literal


def _aggregate(aggregate: Aggregate, column_of: Any) -> Expression:
    if aggregate.column is None:
        return FunctionExpression("count")  # count() is count(*): every row
    column = column_of(aggregate.column)
    if aggregate.function == "count_distinct":
        # count(DISTINCT column): DuckDB 1.5's relational API has no DISTINCT modifier; the distinct
        # elements of the group's list are the same count (NULLs left out, as count(DISTINCT) does).
        return FunctionExpression("list_unique", FunctionExpression("list", column))
    return FunctionExpression(aggregate.function, column)


def _ordered(expression: Expression, direction: str) -> Expression:
    # NULLS LAST both ways: where missing values go is part of the order, not left to a default.
    return (expression.desc() if direction == "desc" else expression.asc()).nulls_last()


def _bounded(
    plan: TabularPlan,
    names: list[str],
    types: list[str],
    raw: list[tuple[Any, ...]],
    limits: TabularLimits,
    total: int | None,
) -> TabularResult:
    more_rows = len(raw) > plan.limit
    names = [neutralised(name) for name in names]  # a header is a cell too
    rows: list[list[Cell]] = []
    truncated = 0
    size = 0
    for record in raw[: plan.limit]:
        row: list[Cell] = []
        cut = 0
        for value in record:
            cell = _cell(value)
            if isinstance(cell, str):
                cell = neutralised(cell)  # shown, never run, wherever the answer is pasted or exported
            if isinstance(cell, str) and len(cell) > limits.max_result_cell_chars:
                cell = cell[: limits.max_result_cell_chars] + _TRUNCATION_MARK
                cut += 1
            row.append(cell)
        size += len(json.dumps(row, ensure_ascii=False).encode())
        if size > limits.max_result_bytes:
            more_rows = True  # the rest is left out whole, never a row cut in half
            break
        rows.append(row)
        truncated += cut
    digest = hashlib.sha256(json.dumps([names, rows], ensure_ascii=False, sort_keys=True).encode()).hexdigest()
    return TabularResult(
        columns=names,
        types=types,
        rows=rows,
        more_rows=more_rows,
        total_rows=len(raw) if total is None else total,
        truncated_cells=truncated,
        plan_fingerprint=plan_fingerprint(plan),
        rows_digest=digest,
    )


def _cell(value: Any) -> Cell:
    """A DuckDB value as JSON: dates and times as ISO text, decimals as floats, NaN and infinities as null."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)
