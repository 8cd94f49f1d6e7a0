"""The tabular engine: CSV/XLSX converted once to typed Parquet, answered by DuckDB through a bounded plan.

``convert_table`` turns a version's body into Parquet with typed columns; ``TABULAR_PLAN_SCHEMA`` is the
strict schema a model fills; ``parse_plan`` and ``check_plan`` refuse what does not fit; ``run_plan``
answers a plan on the Parquet, deterministically, so a stored plan replays to the same rows.
"""

from flowledger.tabular.columns import TabularColumn
from flowledger.tabular.convert import ConvertedTable, convert_table
from flowledger.tabular.engine import TabularResult, run_plan
from flowledger.tabular.errors import InvalidPlan, MalformedTable, QueryTooExpensive, TableSchemaMismatch, TableTooLarge
from flowledger.tabular.limits import DEFAULT_LIMITS, TabularLimits
from flowledger.tabular.plan import TABULAR_PLAN_SCHEMA, TabularPlan, check_plan, parse_plan, plan_fingerprint

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
