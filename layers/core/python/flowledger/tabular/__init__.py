"""The tabular engine: CSV/XLSX converted once to typed Parquet, answered by DuckDB through a bounded plan.

``convert_table`` turns a version's body into Parquet with typed columns; ``TABULAR_PLAN_SCHEMA`` is the
strict schema a model fills; ``parse_plan`` and ``check_plan`` refuse what does not fit; ``run_plan``
answers a plan on the Parquet, deterministically, so a stored plan replays to the same rows.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowledger.tabular.columns import TabularColumn
    from flowledger.tabular.convert import ConvertedTable, convert_table
    from flowledger.tabular.engine import TabularResult, run_plan
    from flowledger.tabular.errors import (
        InvalidPlan,
        MalformedTable,
        QueryTooExpensive,
        TableSchemaMismatch,
        TableTooLarge,
    )
    from flowledger.tabular.limits import DEFAULT_LIMITS, TabularLimits
    from flowledger.tabular.plan import TABULAR_PLAN_SCHEMA, TabularPlan, check_plan, parse_plan, plan_fingerprint

# The names below load their module on first use (PEP 562): importing ``flowledger.tabular.limits``, as the
# documents function does at start, must not load DuckDB and openpyxl (and numpy through it) with it.
_HOMES = {
    "TabularColumn": "columns",
    "ConvertedTable": "convert",
    "convert_table": "convert",
    "TabularResult": "engine",
    "run_plan": "engine",
    "InvalidPlan": "errors",
    "MalformedTable": "errors",
    "QueryTooExpensive": "errors",
    "TableSchemaMismatch": "errors",
    "TableTooLarge": "errors",
    "DEFAULT_LIMITS": "limits",
    "TabularLimits": "limits",
    "TABULAR_PLAN_SCHEMA": "plan",
    "TabularPlan": "plan",
    "check_plan": "plan",
    "parse_plan": "plan",
    "plan_fingerprint": "plan",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = [
    "DEFAULT_LIMITS",
    "TABULAR_PLAN_SCHEMA",
    "ConvertedTable",
    "InvalidPlan",
    "MalformedTable",
    "QueryTooExpensive",
    "TableSchemaMismatch",
    "TableTooLarge",
    "TabularColumn",
    "TabularLimits",
    "TabularPlan",
    "TabularResult",
    "check_plan",
    "convert_table",
    "parse_plan",
    "plan_fingerprint",
    "run_plan",
]
