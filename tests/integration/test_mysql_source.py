"""``MySqlSource`` against a real MariaDB server this module starts in a temporary data directory.

The fixture runs ``mariadb-install-db`` and ``mariadbd`` itself (never a system service), creates
the database, loads the demo rows, and creates the SELECT-only user the adapter connects as. Without
the MariaDB binaries the module is skipped, unless FLOWLEDGER_REQUIRE_MARIADB=1 (CI), where it fails.
"""

# ruff: noqa: S608 - statements are built from constants; bypassing the checker is the point here

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pymysql  # type: ignore[import-untyped,unused-ignore]
import pytest

from flowledger.diagnosis import demo_incident as incident
from flowledger.diagnosis.demo_database import load_demo_mysql
from flowledger.diagnosis.sql import CheckedQuery, check_read_only
from flowledger.diagnosis.sql_sources import MAX_RESULT_BYTES, MySqlSource, SqlRejected, SqlTimeout

# A result cut short must be dropped cleanly, not read again by PyMySQL when the cursor is collected.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
DATABASE = "app"
READER, READER_PASSWORD = "flowledger_ro", "ro-password"
WRITER, WRITER_PASSWORD = "flowledger_rw", "rw-password"
_STARTUP_SECONDS = 60


@dataclass(frozen=True)
class MariaDb:
    port: int
    socket: str

    def admin(self) -> Any:
        """A root connection over the server's socket, for setting up and for checking what the tests did."""
        return pymysql.connect(unix_socket=self.socket, user="root", password="", autocommit=True)

    def source(self, user: str = READER, password: str = READER_PASSWORD) -> MySqlSource:
        return MySqlSource(host="127.0.0.1", port=self.port, user=user, password=password, database=DATABASE)

    def count(self, table: str = "orders") -> int:
        connection = self.admin()
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT COUNT(*) FROM `{DATABASE}`.`{table}`")
                return int(cursor.fetchone()[0])
        finally:
            connection.close()


def _binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_ready(server: subprocess.Popen[bytes], socket_path: str, log: Path) -> None:
    deadline = time.monotonic() + _STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"mariadbd exited with {server.returncode}:\n{log.read_text()[-2000:]}")
        try:
            pymysql.connect(unix_socket=socket_path, user="root", password="", connect_timeout=1).close()
            return
        except pymysql.MySQLError:
            time.sleep(0.2)
    pytest.fail(f"mariadbd did not accept connections within {_STARTUP_SECONDS} s:\n{log.read_text()[-2000:]}")


def _set_up(server: MariaDb) -> None:
    connection = server.admin()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{DATABASE}` DEFAULT CHARACTER SET utf8mb4")
            cursor.execute(f"USE `{DATABASE}`")
        load_demo_mysql(connection, NOW)
        with connection.cursor() as cursor:
            # The user query_sql connects as: SELECT on the application's database, nothing else.
            cursor.execute(f"CREATE USER '{READER}'@'%%' IDENTIFIED BY %s", (READER_PASSWORD,))
            cursor.execute(f"GRANT SELECT ON `{DATABASE}`.* TO '{READER}'@'%'")
            # A user who may write: proves the read-only transaction holds on its own.
            cursor.execute(f"CREATE USER '{WRITER}'@'%%' IDENTIFIED BY %s", (WRITER_PASSWORD,))
            cursor.execute(f"GRANT ALL PRIVILEGES ON `{DATABASE}`.* TO '{WRITER}'@'%'")
    finally:
        connection.close()


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDb]:
    install, daemon = _binary("mariadb-install-db"), _binary("mariadbd")
    if not install or not daemon:
        message = "MariaDB is not installed (apt-get install mariadb-server)"
        if os.environ.get("FLOWLEDGER_REQUIRE_MARIADB") == "1":
            pytest.fail(message + "; FLOWLEDGER_REQUIRE_MARIADB=1 requires it")
        pytest.skip(message)
    # A short path: a unix socket path must stay under ~107 bytes.
    root = Path(tmp_path_factory.mktemp("mariadb"))
    datadir, socket_path, log = root / "data", str(root / "mysqld.sock"), root / "error.log"
    # Its own temporary directory: in /tmp, a bootstrap's internal temporary tables vanished under it once in
    # CI ("Error on delete of '/tmp/#sql-temptable-…'", two workers each bootstrapping a server at once).
    scratch = root / "tmp"
    scratch.mkdir()
    # --force: no lookup of this machine's host name first (the grants here name '%', never a host), which
    # on a machine without DNS can fail; a failure shows the script's own words.
    installed = subprocess.run(
        [install, "--no-defaults", f"--datadir={datadir}", "--user=root", "--auth-root-authentication-method=normal",
         "--skip-test-db", "--force", f"--tmpdir={scratch}"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if installed.returncode != 0:
        pytest.fail(
            f"mariadb-install-db exited with {installed.returncode}:\n{(installed.stdout + installed.stderr)[-3000:]}"
        )
    port = _free_port()
    server = subprocess.Popen(
        [daemon, "--no-defaults", f"--datadir={datadir}", f"--socket={socket_path}", f"--port={port}",
         "--bind-address=127.0.0.1", "--user=root", f"--pid-file={root / 'mysqld.pid'}", f"--log-error={log}",
         "--skip-log-bin", "--skip-name-resolve", "--innodb-buffer-pool-size=32M", f"--tmpdir={scratch}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_until_ready(server, socket_path, log)
        instance = MariaDb(port=port, socket=socket_path)
        _set_up(instance)
        yield instance
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def raw(sql: str, limit: int = 200) -> CheckedQuery:
    """A statement that never went through the checker."""
    return CheckedQuery(sql=sql, dialect="mysql", tables=(), limit=limit, capped=False)


def test_a_checked_select_returns_the_demo_rows(mariadb: MariaDb) -> None:
    checked = check_read_only(
        "SELECT o.status, p.error_code, COUNT(*) AS n, MAX(p.latency_ms) AS slowest FROM orders o "
        "JOIN payment_attempts p ON p.order_id = o.id GROUP BY o.status, p.error_code ORDER BY o.status",
        "mysql",
    )
    rows = mariadb.source().execute(checked, timeout_seconds=5).rows
    assert rows[0] == {
        "status": "failed",
        "error_code": incident.ERROR_CODE,
        "n": incident.FAILED_CHECKOUTS,
        "slowest": incident.WAIT_MS,
    }
    assert rows[1]["status"] == "paid" and rows[1]["error_code"] is None


def test_the_schema_is_described_for_the_user(mariadb: MariaDb) -> None:
    tables = {t.name: [c for c, _ in t.columns] for t in mariadb.source().describe(timeout_seconds=5)}
    assert tables["deployments"] == ["id", "service", "version", "deployed_at", "change"]
    assert set(tables) == {"deployments", "orders", "payment_attempts"}


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO orders VALUES ('ord_999999', '2026-12-01T00:00:00Z', 'paid', 1, NULL)",
        "UPDATE orders SET status = 'paid'",
        "DELETE FROM orders",
        "DROP TABLE orders",
        "CREATE TABLE stolen AS SELECT * FROM orders",
        "TRUNCATE TABLE orders",
    ],
)
def test_the_select_only_user_cannot_write_even_past_the_checker(mariadb: MariaDb, sql: str) -> None:
    before = mariadb.count()
    with pytest.raises(SqlRejected, match="may not do this"):
        mariadb.source().execute(raw(sql), timeout_seconds=5)
    assert mariadb.count() == before


def test_the_read_only_transaction_stops_a_user_who_could_write(mariadb: MariaDb) -> None:
    before = mariadb.count("deployments")
    writer = mariadb.source(WRITER, WRITER_PASSWORD)
    with pytest.raises(SqlRejected, match="READ ONLY"):
        writer.execute(
            raw("INSERT INTO deployments VALUES ('dep_9999', 'x', '0', '2026-12-01T00:00:00Z', 'x')"), timeout_seconds=5
        )
    assert mariadb.count("deployments") == before


def test_the_session_is_read_only_and_time_limited(mariadb: MariaDb) -> None:
    rows = mariadb.source().execute(
        raw("SELECT @@session.tx_read_only AS ro, @@session.max_statement_time AS limit_s"), timeout_seconds=3
    )
    assert rows.rows == [{"ro": 1, "limit_s": 3}]


def test_a_second_statement_is_never_run(mariadb: MariaDb) -> None:
    with pytest.raises(SqlRejected):
        mariadb.source(WRITER, WRITER_PASSWORD).execute(raw("SELECT 1; DROP TABLE orders"), timeout_seconds=5)
    assert mariadb.count() > 0


def test_a_quote_trick_stays_inside_its_string(mariadb: MariaDb) -> None:
    checked = check_read_only(
        "SELECT COUNT(*) AS n FROM orders WHERE status = 'paid\\'; DROP TABLE orders; -- '", "mysql"
    )
    assert mariadb.source().execute(checked, timeout_seconds=5).rows == [{"n": 0}]
    assert mariadb.count() > 0


def test_the_server_time_limit_stops_a_slow_select(mariadb: MariaDb) -> None:
    # Nine billion joined rows: it only ends because the server stops it (the client would wait longer).
    checked = check_read_only("SELECT COUNT(*) FROM orders a, payment_attempts b, payment_attempts c", "mysql")
    with pytest.raises(SqlTimeout, match="time limit"):
        mariadb.source().execute(checked, timeout_seconds=1)


def test_the_server_time_limit_stops_sleep_past_the_checker(mariadb: MariaDb) -> None:
    with pytest.raises(SqlTimeout, match="time limit"):
        mariadb.source().execute(raw("SELECT SLEEP(30), COUNT(*) FROM orders"), timeout_seconds=1)


def test_results_are_cut_under_a_mebibyte(mariadb: MariaDb) -> None:
    # 12 values of 2000 characters a row: 200 rows would be 4.8 MB.
    columns = ", ".join(f"REPEAT(id, 200) AS c{i}" for i in range(12))
    result = mariadb.source().execute(raw(f"SELECT {columns} FROM orders LIMIT 200"), timeout_seconds=5)
    assert result.truncated
    assert 0 < len(result.rows) < 200
    assert sum(len(v) for row in result.rows for v in row.values()) < MAX_RESULT_BYTES


def test_the_row_limit_holds_without_a_limit_clause(mariadb: MariaDb) -> None:
    result = mariadb.source().execute(raw("SELECT id FROM orders ORDER BY id", limit=4), timeout_seconds=5)
    assert [r["id"] for r in result.rows] == ["ord_000001", "ord_000002", "ord_000003", "ord_000004"]
