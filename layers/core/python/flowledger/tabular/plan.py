"""The bounded query plan a model fills in: its strict JSON schema, its model, and its check against a table.

A plan is data, never SQL: filters, group-by columns, aggregates, order keys and a limit. ``check_plan``
refuses, before anything runs, what does not fit the table (an unknown column, a sum over text, an alias
that clashes), with a reason the model can act on; the engine compiles only a checked plan.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

import rfc8785
from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator

from flowledger.llm.ports import JsonSchema
from flowledger.tabular.columns import ColumnKind, TabularColumn
from flowledger.tabular.errors import InvalidPlan

FilterOp = Literal["=", "!=", "<", "<=", ">", ">=", "in", "not_in", "contains", "starts_with", "is_null", "not_null"]
AggregateFunction = Literal["count", "count_distinct", "sum", "avg", "min", "max", "median"]
Direction = Literal["asc", "desc"]

FILTER_OPS: tuple[str, ...] = get_args(FilterOp)
AGGREGATE_FUNCTIONS: tuple[str, ...] = get_args(AggregateFunction)
ALIAS_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_FILTERS = 20
MAX_GROUPS = 10
MAX_AGGREGATES = 20
MAX_ORDER_KEYS = 10
MAX_LIST_VALUES = 100
MAX_VALUE_CHARS = 1000
MAX_NAME_CHARS = 256

_ORDERING_OPS = frozenset({"<", "<=", ">", ">="})
_TEXT_OPS = frozenset({"contains", "starts_with"})
_LIST_OPS = frozenset({"in", "not_in"})
_NULL_OPS = frozenset({"is_null", "not_null"})
_NUMERIC_AGGREGATES = frozenset({"sum", "avg", "median"})
_ORDERABLE = frozenset({"number", "text", "date", "timestamp", "time"})

StrictText = Annotated[str, Strict(), Field(max_length=MAX_VALUE_CHARS)]
StrictNumber = Annotated[float, Strict(), AllowInfNan(False)]
Scalar = StrictText | Annotated[int, Strict()] | StrictNumber | Annotated[bool, Strict()]
FilterValue = Scalar | Annotated[list[Scalar], Field(max_length=MAX_LIST_VALUES)] | None
Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME_CHARS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Filter(_Strict):
    """Keep rows whose ``column`` compares with ``value`` by ``op``; ``value`` is null for is_null/not_null."""

    column: Name
    op: FilterOp
    value: FilterValue


class Aggregate(_Strict):
    """``function`` over ``column`` (null only for count, which then counts rows), named ``alias``."""

    function: AggregateFunction
    column: Name | None
    alias: Annotated[str, Strict(), Field(pattern=ALIAS_PATTERN)]


class OrderKey(_Strict):
    """Order by a group-by column or an aggregate's alias (any column when the plan lists rows)."""

    key: Name
    direction: Direction


class TabularPlan(_Strict):
    """A bounded query over one table. With neither group_by nor aggregates it lists the matching rows."""

    filters: list[Filter] = Field(default_factory=list, max_length=MAX_FILTERS)
    group_by: list[Name] = Field(default_factory=list, max_length=MAX_GROUPS)
    aggregates: list[Aggregate] = Field(default_factory=list, max_length=MAX_AGGREGATES)
    order_by: list[OrderKey] = Field(default_factory=list, max_length=MAX_ORDER_KEYS)
    limit: Annotated[int, Strict(), Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT

    @field_validator("limit", mode="before")
    @classmethod
    def _default_limit(cls, value: Any) -> Any:
        return DEFAULT_LIMIT if value is None else value  # the schema's null means "the default"


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_SCALAR_SCHEMA: list[dict[str, Any]] = [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]

TABULAR_PLAN_SCHEMA = JsonSchema(
    "tabular_plan",
    {
        "type": "object",
        "properties": {
            "filters": {
                "type": "array",
                "maxItems": MAX_FILTERS,
                "description": "All must hold (AND). Dates and timestamps are ISO strings.",
                "items": {
                    "type": "object",
                    "properties": {
                        "column": {"type": "string"},
                        "op": {"type": "string", "enum": list(FILTER_OPS)},
                        "value": {
                            "description": "null for is_null and not_null; a list for in and not_in",
                            "anyOf": [
                                *_SCALAR_SCHEMA,
                                {"type": "array", "items": {"anyOf": _SCALAR_SCHEMA}, "maxItems": MAX_LIST_VALUES},
                                {"type": "null"},
                            ],
                        },
                    },
                    "required": ["column", "op", "value"],
                    "additionalProperties": False,
                },
            },
            "group_by": {"type": "array", "maxItems": MAX_GROUPS, "items": {"type": "string"}},
            "aggregates": {
                "type": "array",
                "maxItems": MAX_AGGREGATES,
                "items": {
                    "type": "object",
                    "properties": {
                        "function": {"type": "string", "enum": list(AGGREGATE_FUNCTIONS)},
                        "column": {**_nullable({"type": "string"}), "description": "null only for count of rows"},
                        "alias": {"type": "string", "pattern": ALIAS_PATTERN},
                    },
                    "required": ["function", "column", "alias"],
                    "additionalProperties": False,
                },
            },
            "order_by": {
                "type": "array",
                "maxItems": MAX_ORDER_KEYS,
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string", "description": "a group_by column or an aggregate alias"},
                        "direction": {"type": "string", "enum": ["asc", "desc"]},
                    },
                    "required": ["key", "direction"],
                    "additionalProperties": False,
                },
            },
            "limit": {
                **_nullable({"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
                "description": f"rows to return, null for {DEFAULT_LIMIT}",
            },
        },
        "required": ["filters", "group_by", "aggregates", "order_by", "limit"],
        "additionalProperties": False,
    },
)


def parse_plan(data: Any) -> TabularPlan:
    """A plan from the model's (or a store's) JSON object; InvalidPlan naming the first field that is wrong."""
    try:
        return TabularPlan.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        raise InvalidPlan(error["msg"], field) from exc


def plan_fingerprint(plan: TabularPlan) -> str:
    """SHA-256 (hex) of the plan's canonical JSON (RFC 8785): equal plans, however written, share it."""
    return hashlib.sha256(rfc8785.dumps(plan.model_dump(mode="json"))).hexdigest()


@dataclass(frozen=True)
class CheckedPlan:
    """A plan that fits its table, with each filter's value converted to its column's type."""

    plan: TabularPlan
    columns: tuple[TabularColumn, ...]
    values: tuple[Any, ...]  # one per filter, in order

    @property
    def aggregated(self) -> bool:
        return bool(self.plan.group_by or self.plan.aggregates)

    @property
    def output_names(self) -> tuple[str, ...]:
        if not self.aggregated:
            return tuple(column.name for column in self.columns)
        return (*self.plan.group_by, *(aggregate.alias for aggregate in self.plan.aggregates))


def check_plan(plan: TabularPlan, columns: Sequence[TabularColumn]) -> CheckedPlan:
    """The plan, checked against the table's columns and types; InvalidPlan with the field and reason otherwise."""
    by_name = {column.name: column for column in columns}
    values = tuple(
        _checked_filter(item, _column(by_name, item.column, f"filters[{index}].column"), f"filters[{index}]")
        for index, item in enumerate(plan.filters)
    )
    for index, name in enumerate(plan.group_by):
        _column(by_name, name, f"group_by[{index}]")
        if plan.group_by.index(name) != index:
            raise InvalidPlan(f"{name!r} is listed twice", f"group_by[{index}]")
    aliases: set[str] = set()
    folded_columns = {name.lower() for name in by_name}
    for index, aggregate in enumerate(plan.aggregates):
        where = f"aggregates[{index}]"
        _checked_aggregate(aggregate, by_name, where)
        folded = aggregate.alias.lower()
        if folded in folded_columns:
            raise InvalidPlan(
                f"alias {aggregate.alias!r} is also a column name; choose another alias", f"{where}.alias"
            )
        if folded in aliases:
            raise InvalidPlan(f"alias {aggregate.alias!r} is used twice; give each aggregate its own", f"{where}.alias")
        aliases.add(folded)
    checked = CheckedPlan(plan=plan, columns=tuple(columns), values=values)
    outputs = checked.output_names
    for index, key in enumerate(plan.order_by):
        if key.key not in outputs:
            shown = ", ".join(repr(name) for name in outputs[:50])
            what = "group_by columns and aggregate aliases" if checked.aggregated else "columns"
            raise InvalidPlan(f"{key.key!r} is not one of the result's {what}: {shown}", f"order_by[{index}].key")
    return checked


def _column(by_name: dict[str, TabularColumn], name: str, field: str) -> TabularColumn:
    column = by_name.get(name)
    if column is not None:
        return column
    near = [known for known in by_name if known.lower() == name.lower()]
    hint = f"; did you mean {near[0]!r}?" if near else ""
    listed = ", ".join(f"{known!r} ({by_name[known].type})" for known in list(by_name)[:50])
    raise InvalidPlan(f"the table has no column {name!r}{hint} Its columns are: {listed}", field)


def _checked_filter(item: Filter, column: TabularColumn, where: str) -> Any:
    """The filter's value converted to the column's type, after refusing an op or value that does not fit."""
    kind = column.kind
    if item.op in _NULL_OPS:
        if item.value is not None:
            raise InvalidPlan(f"{item.op} takes no value; give null", f"{where}.value")
        return None
    if item.value is None:
        raise InvalidPlan(f"{item.op} needs a value; to match missing values use is_null", f"{where}.value")
    if item.op in _TEXT_OPS:
        if kind != "text" or not isinstance(item.value, str) or not item.value:
            raise InvalidPlan(
                f"{item.op} needs a text column and a non-empty string; {column.name!r} is {column.type}",
                f"{where}.op",
            )
        return item.value
    if item.op in _ORDERING_OPS and kind not in _ORDERABLE:
        raise InvalidPlan(f"{item.op} does not apply to {column.name!r} ({column.type}); use = or !=", f"{where}.op")
    if item.op in _LIST_OPS:
        if not isinstance(item.value, list) or not item.value:
            raise InvalidPlan(f"{item.op} needs a non-empty list of values", f"{where}.value")
        return tuple(_typed_value(value, column, f"{where}.value[{i}]") for i, value in enumerate(item.value))
    if isinstance(item.value, list):
        raise InvalidPlan(f"{item.op} takes one value, not a list; use in for several", f"{where}.value")
    return _typed_value(item.value, column, f"{where}.value")


def _typed_value(value: Any, column: TabularColumn, field: str) -> Any:
    """A plan's JSON value as a value of the column's type, or InvalidPlan saying what the column holds."""
    kind: ColumnKind = column.kind
    expected = {
        "number": "a number",
        "text": "a string",
        "boolean": "true or false",
        "date": "an ISO date string (YYYY-MM-DD)",
        "timestamp": "an ISO timestamp string (YYYY-MM-DDTHH:MM:SS)",
        "time": "an ISO time string (HH:MM:SS)",
        "other": "nothing: this column cannot be filtered",
    }[kind]
    refusal = InvalidPlan(f"{column.name!r} is {column.type}: compare it with {expected}, not {value!r}", field)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "number" and is_number:
        return value
    if kind == "text" and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, str) and kind in ("date", "timestamp", "time"):
        try:
            if kind == "date":
                return datetime.date.fromisoformat(value)
            if kind == "timestamp":
                return datetime.datetime.fromisoformat(value)
            return datetime.time.fromisoformat(value)
        except ValueError:
            raise refusal from None
    raise refusal


def _checked_aggregate(aggregate: Aggregate, by_name: dict[str, TabularColumn], where: str) -> None:
    if aggregate.column is None:
        if aggregate.function != "count":
            raise InvalidPlan(f"{aggregate.function} needs a column; only count may have null", f"{where}.column")
        return
    column = _column(by_name, aggregate.column, f"{where}.column")
    if aggregate.function in _NUMERIC_AGGREGATES and column.kind != "number":
        numeric = [name for name, known in by_name.items() if known.kind == "number"][:50]
        raise InvalidPlan(
            f"{aggregate.function} needs a numeric column; {column.name!r} is {column.type}. "
            f"Numeric columns: {', '.join(repr(name) for name in numeric) or 'none'}",
            f"{where}.column",
        )
    if aggregate.function in ("min", "max") and column.kind not in _ORDERABLE:
        raise InvalidPlan(f"{aggregate.function} does not apply to {column.name!r} ({column.type})", f"{where}.column")
