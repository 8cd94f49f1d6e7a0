"""Where ``query_sql`` statements run: the ``SqlSource`` port and its three adapters.

Each adapter enforces read-only on its own, whatever the checker let through:

- :class:`SqliteReadOnlySource` (the embedded demo, the local default): the file opened
  ``mode=ro``, ``PRAGMA query_only``, and an authorizer that allows only SELECT, READ of the
  application's tables and allow-listed functions, so ``ATTACH`` (which creates files even on a
  read-only connection), ``PRAGMA`` and writes fail when the statement is prepared; a progress
  handler stops a statement at its deadline.
- :class:`MySqlSource` (MySQL or MariaDB over PyMySQL): a SELECT-only user, the session set
  ``TRANSACTION READ ONLY``, each statement in a ``START TRANSACTION READ ONLY``, a server-side time
  limit (``max_statement_time`` on MariaDB, ``MAX_EXECUTION_TIME`` hint and session variable on
  MySQL), ``sql_select_limit`` at the row cap, a client read timeout, results streamed and cut
  under 1 MiB.
- :class:`DataApiSource` (Aurora MySQL through the RDS Data API: no VPC for the function): the
  secret's SELECT-only user and the ``MAX_EXECUTION_TIME`` hint; the Data API itself answers at
  most 1 MiB, and the rows are cut under that again here.

A database error becomes a :class:`SqlError`: :class:`SqlRejected` (the database would not run it:
not allowed, no such column) or :class:`SqlTimeout` / :class:`SqlUnavailable` (it did not answer).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from flowledger.config import DiagnosisSqlBackend, Settings
from flowledger.diagnosis.sql import CheckedQuery
from flowledger.errors import ConfigurationError

# Under the Data API's 1 MiB response limit, and the same bound for every backend.
MAX_RESULT_BYTES = 1_000_000
# The client waits this much longer than the server-side limit, so the server's own stop is what a caller sees.
_CLIENT_GRACE_SECONDS = 2.0
_MAX_CELL_CHARS = 2000  # one value shown at most this long; a diagnosis never needs a whole blob


class SqlError(Exception):
    """The database did not give rows; ``reason`` is one line the model may read."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SqlRejected(SqlError):
    """The database would not run the statement: not allowed for this user or connection, or not valid."""


class SqlTimeout(SqlError):
    """The statement ran past its time limit, or the database did not answer in time."""


class SqlUnavailable(SqlError):
    """The database could not be reached or is not configured."""


@dataclass(frozen=True)
class SqlRows:
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    truncated: bool = False  # True when rows were dropped to stay under MAX_RESULT_BYTES


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: tuple[tuple[str, str], ...]  # (column, type)


class SqlSource(Protocol):
    """A database ``query_sql`` can read: its dialect, its tables, and a way to run a checked statement."""

    @property
    def dialect(self) -> str: ...

    def execute(self, checked: CheckedQuery, timeout_seconds: float) -> SqlRows: ...

    def describe(self, timeout_seconds: float) -> tuple[TableSchema, ...]: ...


# --- shared -------------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """A database value as JSON shows it: numbers stay numbers, times become ISO text, blobs are described."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime | date | clock_time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    return str(value)


def unique_columns(names: Iterable[str]) -> tuple[str, ...]:
    """Column names made unique (``id``, ``id_2``): two columns of one name must both reach the model."""
    seen: dict[str, int] = {}
    result = []
    for name in names:
        count = seen.get(name, 0) + 1
        seen[name] = count
        result.append(name if count == 1 else f"{name}_{count}")
    return tuple(result)


def collect_rows(columns: tuple[str, ...], source: Iterator[Any], limit: int) -> SqlRows:
    """At most ``limit`` rows from ``source`` and at most MAX_RESULT_BYTES of them, as dicts.

    A text value longer than _MAX_CELL_CHARS is cut (and the result marked truncated)."""
    rows: list[dict[str, Any]] = []
    size = 2
    cut = False
    for raw in source:
        if len(rows) >= limit:
            break
        values = []
        for value in raw:
            shown = jsonable(value)
            if isinstance(shown, str) and len(shown) > _MAX_CELL_CHARS:
                shown, cut = shown[: _MAX_CELL_CHARS - 1] + "…", True
            values.append(shown)
        size += len(json.dumps(values, ensure_ascii=False).encode()) + 1
        if size > MAX_RESULT_BYTES:
            return SqlRows(columns, rows, truncated=True)
        rows.append(dict(zip(columns, values, strict=True)))
    return SqlRows(columns, rows, truncated=cut)


def with_execution_hint(sql: str, timeout_seconds: float) -> str:
    """``sql`` with MySQL's ``MAX_EXECUTION_TIME`` optimizer hint in its first SELECT (the checker's
    rendering always starts with ``SELECT`` or ``WITH``; a WITH's first SELECT is inside it, so the
    session variable covers that case)."""
    if sql.startswith("SELECT "):
        return f"SELECT /*+ MAX_EXECUTION_TIME({_milliseconds(timeout_seconds)}) */ " + sql[len("SELECT ") :]
    return sql


def _milliseconds(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _line(text: object, limit: int = 200) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


# --- SQLite -------------------------------------------------------------------------------------

# Built-in SQLite functions a diagnosis may call, by the name the authorizer reports (lower case).
SQLITE_FUNCTIONS = frozenset(
    {
        # aggregates and window functions
        "count", "sum", "total", "avg", "min", "max", "group_concat", "string_agg",
        "row_number", "rank", "dense_rank", "ntile", "lag", "lead", "first_value", "last_value",
        "nth_value", "percent_rank", "cume_dist",
        # scalars
        "abs", "round", "coalesce", "ifnull", "iif", "nullif", "typeof", "sign", "floor", "ceil",
        "ceiling", "sqrt", "pow", "power", "ln", "log", "trunc",
        "lower", "upper", "length", "substr", "substring", "trim", "ltrim", "rtrim", "replace", "instr",
        "concat", "concat_ws", "like", "glob",
        "date", "time", "datetime", "julianday", "unixepoch", "strftime",
    }
)  # fmt: skip

# The authorizer's action codes by name (result codes share some numbers, so no lookup over dir(sqlite3)).
_SQLITE_ACTIONS = {
    getattr(sqlite3, f"SQLITE_{name}"): name
    for name in (
        "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE", "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE", "DROP_INDEX", "DROP_TABLE",
        "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW",
        "INSERT", "PRAGMA", "READ", "SELECT", "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE",
        "REINDEX", "ANALYZE", "CREATE_VTABLE", "DROP_VTABLE", "FUNCTION", "SAVEPOINT", "RECURSIVE",
    )
    if hasattr(sqlite3, f"SQLITE_{name}")
}  # fmt: skip


class _SqliteGuard:
    """The authorizer and progress handler of one statement; remembers why it stopped one."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.denied: str | None = None
        self.timed_out = False

    def authorize(self, action: int, arg1: str | None, arg2: str | None, database: str | None, _: str | None) -> int:
        if action == sqlite3.SQLITE_SELECT:
            return sqlite3.SQLITE_OK
        # Reads of the main database only, never of its sqlite_* system tables.
        if (
            action == sqlite3.SQLITE_READ
            and database in ("main", None)
            and arg1
            and not arg1.lower().startswith("sqlite_")
        ):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and arg2 and arg2.lower() in SQLITE_FUNCTIONS:
            return sqlite3.SQLITE_OK
        # The first denial is the one that stopped the statement; later ones are SQLite cleaning up.
        self.denied = self.denied or self._describe(action, arg1, arg2)
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        # A non-zero answer interrupts the statement (SQLITE_INTERRUPT).
        if time.monotonic() >= self.deadline:
            self.timed_out = True
            return 1
        return 0

    @staticmethod
    def _describe(action: int, arg1: str | None, arg2: str | None) -> str:
        if action == sqlite3.SQLITE_FUNCTION:
            return f"the function {arg2} is not allowed"
        if action == sqlite3.SQLITE_READ:
            return f"reading {arg1} is not allowed"
        if action == sqlite3.SQLITE_PRAGMA:
            return f"PRAGMA {arg1} is not allowed"
        name = _SQLITE_ACTIONS.get(action, str(action))
        return f"{name.replace('_', ' ')} is not allowed"


class SqliteReadOnlySource:
    """A SQLite database file, read-only, each statement under an authorizer and a deadline."""

    def __init__(self, path: Path | str) -> None:
        self._path = Path(path)

    @property
    def dialect(self) -> str:
        return "sqlite"

    def _open(self) -> sqlite3.Connection:
        if not self._path.is_file():
            raise SqlUnavailable(f"the database file {self._path.name} does not exist")
        uri = f"file:{quote(str(self._path.resolve()))}?mode=ro"
        try:
            connection = sqlite3.connect(uri, uri=True, isolation_level=None)
            # Before the authorizer, which would deny this PRAGMA: a second lock on the same door.
            connection.execute("PRAGMA query_only = ON")
        except sqlite3.Error as exc:
            raise SqlUnavailable(f"the database could not be opened ({_line(exc)})") from None
        return connection

    def execute(self, checked: CheckedQuery, timeout_seconds: float) -> SqlRows:
        """Run ``checked.sql``; SqlRejected when the authorizer or SQLite refuses it, SqlTimeout past the deadline."""
        connection = self._open()
        guard = _SqliteGuard(time.monotonic() + timeout_seconds)
        connection.set_authorizer(guard.authorize)
        connection.set_progress_handler(guard.progress, 1000)
        try:
            cursor = connection.execute(checked.sql)
            columns = unique_columns(d[0] for d in cursor.description or ())
            return collect_rows(columns, iter(cursor), checked.limit)
        except sqlite3.Error as exc:
            raise self._translate(exc, guard, timeout_seconds) from None
        finally:
            connection.close()

    @staticmethod
    def _translate(exc: sqlite3.Error, guard: _SqliteGuard, timeout_seconds: float) -> SqlError:
        if guard.timed_out:
            return SqlTimeout(f"the statement ran past its time limit of {timeout_seconds:g} s and was stopped")
        if guard.denied:
            return SqlRejected(f"the database refused the statement: {guard.denied}")
        if isinstance(exc, sqlite3.ProgrammingError | sqlite3.OperationalError | sqlite3.DataError):
            # no such table or column, a syntax the rendering got wrong, more than one statement
            return SqlRejected(f"the database rejected the statement: {_line(exc)}")
        return SqlUnavailable(f"the database failed: {_line(exc)}")

    def describe(self, timeout_seconds: float) -> tuple[TableSchema, ...]:
        """The application's tables and their columns (trusted queries; the model's SQL never runs here)."""
        connection = self._open()
        try:
            names = [
                row[0]
                for row in connection.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                    "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
                )
            ]
            tables = []
            for name in names:
                quoted = '"' + name.replace('"', '""') + '"'
                info = connection.execute(f"PRAGMA table_info({quoted})").fetchall()
                tables.append(TableSchema(name, tuple((str(c[1]), str(c[2]) or "ANY") for c in info)))
            return tuple(tables)
        except sqlite3.Error as exc:
            raise SqlUnavailable(f"the database could not be described ({_line(exc)})") from None
        finally:
            connection.close()


# --- MySQL / MariaDB ----------------------------------------------------------------------------

_MYSQL_SERVER_TIMEOUTS = {3024, 1969, 1317}  # MySQL max_execution_time, MariaDB max_statement_time, interrupted
_MYSQL_LOST = {2013}  # lost the connection during the query (our read timeout)
_MYSQL_UNREACHABLE = {2002, 2003, 2005, 2006, 1040, 1045, 1049, 1129, 1130, 1203}
_MYSQL_NOT_ALLOWED = {1044, 1095, 1142, 1143, 1227, 1290, 1370, 1792, 1836}


class MySqlSource:
    """MySQL or MariaDB over PyMySQL, as a SELECT-only user; one connection per statement."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        user: str,
        password: str | None,
        database: str,
        unix_socket: str | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        self._params: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": user,
            "password": password or "",
            "database": database,
            "unix_socket": unix_socket,
            "connect_timeout": connect_timeout,
            "charset": "utf8mb4",
            "autocommit": True,
            # PyMySQL never sets CLIENT.MULTI_STATEMENTS unless asked: one statement per call, server-side too.
            "client_flag": 0,
        }

    @property
    def dialect(self) -> str:
        return "mysql"

    def _connect(self, timeout_seconds: float) -> Any:
        pymysql = _pymysql()
        wait = max(1, int(timeout_seconds + _CLIENT_GRACE_SECONDS + 0.999))
        try:
            return pymysql.connect(**self._params, read_timeout=wait, write_timeout=wait)
        except pymysql.MySQLError as exc:
            raise _mysql_error(exc, timeout_seconds) from None
        except OSError as exc:
            raise SqlUnavailable(f"the database could not be reached ({_line(exc)})") from None

    def _prepare(self, connection: Any, timeout_seconds: float, limit: int) -> bool:
        """Make the session read-only and time-limited; True when the server is MariaDB."""
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
            cursor.execute("SELECT VERSION()")
            row = cursor.fetchone()
            mariadb = "mariadb" in str(row[0] if row else "").lower()
            if mariadb:
                cursor.execute("SET SESSION max_statement_time = %s", (round(timeout_seconds, 3),))
            else:
                cursor.execute("SET SESSION max_execution_time = %s", (_milliseconds(timeout_seconds),))
            # Belt and braces under the checker's LIMIT, and a bound on one GROUP_CONCAT value.
            cursor.execute("SET SESSION sql_select_limit = %s", (limit,))
            cursor.execute("SET SESSION group_concat_max_len = 65536")
            cursor.execute("START TRANSACTION READ ONLY")
        return mariadb

    def execute(self, checked: CheckedQuery, timeout_seconds: float) -> SqlRows:
        """Run ``checked.sql`` read-only under the server's time limit; rows streamed and cut under 1 MiB."""
        pymysql = _pymysql()

        connection = self._connect(timeout_seconds)
        try:
            mariadb = self._prepare(connection, timeout_seconds, checked.limit)
            sql = checked.sql if mariadb else with_execution_hint(checked.sql, timeout_seconds)
            # Unbuffered: rows are read as they are counted, never the whole result first.
            cursor = pymysql.cursors.SSCursor(connection)
            try:
                cursor.execute(sql)
                columns = unique_columns(d[0] for d in cursor.description or ())
                return collect_rows(columns, iter(cursor.fetchone, None), checked.limit)
            finally:
                _abandon(cursor)
        except pymysql.MySQLError as exc:
            raise _mysql_error(exc, timeout_seconds) from None
        except OSError as exc:
            raise SqlTimeout(f"the database connection failed during the statement ({_line(exc)})") from None
        finally:
            _close(connection)

    def describe(self, timeout_seconds: float) -> tuple[TableSchema, ...]:
        """The tables and columns of the configured database, as the user sees them."""
        pymysql = _pymysql()

        connection = self._connect(timeout_seconds)
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME, ORDINAL_POSITION"
                )
                return _schemas(cursor.fetchall())
        except pymysql.MySQLError as exc:
            raise _mysql_error(exc, timeout_seconds) from None
        finally:
            _close(connection)


def _pymysql() -> Any:
    # Imported on first use: the SQLite default never loads it.
    import pymysql  # type: ignore[import-untyped,unused-ignore]

    return pymysql


def _abandon(cursor: Any) -> None:
    # Not cursor.close(): it would read the rest of a result cut short, maybe megabytes. Closing the
    # connection drops it on the server; PyMySQL is told here not to read it later (it would, on GC).
    result = getattr(cursor, "_result", None)
    if result is not None:
        result.unbuffered_active = False


def _close(connection: Any) -> None:
    # After a lost connection PyMySQL has closed it already, and a second close raises.
    if connection.open:
        try:
            connection.close()
        except Exception:  # the statement's outcome is already decided; closing is best effort
            connection._force_close()


def _schemas(rows: Iterable[Any]) -> tuple[TableSchema, ...]:
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        text = kind.decode() if isinstance(kind, bytes) else str(kind)
        tables.setdefault(str(table), []).append((str(column), text))
    return tuple(TableSchema(name, tuple(columns)) for name, columns in tables.items())


def _mysql_error(exc: Exception, timeout_seconds: float) -> SqlError:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    message = _line(exc.args[1] if len(exc.args) > 1 else exc)
    if code in _MYSQL_SERVER_TIMEOUTS:
        return SqlTimeout(f"the statement ran past its time limit of {timeout_seconds:g} s and was stopped")
    if code in _MYSQL_LOST:
        return SqlTimeout(f"the database did not answer within {timeout_seconds:g} s")
    if code in _MYSQL_UNREACHABLE:
        # The server's text may name the user or host; the model needs only the fact.
        return SqlUnavailable(f"the database could not be reached (MySQL error {code})")
    if code in _MYSQL_NOT_ALLOWED:
        return SqlRejected(f"the database user may not do this: {message}")
    if code is not None and 1000 <= code < 2000:
        return SqlRejected(f"the database rejected the statement: {message}")
    return SqlUnavailable(f"the database failed: {message}")


# --- RDS Data API -------------------------------------------------------------------------------

_DATA_API_TIMEOUTS = {"StatementTimeoutException"}
_DATA_API_REJECTED = {"BadRequestException", "DatabaseErrorException", "UnsupportedResultException"}


class DataApiSource:
    """Aurora MySQL through the RDS Data API (``rds-data`` ``ExecuteStatement``), as the secret's SELECT-only user."""

    def __init__(self, client: Any, *, resource_arn: str, secret_arn: str, database: str) -> None:
        self._client = client
        self._target = {"resourceArn": resource_arn, "secretArn": secret_arn, "database": database}

    @property
    def dialect(self) -> str:
        return "mysql"

    def _statement(self, sql: str) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, ReadTimeoutError

        try:
            response: dict[str, Any] = self._client.execute_statement(
                **self._target, sql=sql, formatRecordsAs="JSON", includeResultMetadata=True
            )
            return response
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _DATA_API_TIMEOUTS:
                raise SqlTimeout("the statement ran past its time limit and was stopped") from None
            if code in _DATA_API_REJECTED:
                message = _line(exc.response.get("Error", {}).get("Message", code))
                raise SqlRejected(f"the database rejected the statement: {message}") from None
            raise SqlUnavailable(f"the Data API did not answer ({code or 'error'})") from None
        except (ReadTimeoutError, ConnectTimeoutError):
            raise SqlTimeout("the Data API did not answer in time") from None
        except BotoCoreError as exc:
            raise SqlUnavailable(f"the Data API could not be reached ({type(exc).__name__})") from None

    def execute(self, checked: CheckedQuery, timeout_seconds: float) -> SqlRows:
        """Run ``checked.sql`` with the MAX_EXECUTION_TIME hint; the JSON records cut to the limit and 1 MiB."""
        response = self._statement(with_execution_hint(checked.sql, timeout_seconds))
        try:
            records = json.loads(response.get("formattedRecords") or "[]")
        except ValueError:
            raise SqlUnavailable("the Data API answered records that are not JSON") from None
        if not isinstance(records, list):
            raise SqlUnavailable("the Data API answered records that are not a list")
        metadata = response.get("columnMetadata") or []
        names = [str(m.get("label") or m.get("name") or "") for m in metadata]
        if not names or not all(names):
            names = list(records[0]) if records and isinstance(records[0], dict) else []
        columns = unique_columns(names)
        values = ([r.get(n) for n in names] if isinstance(r, dict) else [] for r in records)
        return collect_rows(columns, iter(values), checked.limit)

    def describe(self, timeout_seconds: float) -> tuple[TableSchema, ...]:
        """The database's tables and columns, from information_schema."""
        response = self._statement(
            "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME, ORDINAL_POSITION"
        )
        try:
            records = json.loads(response.get("formattedRecords") or "[]")
            return _schemas((r["TABLE_NAME"], r["COLUMN_NAME"], r["COLUMN_TYPE"]) for r in records)
        except (ValueError, KeyError, TypeError):
            raise SqlUnavailable("the Data API answered a schema that could not be read") from None


# --- wiring -------------------------------------------------------------------------------------


def sql_source_for(settings: Settings, *, rds_data_client: Any = None) -> SqlSource:
    """The source the settings name. ``rds_data_client`` is an ``rds-data`` boto3 client (made here if absent)."""
    backend = settings.diagnosis_sql_backend
    if backend is DiagnosisSqlBackend.SQLITE:
        if not settings.diagnosis_sqlite_path:
            raise ConfigurationError(
                "FLOWLEDGER_DIAGNOSIS_SQLITE_PATH must name the database file for the sqlite backend"
            )
        return SqliteReadOnlySource(settings.diagnosis_sqlite_path)
    if backend is DiagnosisSqlBackend.MYSQL:
        password = settings.diagnosis_mysql_password
        return MySqlSource(
            host=settings.diagnosis_mysql_host,
            port=settings.diagnosis_mysql_port,
            user=settings.diagnosis_mysql_user,
            password=password.get_secret_value() if password else None,
            database=settings.diagnosis_mysql_database,
        )
    if not settings.diagnosis_data_api_resource_arn or not settings.diagnosis_data_api_secret_arn:
        raise ConfigurationError(
            "FLOWLEDGER_DIAGNOSIS_DATA_API_RESOURCE_ARN and FLOWLEDGER_DIAGNOSIS_DATA_API_SECRET_ARN "
            "must be set for the data_api backend"
        )
    return DataApiSource(
        rds_data_client or _rds_data_client(settings),
        resource_arn=settings.diagnosis_data_api_resource_arn,
        secret_arn=settings.diagnosis_data_api_secret_arn,
        database=settings.diagnosis_data_api_database,
    )


def _rds_data_client(settings: Settings) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "rds-data",
        region_name=settings.aws_region,
        endpoint_url=settings.aws_endpoint_url,
        # Read past the statement's own limit; one retry at most, a tool call holds a turn open.
        config=Config(
            retries={"max_attempts": 2, "mode": "standard"},
            connect_timeout=3,
            read_timeout=settings.diagnosis_sql_timeout_seconds + _CLIENT_GRACE_SECONDS,
        ),
    )
