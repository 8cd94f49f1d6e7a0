"""The SQL sources: the SQLite demo database under its authorizer and deadline, the Data API adapter
under moto, and the settings that pick one."""

# ruff: noqa: S608 - the statements here are built from the demo's own constants, and bypassing checks is the point

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.rdsdata.models import QueryResults, rdsdata_backends

from flowledger.config import load_settings
from flowledger.diagnosis import demo_database
from flowledger.diagnosis import demo_incident as incident
from flowledger.diagnosis.demo_database import build_demo_database, iso
from flowledger.diagnosis.sql import CheckedQuery, check_read_only
from flowledger.diagnosis.sql_sources import (
    MAX_RESULT_BYTES,
    DataApiSource,
    MySqlSource,
    SqliteReadOnlySource,
    SqlRejected,
    SqlTimeout,
    SqlUnavailable,
    sql_source_for,
)
from flowledger.errors import ConfigurationError

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
TIMES = incident.incident_times(NOW)
# Long enough that it cannot finish before a 50 ms deadline (17 million joined rows), short enough to end if it did.
SLOW_SELECT = "SELECT COUNT(*) FROM orders a, deployments d, payment_attempts p"


@pytest.fixture
def demo_path(tmp_path: Path) -> Path:
    return build_demo_database(tmp_path / "demo.sqlite", NOW)


@pytest.fixture
def source(demo_path: Path) -> SqliteReadOnlySource:
    return SqliteReadOnlySource(demo_path)


def raw(sql: str, limit: int = 200) -> CheckedQuery:
    """A statement that never went through the checker: what the adapter must stop on its own."""
    return CheckedQuery(sql=sql, dialect="sqlite", tables=(), limit=limit, capped=False)


def run(source: SqliteReadOnlySource, sql: str) -> list[dict[str, Any]]:
    return source.execute(check_read_only(sql, "sqlite"), timeout_seconds=5).rows


# --- the demo database holds the incident -------------------------------------------------------


def test_exactly_the_failed_checkouts_fall_inside_the_incident(source: SqliteReadOnlySource) -> None:
    rows = run(
        source,
        f"SELECT status, failure_code, COUNT(*) AS n, MIN(created_at) AS first, MAX(created_at) AS last FROM orders "
        f"WHERE created_at >= '{iso(TIMES.start)}' AND created_at < '{iso(TIMES.end)}' "
        "GROUP BY status, failure_code ORDER BY status",
    )
    assert rows == [
        {
            "status": "failed",
            "failure_code": incident.CHECKOUT_FAILURE_CODE,
            "n": incident.FAILED_CHECKOUTS,
            "first": iso(TIMES.start),
            "last": rows[0]["last"],
        },
        {
            "status": "paid",
            "failure_code": None,
            "n": incident.SUCCESSFUL_CHECKOUTS_DURING,
            "first": rows[1]["first"],
            "last": rows[1]["last"],
        },
    ]
    assert rows[0]["last"] < iso(TIMES.end)


def test_orders_before_and_after_the_incident_are_paid(source: SqliteReadOnlySource) -> None:
    rows = run(
        source,
        f"SELECT created_at < '{iso(TIMES.start)}' AS before, status, COUNT(*) AS n FROM orders "
        f"WHERE created_at < '{iso(TIMES.start)}' OR created_at >= '{iso(TIMES.end)}' GROUP BY 1, 2 ORDER BY 1",
    )
    assert [(r["before"], r["status"]) for r in rows] == [(0, "paid"), (1, "paid")]
    assert all(r["n"] > 100 for r in rows)


def test_failed_attempts_waited_for_the_pool(source: SqliteReadOnlySource) -> None:
    rows = run(
        source,
        "SELECT p.outcome, p.error_code, MIN(p.latency_ms) AS low, MAX(p.latency_ms) AS high, COUNT(*) AS n "
        "FROM payment_attempts p JOIN orders o ON o.id = p.order_id WHERE o.status = 'failed' GROUP BY 1, 2",
    )
    assert rows == [
        {
            "outcome": "error",
            "error_code": incident.ERROR_CODE,
            "low": incident.WAIT_MS,
            "high": incident.WAIT_MS,
            "n": incident.FAILED_CHECKOUTS,
        }
    ]


def test_the_deployments_tell_the_pool_change_and_the_rollback(source: SqliteReadOnlySource) -> None:
    rows = run(source, "SELECT version, deployed_at, change FROM deployments WHERE service = 'payments-api' ORDER BY 2")
    assert [r["version"] for r in rows] == [incident.GOOD_VERSION, incident.BAD_VERSION, incident.GOOD_VERSION]
    assert rows[1] == {
        "version": incident.BAD_VERSION,
        "deployed_at": iso(TIMES.deployed),
        "change": f"db pool max_connections {incident.POOL_BEFORE} -> {incident.POOL_AFTER}",
    }
    assert rows[2]["deployed_at"] == iso(TIMES.end)


def test_the_order_ids_have_the_demo_form(source: SqliteReadOnlySource) -> None:
    rows = run(source, "SELECT MIN(id) AS low, MAX(id) AS high, COUNT(*) AS n FROM orders")
    assert rows[0]["low"] == "ord_000001"
    assert rows[0]["high"] == f"ord_{rows[0]['n']:06d}"


def test_the_same_now_builds_the_same_database(tmp_path: Path) -> None:
    first = sqlite3.connect(build_demo_database(tmp_path / "a.sqlite", NOW))
    second = sqlite3.connect(build_demo_database(tmp_path / "b.sqlite", NOW))
    try:
        assert list(first.iterdump()) == list(second.iterdump())
    finally:
        first.close()
        second.close()


def test_a_failed_build_leaves_the_previous_database_and_no_temp_file(
    demo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = demo_path.read_bytes()

    real = demo_database.demo_rows(NOW)

    def broken(now: datetime) -> demo_database.DemoRows:
        # Fails half-way: orders and attempts are written, then a deployment row does not fit.
        return demo_database.DemoRows(real.orders, real.payment_attempts, [("dep_0001", "short")])

    monkeypatch.setattr(demo_database, "demo_rows", broken)
    with pytest.raises(sqlite3.Error):
        build_demo_database(demo_path, NOW)
    assert demo_path.read_bytes() == before
    assert sorted(p.name for p in demo_path.parent.iterdir()) == [demo_path.name]


def test_describe_lists_the_application_tables_only(source: SqliteReadOnlySource) -> None:
    tables = {t.name: [c for c, _ in t.columns] for t in source.describe(timeout_seconds=5)}
    assert tables == {
        "deployments": ["id", "service", "version", "deployed_at", "change"],
        "orders": ["id", "created_at", "status", "amount_cents", "failure_code"],
        "payment_attempts": ["id", "order_id", "attempted_at", "outcome", "latency_ms", "error_code"],
    }


# --- the authorizer stops what a broken checker would let through -------------------------------


def test_attach_is_denied_and_creates_no_file(source: SqliteReadOnlySource, tmp_path: Path) -> None:
    target = tmp_path / "evil.sqlite"
    with pytest.raises(SqlRejected, match="ATTACH"):
        source.execute(raw(f"ATTACH DATABASE '{target}' AS evil"), timeout_seconds=5)
    assert not target.exists()


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("PRAGMA writable_schema = ON", "PRAGMA writable_schema"),
        ("SELECT * FROM pragma_table_info('orders')", "not allowed"),
        ("SELECT randomblob(1000000)", "randomblob"),
        ("SELECT load_extension('/tmp/evil.so')", "load_extension"),
        ("SELECT sql FROM sqlite_master", "sqlite_master"),
        ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT COUNT(*) FROM c", "RECURSIVE"),
        ("CREATE TEMP TABLE stash AS SELECT * FROM orders", "not allowed"),
        ("DELETE FROM orders", "not allowed"),
        ("INSERT INTO deployments VALUES ('dep_9', 'x', '1', '2026-01-01T00:00:00Z', 'x')", "not allowed"),
    ],
)
def test_the_authorizer_denies_what_is_not_a_plain_read(source: SqliteReadOnlySource, sql: str, reason: str) -> None:
    with pytest.raises(SqlRejected) as rejected:
        source.execute(raw(sql), timeout_seconds=5)
    assert reason in rejected.value.reason


def test_writes_leave_the_data_as_it_was(source: SqliteReadOnlySource) -> None:
    before = run(source, "SELECT COUNT(*) AS n FROM orders")
    for sql in ("DELETE FROM orders", "UPDATE orders SET status = 'paid'", "DROP TABLE orders"):
        with pytest.raises(SqlRejected):
            source.execute(raw(sql), timeout_seconds=5)
    assert run(source, "SELECT COUNT(*) AS n FROM orders") == before


def test_a_second_statement_never_runs(source: SqliteReadOnlySource) -> None:
    with pytest.raises(SqlRejected):
        source.execute(raw("SELECT 1; DROP TABLE orders"), timeout_seconds=5)
    assert run(source, "SELECT COUNT(*) AS n FROM orders")[0]["n"] > 0


def test_the_deadline_stops_a_long_statement(source: SqliteReadOnlySource) -> None:
    checked = check_read_only(SLOW_SELECT, "sqlite")
    with pytest.raises(SqlTimeout, match="time limit"):
        source.execute(checked, timeout_seconds=0.05)


def test_rows_are_bounded_by_the_limit_even_without_one(source: SqliteReadOnlySource) -> None:
    result = source.execute(raw("SELECT id FROM orders", limit=3), timeout_seconds=5)
    assert [r["id"] for r in result.rows] == ["ord_000001", "ord_000002", "ord_000003"]


def test_a_long_value_is_cut_and_marked(source: SqliteReadOnlySource) -> None:
    result = source.execute(raw("SELECT " + " || ".join(["change"] * 100) + " AS wide FROM deployments"), 5)
    assert result.truncated
    assert all(len(r["wide"]) == 2000 and r["wide"].endswith("…") for r in result.rows)


def test_results_are_cut_under_a_mebibyte(source: SqliteReadOnlySource) -> None:
    # Each row is 12 values of ~2 kB: 200 of them would be 4.8 MB.
    value = " || ".join(["change"] * 40)
    wide = "SELECT " + ", ".join(f"{value} AS c{i}" for i in range(12)) + " FROM deployments, orders"
    result = source.execute(raw(wide, limit=200), timeout_seconds=5)
    assert result.truncated
    assert 0 < len(result.rows) < 200
    assert len(json.dumps([list(r.values()) for r in result.rows])) <= MAX_RESULT_BYTES


def test_duplicate_column_names_both_come_back(source: SqliteReadOnlySource) -> None:
    result = source.execute(
        check_read_only("SELECT o.id, p.id FROM orders o JOIN payment_attempts p ON p.order_id = o.id", "sqlite", 1),
        timeout_seconds=5,
    )
    assert result.columns == ("id", "id_2")
    assert result.rows == [{"id": "ord_000001", "id_2": "pa_000001"}]


def test_a_missing_database_file_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SqlUnavailable):
        SqliteReadOnlySource(tmp_path / "nowhere.sqlite").execute(raw("SELECT 1"), timeout_seconds=5)


# --- settings pick the source -------------------------------------------------------------------


def test_settings_pick_sqlite_with_its_path(clean_environment: None, demo_path: Path) -> None:
    source = sql_source_for(load_settings(diagnosis_sqlite_path=str(demo_path)))
    assert isinstance(source, SqliteReadOnlySource)
    assert source.execute(raw("SELECT COUNT(*) AS n FROM deployments"), timeout_seconds=5).rows == [{"n": 4}]


def test_sqlite_without_a_path_is_a_configuration_error(clean_environment: None) -> None:
    with pytest.raises(ConfigurationError, match="FLOWLEDGER_DIAGNOSIS_SQLITE_PATH"):
        sql_source_for(load_settings())


def test_settings_pick_mysql(clean_environment: None) -> None:
    source = sql_source_for(load_settings(diagnosis_sql_backend="mysql", diagnosis_mysql_password="pw"))
    assert isinstance(source, MySqlSource)
    assert source.dialect == "mysql"


def test_data_api_without_arns_is_a_configuration_error(clean_environment: None) -> None:
    with pytest.raises(ConfigurationError, match="RESOURCE_ARN"):
        sql_source_for(load_settings(diagnosis_sql_backend="data_api"))


def test_an_unreachable_mysql_is_unavailable() -> None:
    source = MySqlSource(host="127.0.0.1", port=1, user="u", password="p", database="app", connect_timeout=1)
    with pytest.raises(SqlUnavailable):
        source.execute(check_read_only("SELECT 1", "mysql"), timeout_seconds=1)


# --- the Data API adapter, against moto ---------------------------------------------------------

CLUSTER = "arn:aws:rds:us-east-1:123456789012:cluster:app"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:app-ro"


@pytest.fixture
def rds_data(clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("rds-data", region_name="us-east-1")


def _queue(records: list[dict[str, Any]], columns: list[str]) -> Any:
    backend = rdsdata_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    backend.results_queue.append(
        QueryResults(formatted_records=json.dumps(records), column_metadata=[{"name": c, "label": c} for c in columns])
    )
    return backend


def test_data_api_sends_the_checked_statement_with_its_time_limit(rds_data: Any) -> None:
    backend = _queue([{"status": "failed", "n": 312}], ["status", "n"])
    source = sql_source_for(
        load_settings(
            diagnosis_sql_backend="data_api",
            diagnosis_data_api_resource_arn=CLUSTER,
            diagnosis_data_api_secret_arn=SECRET,
        ),
        rds_data_client=rds_data,
    )
    checked = check_read_only("SELECT status, COUNT(*) AS n FROM orders GROUP BY status", "mysql")
    result = source.execute(checked, timeout_seconds=5)
    assert result.rows == [{"status": "failed", "n": 312}]
    assert result.columns == ("status", "n")
    ((arn, sql),) = backend.sql_results
    assert arn == CLUSTER
    assert sql == ("SELECT /*+ MAX_EXECUTION_TIME(5000) */ status, COUNT(*) AS n FROM orders GROUP BY status LIMIT 200")


def test_data_api_records_are_cut_to_the_limit_and_under_a_mebibyte(rds_data: Any) -> None:
    # 150 rows of 10 values of 1 kB: 1.5 MB, more than a Data API answer may hold.
    _queue(
        [{"n": i} | {f"c{c}": "x" * 1000 for c in range(10)} for i in range(150)], ["n", *(f"c{c}" for c in range(10))]
    )
    source = DataApiSource(rds_data, resource_arn=CLUSTER, secret_arn=SECRET, database="app")
    result = source.execute(check_read_only("SELECT * FROM t", "mysql"), timeout_seconds=5)
    assert result.truncated
    assert len(result.rows) < 100
    assert [r["n"] for r in result.rows] == list(range(len(result.rows)))

    _queue([{"n": i} for i in range(50)], ["n"])
    limited = source.execute(check_read_only("SELECT n FROM t", "mysql", row_cap=10), timeout_seconds=5)
    assert [r["n"] for r in limited.rows] == list(range(10))


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("StatementTimeoutException", SqlTimeout),
        ("BadRequestException", SqlRejected),
        ("DatabaseErrorException", SqlRejected),
        ("ForbiddenException", SqlUnavailable),
        ("ServiceUnavailableError", SqlUnavailable),
    ],
)
def test_data_api_errors_become_typed(rds_data: Any, code: str, error: type[Exception]) -> None:
    source = DataApiSource(rds_data, resource_arn=CLUSTER, secret_arn=SECRET, database="app")
    with Stubber(rds_data) as stub:
        stub.add_client_error("execute_statement", service_error_code=code, service_message="no")
        with pytest.raises(error):
            source.execute(check_read_only("SELECT 1", "mysql"), timeout_seconds=5)
