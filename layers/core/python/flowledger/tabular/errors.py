"""The tabular engine's refusals, each a domain error that ``api/errors.py`` already maps to a 4xx."""

from __future__ import annotations

from flowledger.errors import Conflict, InvalidInput, PayloadTooLarge


class TableTooLarge(PayloadTooLarge):
    """The file is over one of the limits (bytes, rows, columns, cell length): 413."""

    code = "table_too_large"


class MalformedTable(InvalidInput):
    """The file cannot be read as a table (not UTF-8, ragged rows, not a workbook, no header): 422."""

    code = "malformed_table"


class InvalidPlan(InvalidInput):
    """A query plan does not fit the table: ``field`` says where, the message says why and what would fit: 422."""

    code = "invalid_plan"

    def __init__(self, message: str, field: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


class QueryTooExpensive(InvalidInput):
    """The work ran past its deadline or its memory: a narrower plan (filters, fewer groups) may fit: 422."""

    code = "query_too_expensive"


class TableSchemaMismatch(Conflict):
    """The stored columns of a version do not describe its Parquet: the version must be converted again: 409."""

    code = "table_schema_mismatch"
