"""The first sheet of an XLSX workbook as a header and typed columns, read by openpyxl within the limits.

Each column's DuckDB type is inferred from the Python values openpyxl gives its cells: whole numbers are
BIGINT, any fraction makes DOUBLE, dates at midnight are DATE, other datetimes TIMESTAMP, booleans BOOLEAN;
a column that mixes kinds (numbers and "n/a", say) is VARCHAR, every cell written as text.
"""

from __future__ import annotations

import datetime
import io
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import openpyxl  # openpyxl ships no type information

from flowledger.tabular.errors import MalformedTable, TableTooLarge
from flowledger.tabular.limits import TabularLimits

_BIGINT_RANGE = range(-(2**63), 2**63)


@dataclass(frozen=True)
class Sheet:
    """A header (names made unique) and the rows under it, each value already of its column's type."""

    names: list[str]
    types: list[str]
    rows: list[list[Any]]


def read_first_sheet(body: bytes, limits: TabularLimits) -> Sheet:
    """The first sheet of the workbook in ``body``: MalformedTable when it cannot be read, TableTooLarge over limits."""
    _check_inflated_size(body, limits)
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(body), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises a dozen types (zip, XML, KeyError) for a damaged file
        raise MalformedTable("the file is not a readable XLSX workbook") from exc
    try:
        if not workbook.worksheets:
            raise MalformedTable("the workbook has no sheet")
        # One column past the limit is read, so a wider header is refused rather than cut.
        cells = workbook.worksheets[0].iter_rows(values_only=True, max_col=limits.max_columns + 1)
        header, raw_rows = _read_rows(cells, limits)
    except (MalformedTable, TableTooLarge):
        raise
    except Exception as exc:
        raise MalformedTable("the first sheet of the workbook could not be read") from exc
    finally:
        workbook.close()
    names = unique_names([_header_name(value, index) for index, value in enumerate(header)])
    columns = [_typed_column([row[index] for row in raw_rows]) for index in range(len(names))]
    types = [column_type for column_type, _ in columns]
    rows = [[convert(row[index]) for index, (_, convert) in enumerate(columns)] for row in raw_rows]
    return Sheet(names=names, types=types, rows=rows)


def _check_inflated_size(body: bytes, limits: TabularLimits) -> None:
    """Refuse a workbook whose parts inflate past the limit before openpyxl inflates any of them."""
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile as exc:
        raise MalformedTable("the file is not a readable XLSX workbook (not a ZIP archive)") from exc
    if inflated > limits.max_xlsx_uncompressed_bytes:
        raise TableTooLarge(
            f"the workbook inflates to {inflated} bytes, over the limit of {limits.max_xlsx_uncompressed_bytes}"
        )


def _read_rows(cells: Iterator[tuple[Any, ...]], limits: TabularLimits) -> tuple[list[Any], list[list[Any]]]:
    first = next(cells, None)
    header = _trimmed(list(first or ()))
    if not header:
        raise MalformedTable("the first sheet has no header row (its first row is empty)")
    width = len(header)
    if width > limits.max_columns:
        raise TableTooLarge(f"the sheet has more than {limits.max_columns} columns")
    rows: list[list[Any]] = []
    for number, row in enumerate(cells, start=2):
        if all(value is None for value in row):
            continue  # blank rows (formatted but empty) carry nothing
        if any(value is not None for value in row[width:]):
            raise MalformedTable(f"row {number} has a value right of the header's {width} columns")
        if len(rows) == limits.max_rows:
            raise TableTooLarge(f"the sheet has more than {limits.max_rows} rows")
        values = list(row[:width]) + [None] * (width - len(row))
        for column, value in enumerate(values, start=1):
            if isinstance(value, str) and len(value) > limits.max_cell_chars:
                raise TableTooLarge(
                    f"row {number}, column {column} holds {len(value)} characters, over the limit of "
                    f"{limits.max_cell_chars}"
                )
        rows.append(values)
    if not rows:
        raise MalformedTable("the first sheet has a header but no data rows")
    return header, rows


def _trimmed(values: list[Any]) -> list[Any]:
    while values and values[-1] is None:
        values.pop()
    return values


def _header_name(value: Any, index: int) -> str:
    text = "" if value is None else str(value).strip()
    return text or f"column{index}"  # DuckDB's name for a header cell that is empty


def unique_names(names: Sequence[str]) -> list[str]:
    """Names made unique as DuckDB's CSV reader does: a repeat (case aside) gets ``_1``, ``_2``, … appended."""
    taken: set[str] = set()
    unique: list[str] = []
    for name in names:
        candidate, suffix = name, 0
        while candidate.lower() in taken:
            suffix += 1
            candidate = f"{name}_{suffix}"
        taken.add(candidate.lower())
        unique.append(candidate)
    return unique


def _typed_column(values: list[Any]) -> tuple[str, Callable[[Any], Any]]:
    """The DuckDB type of a column of cells, and how each cell becomes a value of it."""
    present = [value for value in values if value is not None]
    if not present:
        return "VARCHAR", _as_text
    if all(isinstance(value, bool) for value in present):
        return "BOOLEAN", _same
    if any(isinstance(value, bool) for value in present):
        return "VARCHAR", _as_text  # True is an int to Python: booleans mixed with numbers are not a number column
    if all(isinstance(value, int) and value in _BIGINT_RANGE for value in present):
        return "BIGINT", _same
    if all(isinstance(value, (int, float)) for value in present):
        return "DOUBLE", _as_float
    if all(isinstance(value, datetime.date) for value in present):  # a datetime is a date too
        if all(_is_midnight(value) for value in present):
            return "DATE", _as_date
        if all(isinstance(value, datetime.datetime) and value.tzinfo is None for value in present):
            return "TIMESTAMP", _same
    if all(isinstance(value, datetime.time) for value in present):
        return "TIME", _same
    return "VARCHAR", _as_text


def _same(value: Any) -> Any:
    return value


def _as_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _is_midnight(value: datetime.date) -> bool:
    if not isinstance(value, datetime.datetime):
        return True
    return value.time() == datetime.time() and value.tzinfo is None


def _as_date(value: Any) -> datetime.date | None:
    if isinstance(value, datetime.datetime):
        return value.date()
    return value if isinstance(value, datetime.date) else None


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)
