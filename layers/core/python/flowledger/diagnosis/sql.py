"""The read-only check every ``query_sql`` statement passes before anything runs.

:func:`check_read_only` parses the model's SQL with sqlglot and either refuses it with a reason the
model may read (:class:`UnsafeQuery`) or returns a :class:`CheckedQuery`: the statement *rendered
again by sqlglot* for the target dialect, without comments, with its LIMIT at most the row cap.
Only that rendering is ever sent to a database, so nothing the parser did not see (a MySQL
executable comment ``/*! ... */``, a second statement hidden in a comment) can reach the server.

The check is the first of three layers; the database adapters add their own (a SQLite authorizer,
a SELECT-only user in a read-only transaction with a statement time limit), so a gap here is not
a write there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import sqlglot
from sqlglot import exp

from flowledger.errors import FlowledgerError

Dialect = Literal["sqlite", "mysql"]
DIALECTS: tuple[str, ...] = ("sqlite", "mysql")

# Longer statements are refused before parsing: no diagnosis needs one, and parse cost grows with length.
MAX_SQL_CHARS = 8000

# Functions by sqlglot class: sqlglot maps the functions it knows to these; anything it does not
# know is an ``exp.Anonymous`` and is refused unless named in ALLOWED_ANONYMOUS below. Each is pure,
# reads nothing outside the query and allocates at most what its arguments hold (no REPEAT, LPAD,
# SPACE, RANDOMBLOB: they build huge values from a small number).
ALLOWED_FUNCTIONS: frozenset[type] = frozenset(
    {
        # operators sqlglot models as functions
        exp.And,
        exp.Or,
        exp.Xor,
        # aggregates
        exp.Count,
        exp.Sum,
        exp.Avg,
        exp.Min,
        exp.Max,
        exp.GroupConcat,
        exp.Stddev,
        exp.StddevPop,
        exp.StddevSamp,
        exp.Variance,
        exp.VariancePop,
        exp.PercentileCont,
        exp.PercentileDisc,
        # window functions
        exp.RowNumber,
        exp.Rank,
        exp.DenseRank,
        exp.Ntile,
        exp.Lag,
        exp.Lead,
        exp.FirstValue,
        exp.LastValue,
        exp.NthValue,
        exp.PercentRank,
        exp.CumeDist,
        # conditionals and conversions
        exp.Case,
        exp.If,
        exp.Coalesce,
        exp.Nullif,
        exp.Cast,
        exp.TryCast,
        exp.Greatest,
        exp.Least,
        exp.Exists,
        # numbers
        exp.Abs,
        exp.Round,
        exp.Floor,
        exp.Ceil,
        exp.Sign,
        exp.Sqrt,
        exp.Pow,
        exp.Ln,
        exp.Log,
        exp.Trunc,
        # text
        exp.Lower,
        exp.Upper,
        exp.Length,
        exp.Substring,
        exp.Trim,
        exp.Replace,
        exp.StrPosition,
        exp.Concat,
        exp.ConcatWs,
        exp.Left,
        exp.Right,
        exp.RegexpLike,
        exp.Typeof,
        # dates and times
        exp.CurrentDate,
        exp.CurrentTimestamp,
        exp.Date,
        exp.DateAdd,
        exp.DateSub,
        exp.DateDiff,
        exp.TimestampDiff,
        exp.Extract,
        exp.TimeToStr,
        exp.StrToDate,
        exp.StrToTime,
        exp.TsOrDsToDate,
        exp.TsOrDsToTimestamp,
        exp.UnixToTime,
        exp.Year,
        exp.Month,
        exp.Day,
        exp.Hour,
    }
)

# Functions sqlglot does not model, known harmless in that dialect (upper case).
ALLOWED_ANONYMOUS: dict[str, frozenset[str]] = {
    "sqlite": frozenset({"JULIANDAY", "DATETIME", "TIME", "UNIXEPOCH", "TOTAL", "IFNULL", "INSTR", "LTRIM", "RTRIM"}),
    "mysql": frozenset({"NOW", "UNIX_TIMESTAMP", "TIME_TO_SEC", "TIMEDIFF", "MINUTE", "SECOND", "DAYOFWEEK"}),
}

# Schemas and tables that describe the server, its users or its files rather than the application.
SYSTEM_SCHEMAS = frozenset({"information_schema", "mysql", "performance_schema", "sys", "temp"})
SYSTEM_TABLE_PREFIX = "sqlite_"  # sqlite_master, sqlite_schema, sqlite_temp_master, sqlite_sequence, sqlite_stat1

# Nodes that never belong in a read-only query, wherever they appear (a DELETE inside a CTE counts).
_FORBIDDEN: tuple[tuple[type, str], ...] = (
    (exp.Into, "SELECT ... INTO is not allowed: it writes to a file, a variable or a table"),
    (exp.Lock, "locking reads (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE) are not allowed"),
    (exp.DML, "only SELECT is allowed: INSERT, UPDATE, DELETE, MERGE and COPY change data"),
    (exp.DDL, "only SELECT is allowed: CREATE changes the schema"),
    (exp.Drop, "only SELECT is allowed: DROP changes the schema"),
    (exp.Alter, "only SELECT is allowed: ALTER changes the schema"),
    (exp.TruncateTable, "only SELECT is allowed: TRUNCATE deletes data"),
    (exp.LoadData, "LOAD DATA is not allowed"),
    (exp.Command, "commands (CALL, HANDLER, DO, EXECUTE, ...) are not allowed"),
    (exp.Set, "SET is not allowed"),
    (exp.SetItem, "SET is not allowed"),
    (exp.Pragma, "PRAGMA is not allowed"),
    (exp.Attach, "ATTACH is not allowed"),
    (exp.Detach, "DETACH is not allowed"),
    (exp.Use, "USE is not allowed"),
    (exp.Kill, "KILL is not allowed"),
    (exp.Transaction, "transaction control is not allowed"),
    (exp.Commit, "transaction control is not allowed"),
    (exp.Rollback, "transaction control is not allowed"),
    (exp.Grant, "GRANT is not allowed"),
    (exp.Revoke, "REVOKE is not allowed"),
    (exp.Describe, "DESCRIBE and EXPLAIN are not allowed: the tables and columns are in the tool's description"),
    (exp.Show, "SHOW is not allowed: the tables and columns are in the tool's description"),
    (exp.Analyze, "ANALYZE is not allowed"),
    (exp.Cache, "CACHE is not allowed"),
    (exp.Uncache, "UNCACHE is not allowed"),
    (exp.Refresh, "REFRESH is not allowed"),
    (exp.Export, "EXPORT is not allowed"),
    (exp.Execute, "EXECUTE is not allowed"),
    (exp.Hint, "optimizer hints are not allowed"),
    (exp.SessionParameter, "server variables (@@name) are not allowed"),
    (exp.Parameter, "user variables (@name) are not allowed"),
    (exp.PropertyEQ, "assignments (:=) are not allowed"),
    (exp.Placeholder, "placeholders are not allowed: write the values into the statement"),
)


class UnsafeQuery(FlowledgerError):
    """The statement was refused before it ran; ``reason`` says why, in words the model can act on."""

    code = "unsafe_query"

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class CheckedQuery:
    """A statement that passed :func:`check_read_only`, as it will be sent to the database."""

    sql: str  # sqlglot's rendering for ``dialect``: one statement, no comments, LIMIT ≤ the row cap
    dialect: str
    tables: tuple[str, ...]  # the tables read, lower case, ``schema.table`` when qualified; CTE names excluded
    limit: int  # the LIMIT the statement carries
    capped: bool  # True when the check added the LIMIT or lowered it to the row cap


def check_read_only(sql: str, dialect: str, row_cap: int = 200) -> CheckedQuery:
    """Check that ``sql`` is one read-only SELECT for ``dialect`` ("sqlite" or "mysql"), or raise UnsafeQuery.

    Refused: anything that does not parse (``sqlglot.parse``, never ``parse_one``), no statement or
    more than one, a root other than SELECT / UNION / INTERSECT / EXCEPT, ``INTO``, locking reads,
    recursive CTEs (with or without the RECURSIVE keyword: SQLite does not need it), functions off
    the allow-list (unknown functions included, so SLEEP, BENCHMARK, LOAD_FILE, GET_LOCK never pass),
    SET / PRAGMA / ATTACH / CALL / commands anywhere in the tree, optimizer hints, user and server
    variables, placeholders, MySQL executable comments (``/*! */``, ``/*M! */``), a LIMIT or OFFSET
    that is not a plain whole number, and the system schemas (information_schema, mysql,
    performance_schema, sys, SQLite's temp schema and its ``sqlite_*`` tables): they describe the
    server, its users and its files, not the incident, and the tool's description already lists the
    application's tables. Other schemas are left to the database user's grants.

    The returned statement carries ``LIMIT row_cap`` when it had none or a larger one.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
    if row_cap < 1:
        raise ValueError("row_cap must be at least 1")
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeQuery("the statement is empty")
    if len(sql) > MAX_SQL_CHARS:
        raise UnsafeQuery(f"the statement is longer than {MAX_SQL_CHARS} characters")
    if "\x00" in sql:
        raise UnsafeQuery("the statement contains a NUL character")

    try:
        # Comments first: MySQL runs /*! ... */ as code, while sqlglot (rightly, for other dialects) skips it.
        for token in sqlglot.tokenize(sql, read=dialect):
            for comment in token.comments:
                if comment.lstrip().startswith(("!", "M!", "m!")):
                    raise UnsafeQuery("MySQL executable comments (/*! ... */) are not allowed")
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except UnsafeQuery:
        raise
    except Exception as exc:  # ParseError, TokenError, RecursionError on deep nesting: all refusals
        raise UnsafeQuery(f"the statement does not parse as {dialect} SQL ({_first_line(exc)})") from None

    if not statements:
        raise UnsafeQuery("the statement is empty")
    if len(statements) > 1:
        raise UnsafeQuery(f"exactly one statement is allowed, found {len(statements)}")
    root = statements[0]
    if not isinstance(root, exp.Select | exp.Union | exp.Intersect | exp.Except):
        raise UnsafeQuery(f"only SELECT (with WITH, UNION, INTERSECT, EXCEPT) is allowed, not {_describe(root)}")

    _refuse_forbidden_nodes(root)
    _refuse_recursive_ctes(root)
    _refuse_unlisted_functions(root, dialect)
    tables = _tables_read(root, dialect)
    limit, capped = _cap_limit(root, row_cap)

    rendered = root.sql(dialect=dialect, comments=False)
    # The rendering is what runs: it must itself read back as exactly one statement.
    try:
        again = [s for s in sqlglot.parse(rendered, read=dialect) if s is not None]
    except Exception:  # a rendering sqlglot cannot read back is not sent anywhere
        again = []
    if len(again) != 1:
        raise UnsafeQuery("the statement could not be rendered back as one statement")
    return CheckedQuery(sql=rendered, dialect=dialect, tables=tables, limit=limit, capped=capped)


def _refuse_forbidden_nodes(root: exp.Expression) -> None:
    for node in root.walk():
        for kind, reason in _FORBIDDEN:
            if isinstance(node, kind):
                raise UnsafeQuery(reason)


def _refuse_recursive_ctes(root: exp.Expression) -> None:
    for with_ in root.find_all(exp.With):
        if with_.args.get("recursive"):
            raise UnsafeQuery("recursive CTEs (WITH RECURSIVE) are not allowed")
        ctes = [cte for cte in with_.expressions if isinstance(cte, exp.CTE)]
        names = [cte.alias_or_name.lower() for cte in ctes]
        for position, cte in enumerate(ctes):
            # A CTE reading itself (or one defined after it) recurses in SQLite even without RECURSIVE.
            later = set(names[position:])
            if any(t.name.lower() in later and not t.db for t in cte.find_all(exp.Table)):
                raise UnsafeQuery(f"the CTE {names[position]!r} refers to itself: recursive CTEs are not allowed")


def _refuse_unlisted_functions(root: exp.Expression, dialect: str) -> None:
    anonymous = ALLOWED_ANONYMOUS[dialect]
    for func in root.find_all(exp.Func):
        if isinstance(func, exp.Anonymous):
            name = func.name.upper()
            if name not in anonymous:
                raise UnsafeQuery(f"the function {name} is not allowed")
        elif type(func) not in ALLOWED_FUNCTIONS:
            raise UnsafeQuery(f"the function {func.sql_name()} is not allowed")


def _tables_read(root: exp.Expression, dialect: str) -> tuple[str, ...]:
    cte_names = {cte.alias_or_name.lower() for cte in root.find_all(exp.CTE)}
    tables: set[str] = set()
    for table in root.find_all(exp.Table):
        name, schema, catalog = table.name.lower(), table.db.lower(), table.catalog.lower()
        if not name:
            # A table-valued function (pragma_table_info(...), generate_series(...)) is not a table.
            raise UnsafeQuery(f"reading from {_describe(table.this)} is not allowed: read tables only")
        if schema in SYSTEM_SCHEMAS or catalog in SYSTEM_SCHEMAS or name.startswith(SYSTEM_TABLE_PREFIX):
            raise UnsafeQuery(f"the system table {table.sql(dialect=dialect, comments=False)} is not allowed")
        if not schema and name in cte_names:
            continue
        tables.add(f"{schema}.{name}" if schema else name)
    return tuple(sorted(tables))


def _cap_limit(root: exp.Expression, row_cap: int) -> tuple[int, bool]:
    limit = root.args.get("limit")
    offset = root.args.get("offset")
    if offset is not None:
        _whole_number(offset.expression, "OFFSET")
    if limit is None:
        root.set("limit", exp.Limit(expression=exp.Literal.number(row_cap)))
        return row_cap, True
    if not isinstance(limit, exp.Limit):
        raise UnsafeQuery("write the row limit as LIMIT n")
    if limit.args.get("offset") is not None:
        _whole_number(limit.args["offset"], "OFFSET")
    asked = _whole_number(limit.expression, "LIMIT")
    if asked > row_cap:
        limit.set("expression", exp.Literal.number(row_cap))
        return row_cap, True
    return asked, False


def _whole_number(node: exp.Expression | None, clause: str) -> int:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    raise UnsafeQuery(f"{clause} must be a whole number")


def _describe(node: Any) -> str:
    if node is None:
        return "nothing"
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    if isinstance(node, exp.Anonymous):
        return f"{str(node.this).upper()}(...)"
    return str(node.key).upper()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    # sqlglot's message has the offending excerpt with ANSI underlines on the next lines; keep the summary.
    return text[0][:160] if text else type(exc).__name__
