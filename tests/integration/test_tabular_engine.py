"""The tabular engine end to end on real DuckDB and openpyxl: conversion, plans, bounds and the lock."""

from __future__ import annotations

import csv
import datetime
import io
import statistics
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import openpyxl
import pytest

from flowledger.api.errors import status_for
from flowledger.tabular import (
    ConvertedTable,
    InvalidPlan,
    MalformedTable,
    QueryTooExpensive,
    TableSchemaMismatch,
    TableTooLarge,
    TabularColumn,
    TabularLimits,
    convert_table,
    parse_plan,
    plan_fingerprint,
    run_plan,
)
from flowledger.tabular import engine as engine_module
from flowledger.tabular.engine import compile_plan
from flowledger.tabular.plan import check_plan
from flowledger.tabular.sandbox import locked_connection

INJECTION = "x'); DROP TABLE t; --"
REGIONS = ["north", "south", "east", "west", INJECTION]


def csv_body(header: list[str], rows: list[list[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(["" if value is None else value for value in row] for row in rows)
    return out.getvalue().encode()


def plan(**parts: Any) -> Any:
    return parse_plan({"filters": [], "group_by": [], "aggregates": [], "order_by": [], "limit": None, **parts})


# A small table, and the same rows as Python sees them, to compute what each plan must answer.
SALES: list[dict[str, Any]] = [
    {
        "id": i,
        "region": None if i % 11 == 0 else REGIONS[i % len(REGIONS)],
        "amount": round((i * 37 % 1000) / 8, 3),
        "quantity": i % 7,
        "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 40),
        "paid": i % 3 == 0,
    }
    for i in range(1, 121)
]


@pytest.fixture(scope="module")
def sales() -> ConvertedTable:
    header = list(SALES[0])
    rows = [[row[name].isoformat() if name == "day" else row[name] for name in header] for row in SALES]
    return convert_table(csv_body(header, rows), "csv")


def ids(result: Any) -> list[int]:
    position = result.columns.index("id")
    return [row[position] for row in result.rows]


# conversion


def test_csv_columns_are_typed_not_strings(sales: ConvertedTable) -> None:
    assert [(c.name, c.type) for c in sales.columns] == [
        ("id", "BIGINT"),
        ("region", "VARCHAR"),
        ("amount", "DOUBLE"),
        ("quantity", "BIGINT"),
        ("day", "DATE"),
        ("paid", "BOOLEAN"),
    ]
    assert sales.row_count == len(SALES)
    assert sales.parquet.startswith(b"PAR1")
    with duckdb.connect() as con:  # the Parquet stands on its own: any reader sees the same typed columns
        path = Path(tempfile.mkdtemp()) / "t.parquet"
        path.write_bytes(sales.parquet)
        assert [str(t) for t in con.read_parquet(str(path)).types] == [c.type for c in sales.columns]


def test_the_same_body_converts_to_the_same_parquet(sales: ConvertedTable) -> None:
    header = list(SALES[0])
    rows = [[row[name].isoformat() if name == "day" else row[name] for name in header] for row in SALES]
    again = convert_table(csv_body(header, rows), "csv")
    assert again.sha256 == sales.sha256


def test_a_later_value_of_another_type_makes_the_column_text_instead_of_failing() -> None:
    rows = [[i] for i in range(30_000)] + [["n/a"]]  # past the sniffer's sample
    table = convert_table(csv_body(["code"], rows), "csv")
    assert table.columns == (TabularColumn(name="code", type="VARCHAR"),)
    assert table.row_count == 30_001


def workbook(rows: list[list[Any]], *, second_sheet: bool = True) -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    for row in rows:
        sheet.append(row)
    if second_sheet:
        book.create_sheet("other").append(["ignored"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_xlsx_first_sheet_header_and_inferred_types() -> None:
    body = workbook(
        [
            ["region", "units", "price", "day", "at", "paid", "code", None, "units"],
            ["north", 3, 1.5, datetime.datetime(2024, 1, 2), datetime.datetime(2024, 1, 2, 9, 30), True, 7, "x", 1],
            ["south", 4, 2, datetime.datetime(2024, 1, 3), datetime.datetime(2024, 1, 3, 10, 0), False, "n/a", None, 2],
            [None] * 9,  # a blank row carries nothing
            ["east", None, 3.25, None, None, None, None, None, None],
        ]
    )
    table = convert_table(body, "xlsx")
    assert [(c.name, c.type) for c in table.columns] == [
        ("region", "VARCHAR"),
        ("units", "BIGINT"),
        ("price", "DOUBLE"),
        ("day", "DATE"),
        ("at", "TIMESTAMP"),
        ("paid", "BOOLEAN"),
        ("code", "VARCHAR"),  # 7 and "n/a": text
        ("column7", "VARCHAR"),  # an empty header cell, named as DuckDB names it in a CSV
        ("units_1", "BIGINT"),  # a repeated name, made unique as DuckDB does
    ]
    assert table.row_count == 3
    result = run_plan(table.parquet, plan(order_by=[{"key": "region", "direction": "asc"}]), table.columns)
    assert result.rows == [
        ["east", None, 3.25, None, None, None, None, None, None],
        ["north", 3, 1.5, "2024-01-02", "2024-01-02T09:30:00", True, "7", "x", 1],
        ["south", 4, 2.0, "2024-01-03", "2024-01-03T10:00:00", False, "n/a", None, 2],
    ]


@pytest.mark.parametrize(
    ("make", "limits", "error", "status", "says"),
    [
        (lambda: b"a,b\n" + b"1,2\n" * 10, TabularLimits(max_bytes=20), TableTooLarge, 413, "over the limit of 20"),
        (lambda: b"a\n" + b"1\n" * 11, TabularLimits(max_rows=10), TableTooLarge, 413, "more than 10 rows"),
        (lambda: b"a,b,c\n1,2,3\n", TabularLimits(max_columns=2), TableTooLarge, 413, "3 columns"),
        (lambda: b"a\nshort\n" + b"y" * 51 + b"\n", TabularLimits(max_cell_chars=50), TableTooLarge, 413, "51"),
        (lambda: b"abcdef,b\n1,2\n", TabularLimits(max_column_name_chars=5), MalformedTable, 422, "column 1"),
        (lambda: b'"a\x01b",c\n1,2\n', TabularLimits(), MalformedTable, 422, "control character"),
        (
            lambda: workbook([["a", "b", "c"], [1, 2, 3]]),
            TabularLimits(max_columns=2),
            TableTooLarge,
            413,
            "more than 2 columns",
        ),
        (lambda: workbook([["a"], *[[i] for i in range(4)]]), TabularLimits(max_rows=3), TableTooLarge, 413, "3 rows"),
        (lambda: workbook([["a"], ["z" * 9]]), TabularLimits(max_cell_chars=8), TableTooLarge, 413, "9 characters"),
        (
            lambda: workbook([["a"], ["z" * 1000]]),
            TabularLimits(max_xlsx_uncompressed_bytes=1000),
            TableTooLarge,
            413,
            "inflates",
        ),
    ],
)
def test_limits_are_each_a_clear_4xx(
    make: Callable[[], bytes], limits: TabularLimits, error: type[Exception], status: int, says: str
) -> None:
    body = make()
    kind = "xlsx" if body.startswith(b"PK") else "csv"
    with pytest.raises(error) as caught:
        convert_table(body, kind, limits)
    assert status_for(caught.value) == status  # type: ignore[arg-type]
    assert says in str(caught.value)


def _zip_without_a_workbook() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("hello.txt", "not a workbook")
    return out.getvalue()


@pytest.mark.parametrize(
    ("body", "kind", "says"),
    [
        (b"", "csv", "empty"),
        (b"a,b\n", "csv", "no data rows"),
        ("a,b\ncafé,1\n".encode("latin-1"), "csv", "not UTF-8"),
        (b"a,b,c\n1,2,3\n4,5\n", "csv", "as many fields as its header"),
        (b"a,b\n" + b"1,2\n" * 30_000 + b"3,4,5\n", "csv", "CSV Error on Line: 30002"),  # past the sniffer's sample
        (b"\x00\x01garbage", "xlsx", "not a readable XLSX"),
        (_zip_without_a_workbook(), "xlsx", "not a readable XLSX"),
        (workbook([[None], [1]], second_sheet=False), "xlsx", "no header row"),
        (workbook([["a"]]), "xlsx", "no data rows"),
        (workbook([["a", "b"], [1, 2, 3]]), "xlsx", "row 2 has a value right of the header's 2 columns"),
    ],
)
def test_malformed_files_are_a_clear_invalid_input(body: bytes, kind: Any, says: str) -> None:
    with pytest.raises(MalformedTable) as caught:
        convert_table(body, kind)
    assert status_for(caught.value) == 422
    assert says in caught.value.message
    assert tempfile.gettempdir() not in caught.value.message  # no path of the work directory
    assert "Original Line" not in caught.value.message  # and no line of the file


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_work_directory_is_removed_after_success_and_failure(private_tmp: Path, sales: ConvertedTable) -> None:
    convert_table(b"a\n1\n", "csv")
    with pytest.raises(MalformedTable):
        convert_table(b"a,b,c\n1,2,3\n4,5\n", "csv")
    run_plan(sales.parquet, plan(), sales.columns)
    assert list(private_tmp.iterdir()) == []


# plans


def _holds(row: dict[str, Any], op: str, column: str, value: Any) -> bool:
    """What each filter means, written in Python: SQL's NULL never compares true."""
    cell = row[column]
    if op == "is_null":
        return cell is None
    if op == "not_null":
        return cell is not None
    if cell is None:
        return False
    if isinstance(cell, datetime.date) and isinstance(value, str):
        value = datetime.date.fromisoformat(value)
    checks: dict[str, Callable[[], bool]] = {
        "=": lambda: cell == value,
        "!=": lambda: cell != value,
        "<": lambda: cell < value,
        "<=": lambda: cell <= value,
        ">": lambda: cell > value,
        ">=": lambda: cell >= value,
        "in": lambda: cell in value,
        "not_in": lambda: cell not in value,
        "contains": lambda: value in cell,
        "starts_with": lambda: cell.startswith(value),
    }
    return checks[op]()


@pytest.mark.parametrize(
    ("column", "op", "value"),
    [
        ("region", "=", "north"),
        ("region", "!=", "north"),
        ("amount", "<", 40),
        ("amount", "<=", 40.125),
        ("quantity", "<=", 3),  # an edge the rows hold: <= keeps it, < would not
        ("quantity", ">", 3),
        ("quantity", ">=", 3),
        ("day", ">=", "2024-01-20"),
        ("day", "<", "2024-01-05"),
        ("region", "in", ["east", "west"]),
        ("quantity", "not_in", [0, 1, 2]),
        ("region", "contains", "st"),
        ("region", "starts_with", "so"),
        ("region", "is_null", None),
        ("region", "not_null", None),
        ("paid", "=", True),
        ("region", "contains", "%"),  # no LIKE wildcard: a percent sign is a percent sign
    ],
)
def test_each_filter_op_keeps_exactly_the_rows_it_means(
    sales: ConvertedTable, column: str, op: str, value: Any
) -> None:
    result = run_plan(
        sales.parquet,
        plan(
            filters=[{"column": column, "op": op, "value": value}],
            order_by=[{"key": "id", "direction": "asc"}],
            limit=1000,
        ),
        sales.columns,
    )
    assert ids(result) == [row["id"] for row in SALES if _holds(row, op, column, value)]


def test_a_quoted_sql_value_is_just_a_value(sales: ConvertedTable) -> None:
    result = run_plan(
        sales.parquet,
        plan(filters=[{"column": "region", "op": "=", "value": INJECTION}], order_by=[], limit=1000),
        sales.columns,
    )
    expected = [row["id"] for row in SALES if row["region"] == INJECTION]
    assert expected and sorted(ids(result)) == expected
    assert run_plan(sales.parquet, plan(), sales.columns).rows  # and the table is still there


def test_group_by_with_every_aggregate_matches_python(sales: ConvertedTable) -> None:
    functions = ["sum", "avg", "min", "max", "median", "count", "count_distinct"]
    result = run_plan(
        sales.parquet,
        plan(
            filters=[{"column": "quantity", "op": ">", "value": 0}],
            group_by=["region"],
            aggregates=[
                *({"function": f, "column": "amount", "alias": f"{f}_amount"} for f in functions),
                {"function": "count", "column": None, "alias": "n"},
            ],
        ),
        sales.columns,
    )
    assert result.columns == ["region", *(f"{f}_amount" for f in functions), "n"]
    expected = []
    for region in sorted({row["region"] for row in SALES}, key=lambda r: (r is None, r or "")):
        amounts = [row["amount"] for row in SALES if row["region"] == region and row["quantity"] > 0]
        expected.append(
            [
                region,
                sum(amounts),
                statistics.mean(amounts),
                min(amounts),
                max(amounts),
                statistics.median(amounts),
                len(amounts),
                len(set(amounts)),
                len(amounts),
            ]
        )
    assert [row[0] for row in result.rows] == [row[0] for row in expected]  # groups ordered, NULL last
    for got, want in zip(result.rows, expected, strict=True):
        assert got == pytest.approx(want)


def test_totals_without_groups_are_one_row(sales: ConvertedTable) -> None:
    result = run_plan(
        sales.parquet,
        plan(aggregates=[{"function": "count", "column": "region", "alias": "with_region"}]),
        sales.columns,
    )
    assert result.rows == [[sum(1 for row in SALES if row["region"] is not None)]]


def test_limit_bounds_the_rows_and_says_there_are_more(sales: ConvertedTable) -> None:
    result = run_plan(sales.parquet, plan(group_by=["day"], limit=3), sales.columns)
    assert result.rows == [["2024-01-01"], ["2024-01-02"], ["2024-01-03"]]
    assert result.more_rows
    everything = run_plan(sales.parquet, plan(group_by=["day"], limit=1000), sales.columns)
    assert len(everything.rows) == 40 and not everything.more_rows


def test_the_limit_is_applied_by_duckdb_not_after_fetching(sales: ConvertedTable, tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(sales.parquet)
    checked = check_plan(plan(limit=5), sales.columns)
    with locked_connection(threads=1, memory_limit_mb=64, files=[path]) as con:
        fetched = compile_plan(con.read_parquet(str(path)), checked).fetchall()
    assert len(fetched) == 6  # the limit and one more, to know there are more: never the whole table


def test_ties_are_broken_by_the_group_columns() -> None:
    names = [f"g{i:03d}" for i in range(200)]
    table = convert_table(csv_body(["name"], [[name] for name in reversed(names) for _ in range(3)]), "csv")
    result = run_plan(
        table.parquet,
        plan(
            group_by=["name"],
            aggregates=[{"function": "count", "column": None, "alias": "n"}],
            order_by=[{"key": "n", "direction": "desc"}],  # every group ties
            limit=50,
        ),
        table.columns,
    )
    assert result.rows == [[name, 3] for name in names[:50]]


def test_a_stored_plan_replays_to_identical_rows(sales: ConvertedTable, tmp_path: Path) -> None:
    original = plan(
        filters=[{"column": "day", "op": ">=", "value": "2024-01-10"}],
        group_by=["region", "paid"],
        aggregates=[
            {"function": "sum", "column": "amount", "alias": "total"},
            {"function": "avg", "column": "quantity", "alias": "avg_q"},
        ],
        order_by=[{"key": "total", "direction": "desc"}],
        limit=7,
    )
    stored = original.model_dump_json()  # what the session keeps
    first = run_plan(sales.parquet, original, sales.columns)
    path = tmp_path / "version.parquet"
    path.write_bytes(sales.parquet)
    replayed = run_plan(path, parse_plan(__import__("json").loads(stored)), sales.columns)
    assert replayed == first
    assert replayed.plan_fingerprint == plan_fingerprint(original)
    assert len(first.rows) == 7 and first.more_rows


def test_an_invalid_plan_is_refused_before_anything_runs(
    sales: ConvertedTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_connection(**_: Any) -> Iterator[Any]:
        raise AssertionError("a connection was opened for a plan that does not fit")

    monkeypatch.setattr(engine_module, "locked_connection", no_connection)
    with pytest.raises(InvalidPlan) as caught:
        run_plan(sales.parquet, plan(aggregates=[{"function": "sum", "column": "region", "alias": "s"}]), sales.columns)
    assert "needs a numeric column" in caught.value.reason


def test_stored_columns_must_describe_the_parquet(sales: ConvertedTable) -> None:
    wrong = [c if c.name != "amount" else TabularColumn(name="amount", type="VARCHAR") for c in sales.columns]
    with pytest.raises(TableSchemaMismatch) as caught:
        run_plan(sales.parquet, plan(), wrong)
    assert status_for(caught.value) == 409


def test_cells_and_bytes_of_the_answer_are_bounded() -> None:
    table = convert_table(csv_body(["id", "note"], [[i, "w" * 300] for i in range(50)]), "csv")
    limits = TabularLimits(max_result_cell_chars=10, max_result_bytes=200)
    result = run_plan(table.parquet, plan(order_by=[{"key": "id", "direction": "asc"}]), table.columns, limits)
    assert result.rows[0] == [0, "w" * 10 + "…"]
    assert 0 < len(result.rows) < 50 and result.more_rows
    assert result.truncated_cells == len(result.rows)


def test_a_plan_past_its_deadline_is_interrupted() -> None:
    table = convert_table(csv_body(["id", "k"], [[i, i * 7919 % 100_003] for i in range(200_000)]), "csv")
    slow = plan(group_by=["id"], aggregates=[{"function": "count_distinct", "column": "k", "alias": "d"}])
    with pytest.raises(QueryTooExpensive) as caught:
        run_plan(table.parquet, slow, table.columns, TabularLimits(query_seconds=0))
    assert status_for(caught.value) == 422
    assert "did not finish within 0 s" in caught.value.message
    assert run_plan(table.parquet, slow, table.columns).rows  # with its time, the same plan answers


# the lock


def test_odd_column_names_are_names_never_sql() -> None:
    header = ['we"ird', 'x"); SELECT 1; --', "read_csv('/etc/passwd')"]
    table = convert_table(csv_body(header, [["a", "b", "c"], ["a", "d", "e"]]), "csv")
    assert [c.name for c in table.columns] == header
    result = run_plan(
        table.parquet,
        plan(
            group_by=["read_csv('/etc/passwd')"],
            aggregates=[{"function": "count_distinct", "column": 'we"ird', "alias": "n"}],
            filters=[{"column": 'x"); SELECT 1; --', "op": "in", "value": ["b", "d"]}],
        ),
        table.columns,
    )
    assert result.rows == [["c", 1], ["e", 1]]


def test_a_column_that_does_not_exist_is_refused_even_if_it_reads_as_sql(sales: ConvertedTable) -> None:
    with pytest.raises(InvalidPlan) as caught:
        run_plan(sales.parquet, plan(group_by=["read_csv('/etc/passwd')"]), sales.columns)
    assert caught.value.field == "group_by[0]"


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_parquet('{other}')",
        "SELECT * FROM glob('/etc/*')",
        "COPY (SELECT 1) TO '{directory}/out.csv'",
        "ATTACH '{directory}/db.duckdb'",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "SET threads = 64",
        "SET memory_limit = '64GB'",
        "RESET lock_configuration",
    ],
)
def test_the_engine_connection_reads_only_its_file_and_cannot_be_reconfigured(
    tmp_path: Path, sales: ConvertedTable, statement: str
) -> None:
    mine, other = tmp_path / "mine.parquet", tmp_path / "other.parquet"
    mine.write_bytes(sales.parquet)
    other.write_bytes(sales.parquet)
    with locked_connection(threads=1, memory_limit_mb=64, files=[mine]) as con:
        assert con.read_parquet(str(mine)).aggregate([duckdb.FunctionExpression("count")]).fetchall() == [(120,)]
        with pytest.raises((duckdb.PermissionException, duckdb.InvalidInputException)):
            con.execute(statement.format(other=other, directory=tmp_path))
        assert con.sql("SELECT current_setting('threads')").fetchall() == [(1,)]
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "db.duckdb").exists()
