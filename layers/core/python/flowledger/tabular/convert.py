"""Conversion, once per document version: a CSV or XLSX body to typed Parquet written by DuckDB.

CSV is read by DuckDB's ``read_csv`` (dialect, header and types sniffed); XLSX by openpyxl (first sheet,
header row) and loaded into DuckDB with inferred types. Either way DuckDB writes the Parquet (``COPY … TO``)
on a locked connection that can reach only a private directory, removed afterwards.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import duckdb
from duckdb import ColumnExpression, FunctionExpression

from flowledger.tabular import xlsx
from flowledger.tabular.columns import TabularColumn, kind_of
from flowledger.tabular.errors import MalformedTable, TableTooLarge
from flowledger.tabular.limits import DEFAULT_LIMITS, TabularLimits
from flowledger.tabular.positions import position as position_name
from flowledger.tabular.positions import positional
from flowledger.tabular.sandbox import deadline, locked_connection, private_directory

TableKind = Literal["csv", "xlsx"]

_DELIMITERS = (",", ";", "\t", "|")
_SNIFF_SAMPLE_ROWS = 20_480  # DuckDB's default sample
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Lines of DuckDB's CSV errors worth repeating; never "Original Line", which quotes the file's data.
_ERROR_PREFIX = re.compile(r"^[A-Za-z ]+ Error: ")  # "Invalid Input Error: ", the engine's class of error
_USEFUL_ERROR_LINE = re.compile(
    r"^(CSV Error on Line|Expected Number of Columns|Error when converting|Could not convert)"
)


@dataclass(frozen=True)
class ConvertedTable:
    """One converted version: its Parquet, typed columns, row count and the Parquet's SHA-256 (hex)."""

    parquet: bytes
    columns: tuple[TabularColumn, ...]
    row_count: int
    sha256: str


def convert_table(body: bytes, kind: TableKind, limits: TabularLimits = DEFAULT_LIMITS) -> ConvertedTable:
    """Convert a CSV or XLSX body to Parquet with typed columns, within ``limits``.

    Raises TableTooLarge (413) over a limit and MalformedTable (422) for a file that is not a table.
    """
    if len(body) > limits.max_bytes:
        raise TableTooLarge(f"the file has {len(body)} bytes, over the limit of {limits.max_bytes}")
    if not body.strip():
        raise MalformedTable("the file is empty")
    with private_directory() as work:
        target = work / "table.parquet"
        with (
            locked_connection(
                threads=limits.convert_threads, memory_limit_mb=limits.memory_limit_mb, directories=[work]
            ) as con,
            deadline(con, limits.convert_seconds, "converting the file", "upload a smaller file"),
        ):
            if kind == "csv":
                source = work / "source.csv"
                source.write_bytes(body)
                columns = _convert_csv(con, source, target, limits)
            elif kind == "xlsx":
                columns = _convert_sheet(con, xlsx.read_first_sheet(body, limits), target, limits)
            else:
                raise MalformedTable(f"unsupported table kind {kind!r}; expected csv or xlsx")
            row_count = _checked_rows(con.read_parquet(str(target)), columns, limits)
        parquet = target.read_bytes()
    return ConvertedTable(
        parquet=parquet, columns=columns, row_count=row_count, sha256=hashlib.sha256(parquet).hexdigest()
    )


def _write(relation: duckdb.DuckDBPyRelation, target: Path, limits: TabularLimits) -> tuple[TabularColumn, ...]:
    """Check the relation's columns, then write it as Parquet; its columns."""
    columns = _checked_columns(relation, limits)
    # One row past the limit is written, so a longer file is refused without converting all of it.
    relation.limit(limits.max_rows + 1).write_parquet(str(target))
    return columns


def _convert_csv(
    con: duckdb.DuckDBPyConnection, source: Path, target: Path, limits: TabularLimits
) -> tuple[TabularColumn, ...]:
    try:
        try:
            return _write(_read_csv(con, source, full_sample=False), target, limits)
        except duckdb.ConversionException:
            # Types are sniffed from a sample, so a later value of another type fails the write. Only then
            # is the whole file sampled, which costs a second pass.
            return _write(_read_csv(con, source, full_sample=True), target, limits)
    except (duckdb.InterruptException, duckdb.OutOfMemoryException):
        raise  # the deadline's or the memory limit's, not the file's
    except duckdb.Error as exc:
        raise MalformedTable(_csv_error(exc, source)) from exc


def _read_csv(con: duckdb.DuckDBPyConnection, source: Path, *, full_sample: bool) -> duckdb.DuckDBPyRelation:
    # skiprows=0: the sniffer may otherwise skip leading lines it finds irregular, dropping data silently.
    sample_size = -1 if full_sample else _SNIFF_SAMPLE_ROWS
    relation = con.read_csv(str(source), skiprows=0, encoding="utf-8", sample_size=sample_size)  # sniffs, binds
    names = relation.columns
    if len(names) == 1 and (delimiter := _delimiter_in(names[0])):
        # One column whose header holds a delimiter: the sniffer gave up on rows of differing width.
        # Read again with that delimiter, which reports the irregular line instead of one wide column.
        relation = con.read_csv(str(source), skiprows=0, encoding="utf-8", sample_size=sample_size, delimiter=delimiter)
    return relation


def _delimiter_in(header: str) -> str | None:
    counts = {delimiter: header.count(delimiter) for delimiter in _DELIMITERS}
    delimiter, count = max(counts.items(), key=lambda item: item[1])
    return delimiter if count else None


def _csv_error(exc: duckdb.Error, source: Path) -> str:
    text = str(exc).replace(str(source), "the file")
    lines = [_ERROR_PREFIX.sub("", line.strip()) for line in text.splitlines() if line.strip()]
    if any("not utf-8" in line for line in lines):
        return "the CSV is not UTF-8 encoded text"
    if any("not possible to automatically detect the CSV" in line for line in lines):
        return "the CSV's rows do not all have as many fields as its header"
    useful = [line for line in lines if _USEFUL_ERROR_LINE.match(line)]
    detail = "; ".join(useful) if useful else lines[0] if lines else type(exc).__name__
    return f"the CSV could not be read: {detail[:300]}"


def _convert_sheet(
    con: duckdb.DuckDBPyConnection, sheet: xlsx.Sheet, target: Path, limits: TabularLimits
) -> tuple[TabularColumn, ...]:
    """Load the sheet's typed rows into a table of positional columns, then write it under the header's names."""
    try:
        return _write(_load_sheet(con, sheet), target, limits)
    except (duckdb.InterruptException, duckdb.OutOfMemoryException):
        raise
    except duckdb.Error as exc:
        raise MalformedTable(f"the sheet could not be converted: {str(exc).splitlines()[0][:300]}") from exc


_INSERT_BATCH = 5_000


def _load_sheet(con: duckdb.DuckDBPyConnection, sheet: xlsx.Sheet) -> duckdb.DuckDBPyRelation:
    # The statement holds only positional names and types from xlsx's fixed set: no text from the file.
    definition = ", ".join(f"c{index} {column_type}" for index, column_type in enumerate(sheet.types))
    con.execute(f"CREATE TABLE sheet ({definition})")
    # Parameters, never text: each cell is bound as a value, in batches so an interrupt at the deadline
    # lands between them (DuckDB 1.5, the last release with wheels for Lambda's Amazon Linux 2, has no appender).
    insert = f"INSERT INTO sheet VALUES ({', '.join('?' for _ in sheet.types)})"  # noqa: S608 - placeholders only
    for start in range(0, len(sheet.rows), _INSERT_BATCH):
        con.executemany(insert, sheet.rows[start : start + _INSERT_BATCH])
    columns = [ColumnExpression(f"c{index}").alias(name) for index, name in enumerate(sheet.names)]
    return con.table("sheet").project(*columns)


def _checked_columns(relation: duckdb.DuckDBPyRelation, limits: TabularLimits) -> tuple[TabularColumn, ...]:
    columns = tuple(
        TabularColumn(name=name, type=str(column_type))
        for name, column_type in zip(relation.columns, relation.types, strict=True)
    )
    if len(columns) > limits.max_columns:
        raise TableTooLarge(f"the table has {len(columns)} columns, over the limit of {limits.max_columns}")
    for position, column in enumerate(columns, start=1):
        if len(column.name) > limits.max_column_name_chars:
            raise MalformedTable(
                f"the name of column {position} has {len(column.name)} characters, over the limit of "
                f"{limits.max_column_name_chars}"
            )
        if _CONTROL.search(column.name):
            raise MalformedTable(f"the name of column {position} holds a control character")
        if kind_of(column.type) == "other":
            raise MalformedTable(f"column {position} has the unsupported type {column.type}")
    return columns


def _checked_rows(parquet: duckdb.DuckDBPyRelation, columns: tuple[TabularColumn, ...], limits: TabularLimits) -> int:
    """The row count, after refusing a table with no rows, too many rows or a text cell that is too long."""
    measures = [FunctionExpression("count").alias("rows")]
    texts = [(position, column.name) for position, column in enumerate(columns) if column.kind == "text"]
    measures += [
        FunctionExpression("max", FunctionExpression("length", ColumnExpression(f'"{position_name(position)}"'))).alias(
            f"m{n}"
        )
        for n, (position, _) in enumerate(texts)
    ]
    row_count, *longest = positional(parquet).aggregate(measures).fetchall()[0]
    if row_count == 0:
        raise MalformedTable("the table has a header but no data rows")
    if row_count > limits.max_rows:
        raise TableTooLarge(f"the table has more than {limits.max_rows} rows")
    for (_, name), length in zip(texts, longest, strict=True):
        if length is not None and length > limits.max_cell_chars:
            raise TableTooLarge(
                f"column {name!r} holds a cell of {length} characters, over the limit of {limits.max_cell_chars}"
            )
    return int(row_count)
