"""Typed columns of a converted table, and the kinds of value a plan may compare them with."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

ColumnKind = Literal["number", "text", "boolean", "date", "timestamp", "time", "other"]

_NUMBER_TYPES = frozenset(
    {
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "UHUGEINT",
        "FLOAT",
        "DOUBLE",
    }
)


class TabularColumn(BaseModel):
    """One column of a converted version: its name as the file gave it and its DuckDB type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: str

    @property
    def kind(self) -> ColumnKind:
        return kind_of(self.type)


def kind_of(duckdb_type: str) -> ColumnKind:
    """The kind of value a DuckDB type holds, which decides the filters and aggregates a plan may use on it."""
    text = duckdb_type.upper()
    if text in _NUMBER_TYPES or text.startswith("DECIMAL"):
        return "number"
    if text == "VARCHAR":
        return "text"
    if text == "BOOLEAN":
        return "boolean"
    if text == "DATE":
        return "date"
    if text.startswith("TIMESTAMP"):
        return "timestamp"
    if text.startswith("TIME"):
        return "time"
    return "other"
