"""The read-only check of ``query_sql``: hostile statements are refused with a reason, SELECTs pass capped."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from flowledger.diagnosis.sql import MAX_SQL_CHARS, CheckedQuery, UnsafeQuery, check_read_only
from tests.hypothesis_profiles import examples

ONE = "exactly one statement"
EXECUTABLE = "executable comments"
ONLY_SELECT = "only SELECT"
INTO = "INTO is not allowed"
LOCKING = "locking reads"
RECURSIVE = "recursive"
SYSTEM = "system table"
PARSE = "does not parse"

# (dialect, statement, a fragment the reason must hold): every one is refused, and for the right reason.
HOSTILE: list[tuple[str, str, str]] = [
    # stacked statements, and comments hiding a second one
    ("mysql", "SELECT 1; DROP TABLE orders", ONE),
    ("sqlite", "SELECT 1; DELETE FROM orders", ONE),
    ("mysql", "SELECT 1 -- hide the rest\n; DROP TABLE orders", ONE),
    ("mysql", "SELECT 1 /* ; */ ; UPDATE orders SET status = 'paid'", ONE),
    ("sqlite", "SELECT * FROM orders;\nATTACH DATABASE '/tmp/x.db' AS x", ONE),
    ("mysql", "SELECT 1\u200b; DROP TABLE orders", ONE),
    ("mysql", "SELECT `orders`.* FROM `orders`; DROP TABLE `orders`", ONE),
    # SQLite reads no backslash escapes: the quote ends at \' and two more statements follow
    ("sqlite", "SELECT * FROM orders WHERE status = 'paid\\'; DROP TABLE orders; -- '", ONE),
    # MySQL executable comments run as code on the server, while a parser skips them
    ("mysql", "SELECT 1 /*!50000 ; DROP TABLE orders */", EXECUTABLE),
    ("mysql", "SELECT * FROM orders WHERE id = 1 /*!50000 UNION SELECT * FROM mysql.user */", EXECUTABLE),
    ("mysql", "/*!50000 SELECT */ 1", EXECUTABLE),
    ("mysql", "SELECT /*!50000 SLEEP(5), */ 1", EXECUTABLE),
    ("mysql", "SELECT 1 /*M!100000 , SLEEP(5) */", EXECUTABLE),
    ("mysql", "SELECT 1 /*! INTO OUTFILE '/tmp/x' */", EXECUTABLE),
    # writes and schema changes, also inside a CTE
    ("mysql", "INSERT INTO orders VALUES ('ord_1')", ONLY_SELECT),
    ("sqlite", "UPDATE orders SET status = 'paid'", ONLY_SELECT),
    ("mysql", "DELETE FROM orders", ONLY_SELECT),
    ("sqlite", "DROP TABLE orders", ONLY_SELECT),
    ("mysql", "CREATE TABLE stolen AS SELECT * FROM orders", ONLY_SELECT),
    ("mysql", "ALTER TABLE orders ADD COLUMN x INT", ONLY_SELECT),
    ("mysql", "TRUNCATE TABLE orders", ONLY_SELECT),
    ("sqlite", "REPLACE INTO orders VALUES ('ord_1')", ONLY_SELECT),
    ("sqlite", "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone", "DELETE"),
    ("mysql", "GRANT ALL ON *.* TO 'x'@'%'", ONLY_SELECT),
    ("sqlite", "VACUUM INTO '/tmp/copy.db'", ONLY_SELECT),
    # INTO: files, variables, tables
    ("mysql", "SELECT * FROM orders INTO OUTFILE '/tmp/orders.csv'", PARSE),
    ("mysql", "SELECT * FROM orders INTO DUMPFILE '/tmp/orders.bin'", PARSE),
    ("mysql", "SELECT id INTO OUTFILE '/tmp/ids' FROM orders", PARSE),
    ("mysql", "SELECT 1 INTO @v", INTO),
    ("mysql", "SELECT id INTO @a FROM orders LIMIT 1", INTO),
    ("sqlite", "SELECT * INTO backup FROM orders", INTO),
    # functions with side effects, unbounded cost or unknown to the allow-list, wherever they sit
    ("mysql", "SELECT SLEEP(5)", "SLEEP"),
    ("mysql", "SELECT sleep (5)", "SLEEP"),
    ("mysql", "SELECT `SLEEP`(5)", "SLEEP"),
    ("mysql", "SELECT BENCHMARK(100000000, MD5('x'))", "BENCHMARK"),
    ("mysql", "SELECT LOAD_FILE('/etc/passwd')", "LOAD_FILE"),
    ("mysql", "SELECT GET_LOCK('deploy', 10)", "GET_LOCK"),
    ("mysql", "SELECT RELEASE_LOCK('deploy')", "RELEASE_LOCK"),
    ("mysql", "SELECT * FROM orders WHERE id = 'x' OR SLEEP(5)", "SLEEP"),
    ("mysql", "SELECT (SELECT SLEEP(1)) FROM orders", "SLEEP"),
    ("mysql", "SELECT * FROM orders ORDER BY SLEEP(1)", "SLEEP"),
    ("mysql", "SELECT COUNT(*) FROM orders GROUP BY status HAVING SLEEP(1) = 0", "SLEEP"),
    ("mysql", "SELECT a.* FROM orders a, LATERAL (SELECT SLEEP(1)) b", "SLEEP"),
    ("mysql", "SELECT REPEAT('x', 100000000)", "REPEAT"),
    ("mysql", "SELECT sys_exec('id')", "SYS_EXEC"),
    ("mysql", "SELECT MASTER_POS_WAIT('binlog', 1)", "MASTER_POS_WAIT"),
    ("mysql", "SELECT UPDATEXML(1, CONCAT(0x7e, USER()), 1)", "not allowed"),
    ("mysql", "SELECT myfunc(1) FROM orders", "MYFUNC"),
    ("mysql", "SELECT VERSION()", "not allowed"),
    ("sqlite", "SELECT load_extension('/tmp/evil.so')", "LOAD_EXTENSION"),
    ("sqlite", "SELECT randomblob(1000000000)", "RANDOMBLOB"),
    ("sqlite", "SELECT zeroblob(1000000000)", "ZEROBLOB"),
    ("sqlite", "SELECT writefile('/tmp/x', 'y')", "WRITEFILE"),
    # locking reads
    ("mysql", "SELECT * FROM orders FOR UPDATE", LOCKING),
    ("mysql", "SELECT * FROM orders LOCK IN SHARE MODE", LOCKING),
    ("mysql", "SELECT * FROM orders FOR SHARE", LOCKING),
    ("mysql", "SELECT * FROM orders FOR UPDATE NOWAIT", LOCKING),
    ("mysql", "SELECT * FROM orders FOR UPDATE SKIP LOCKED", LOCKING),
    ("mysql", "(SELECT 1) UNION (SELECT 2 FOR UPDATE)", LOCKING),
    ("mysql", "SELECT * FROM (SELECT * FROM orders FOR UPDATE) x", LOCKING),
    # recursive CTEs: SQLite recurses without the keyword
    ("mysql", "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT * FROM c", "WITH RECURSIVE"),
    ("mysql", "WITH RECURSIVE d AS (SELECT * FROM deployments) SELECT * FROM d", "WITH RECURSIVE"),
    ("sqlite", "WITH c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT * FROM c", RECURSIVE),
    ("sqlite", "WITH a AS (SELECT * FROM b), b AS (SELECT * FROM a) SELECT * FROM a", RECURSIVE),
    (
        "sqlite",
        "SELECT * FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c) SELECT n FROM c)",
        RECURSIVE,
    ),
    # ATTACH, PRAGMA, SET, CALL and the other commands
    ("sqlite", "ATTACH DATABASE '/tmp/evil.db' AS evil", "ATTACH"),
    ("sqlite", "DETACH DATABASE evil", ONLY_SELECT),
    ("sqlite", "PRAGMA writable_schema = ON", "PRAGMA"),
    ("sqlite", "PRAGMA query_only = OFF", "PRAGMA"),
    ("mysql", "SET GLOBAL read_only = 0", "SET"),
    ("mysql", "SET @x = 1", "SET"),
    ("mysql", "SET SESSION TRANSACTION READ WRITE", "SET"),
    ("mysql", "CALL mysql.lambda_async('arn:aws:lambda:x', 'y')", "CALL"),
    ("mysql", "LOAD DATA INFILE '/etc/passwd' INTO TABLE orders", PARSE),
    ("mysql", "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE orders", PARSE),
    ("mysql", "HANDLER orders OPEN", PARSE),
    ("mysql", "DO SLEEP(5)", PARSE),
    ("mysql", "USE mysql", ONLY_SELECT),
    ("mysql", "KILL 1", ONLY_SELECT),
    ("mysql", "SHOW GRANTS", ONLY_SELECT),
    ("mysql", "EXPLAIN SELECT * FROM orders", ONLY_SELECT),
    ("mysql", "DESCRIBE orders", ONLY_SELECT),
    ("mysql", "START TRANSACTION", ONLY_SELECT),
    ("mysql", "COMMIT", ONLY_SELECT),
    ("mysql", "FLUSH PRIVILEGES", ONLY_SELECT),
    ("mysql", "PREPARE s FROM 'SELECT 1'", ONLY_SELECT),
    ("mysql", "EXECUTE s", ONLY_SELECT),
    ("mysql", "SELECT * FROM orders PROCEDURE ANALYSE()", PARSE),
    # variables, hints and placeholders change or read session state
    ("mysql", "SELECT @@secure_file_priv", "server variables"),
    ("mysql", "SELECT @a := status FROM orders", "assignments"),
    ("mysql", "SELECT @a", "user variables"),
    ("mysql", "SELECT /*+ SET_VAR(sql_mode = '') */ * FROM orders", "hints"),
    ("mysql", "SELECT * FROM orders WHERE id = ?", "placeholders"),
    # the system schemas, however they are spelled
    ("mysql", "SELECT * FROM information_schema.tables", SYSTEM),
    ("mysql", "SELECT * FROM `INFORMATION_SCHEMA`.`COLUMNS`", SYSTEM),
    ("mysql", "SELECT user, authentication_string FROM mysql.user", SYSTEM),
    ("mysql", "SELECT * FROM orders WHERE id = 1 UNION ALL SELECT * FROM mysql.user", SYSTEM),
    ("mysql", "SELECT * FROM performance_schema.threads", SYSTEM),
    ("mysql", "SELECT * FROM sys.session", SYSTEM),
    ("sqlite", "SELECT sql FROM sqlite_master", SYSTEM),
    ("sqlite", "SELECT * FROM sqlite_schema", SYSTEM),
    ("sqlite", "SELECT * FROM main.sqlite_master", SYSTEM),
    ("sqlite", "SELECT * FROM SQLITE_TEMP_MASTER", SYSTEM),
    ("sqlite", "SELECT * FROM temp.orders", SYSTEM),
    ("sqlite", "SELECT 'a' || (SELECT group_concat(sql) FROM sqlite_master)", SYSTEM),
    ("sqlite", "SELECT * FROM orders NATURAL JOIN sqlite_stat1", SYSTEM),
    # table-valued functions are functions
    ("sqlite", "SELECT * FROM pragma_table_info('orders')", "PRAGMA_TABLE_INFO"),
    ("sqlite", "SELECT * FROM json_each('[1]')", "JSON_EACH"),
    ("sqlite", "SELECT * FROM generate_series(1, 1000000000)", "not allowed"),
    # limits the check cannot read
    ("sqlite", "SELECT * FROM orders LIMIT -1", "LIMIT must be a whole number"),
    ("sqlite", "SELECT * FROM orders LIMIT 1 + 1000", "LIMIT must be a whole number"),
    ("mysql", "SELECT * FROM orders LIMIT (SELECT 1000)", "LIMIT must be a whole number"),
    ("sqlite", "SELECT * FROM orders LIMIT 10 OFFSET -5", "OFFSET must be a whole number"),
    ("sqlite", "SELECT * FROM orders ORDER BY id FETCH FIRST 100000 ROWS ONLY", "LIMIT n"),
    # roots other than a SELECT
    ("sqlite", "VALUES (1)", ONLY_SELECT),
    ("mysql", "(SELECT 1)", ONLY_SELECT),
    # empty, whitespace, unparseable, unicode look-alikes, NUL, too deep, too long
    ("sqlite", "", "empty"),
    ("sqlite", "   \n\t ", "empty"),
    ("mysql", ";", "empty"),
    ("mysql", "-- just a comment", "empty"),
    ("mysql", "/* nothing */", "empty"),
    ("sqlite", "SELEC * FROM orders", PARSE),
    ("sqlite", "SELECT * FROM", PARSE),
    ("mysql", "SELECT 'unterminated", PARSE),
    ("mysql", "\uff33\uff25\uff2c\uff25\uff23\uff34 1", PARSE),  # fullwidth SELECT
    ("sqlite", "SELECT 1\x00; DROP TABLE orders", "NUL"),
    ("sqlite", "SELECT " + "(" * 3000 + "1" + ")" * 3000, PARSE),
    ("sqlite", "SELECT 1 FROM orders WHERE " + " OR ".join(f"id = 'ord_{i:06d}'" for i in range(600)), "longer"),  # noqa: S608
]


def test_the_hostile_corpus_is_large_and_has_no_duplicates() -> None:
    assert len(HOSTILE) >= 60
    assert len({(d, s) for d, s, _ in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize(("dialect", "sql", "fragment"), HOSTILE, ids=[f"{d}:{s[:50]!r}" for d, s, _ in HOSTILE])
def test_hostile_statement_is_refused_with_its_reason(dialect: str, sql: str, fragment: str) -> None:
    with pytest.raises(UnsafeQuery) as refused:
        check_read_only(sql, dialect)
    assert fragment.lower() in refused.value.reason.lower()
    assert refused.value.message == f"refused: {refused.value.reason}"


def test_a_statement_that_is_not_text_is_refused() -> None:
    with pytest.raises(UnsafeQuery):
        check_read_only(None, "sqlite")  # type: ignore[arg-type]


# (dialect, statement, tables read)
LEGITIMATE: list[tuple[str, str, tuple[str, ...]]] = [
    ("sqlite", "SELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY n DESC", ("orders",)),
    (
        "sqlite",
        "SELECT o.id, p.error_code, p.latency_ms FROM orders o JOIN payment_attempts p ON p.order_id = o.id "
        "WHERE o.status = 'failed' AND o.created_at BETWEEN '2026-11-30T23:00:00Z' AND '2026-11-30T23:59:59Z'",
        ("orders", "payment_attempts"),
    ),
    (
        "sqlite",
        "WITH failed AS (SELECT * FROM orders WHERE failure_code = 'PAYMENT_TIMEOUT') "
        "SELECT strftime('%H:%M', created_at) AS minute, COUNT(*) FROM failed GROUP BY minute HAVING COUNT(*) > 1",
        ("orders",),
    ),
    (
        "sqlite",
        "SELECT id, created_at, ROW_NUMBER() OVER (PARTITION BY status ORDER BY created_at) AS n, "
        "LAG(created_at) OVER (ORDER BY created_at) AS previous FROM orders",
        ("orders",),
    ),
    ("sqlite", "SELECT version FROM deployments UNION SELECT version FROM deployments", ("deployments",)),
    ("sqlite", "SELECT id FROM orders INTERSECT SELECT order_id FROM payment_attempts", ("orders", "payment_attempts")),
    ("sqlite", "SELECT id FROM orders EXCEPT SELECT order_id FROM payment_attempts", ("orders", "payment_attempts")),
    (
        "sqlite",
        "SELECT CASE WHEN latency_ms >= 30000 THEN 'timeout' ELSE 'ok' END AS kind, AVG(latency_ms), MAX(latency_ms), "
        "MIN(attempted_at), SUM(CASE WHEN error_code IS NULL THEN 0 ELSE 1 END) FROM payment_attempts GROUP BY kind",
        ("payment_attempts",),
    ),
    (
        "sqlite",
        "SELECT * FROM deployments WHERE change LIKE '%max_connections%' AND deployed_at > "
        "(SELECT MIN(created_at) FROM orders) AND id IN (SELECT id FROM deployments WHERE service = 'payments-api')",
        ("deployments", "orders"),
    ),
    ("sqlite", "SELECT julianday(MAX(created_at)) - julianday(MIN(created_at)) FROM orders", ("orders",)),
    ("sqlite", "SELECT COALESCE(failure_code, 'none'), COUNT(DISTINCT status) FROM orders GROUP BY 1", ("orders",)),
    (
        "mysql",
        "SELECT DATE_FORMAT(created_at, '%H'), COUNT(*) FROM `orders` WHERE status = 'failed' GROUP BY 1",
        ("orders",),
    ),
    (
        "mysql",
        "SELECT d.version, COUNT(o.id) FROM deployments d LEFT JOIN orders o ON o.created_at >= d.deployed_at "
        "GROUP BY d.version ORDER BY 2 DESC",
        ("deployments", "orders"),
    ),
    ("mysql", "SELECT * FROM app.orders WHERE amount_cents > 1000", ("app.orders",)),
    (
        "mysql",
        "SELECT error_code, GROUP_CONCAT(DISTINCT outcome) FROM payment_attempts GROUP BY error_code",
        ("payment_attempts",),
    ),
    ("mysql", "SELECT NOW(), CURRENT_TIMESTAMP, 1 + 1", ()),
    ("mysql", "TABLE deployments", ("deployments",)),
]


@pytest.mark.parametrize(("dialect", "sql", "tables"), LEGITIMATE, ids=[f"{d}:{s[:50]!r}" for d, s, _ in LEGITIMATE])
def test_legitimate_select_is_accepted_with_its_tables(dialect: str, sql: str, tables: tuple[str, ...]) -> None:
    checked = check_read_only(sql, dialect)
    assert checked.tables == tables
    assert checked.dialect == dialect
    (again,) = sqlglot.parse(checked.sql, read=dialect)
    assert isinstance(again, exp.Select | exp.Union | exp.Intersect | exp.Except)


def test_a_missing_limit_is_added_at_the_cap() -> None:
    checked = check_read_only("SELECT id FROM orders", "sqlite", row_cap=50)
    assert checked == CheckedQuery("SELECT id FROM orders LIMIT 50", "sqlite", ("orders",), 50, capped=True)


def test_a_larger_limit_is_lowered_to_the_cap() -> None:
    checked = check_read_only("SELECT id FROM orders LIMIT 100000", "mysql", row_cap=200)
    assert checked.sql == "SELECT id FROM orders LIMIT 200"
    assert (checked.limit, checked.capped) == (200, True)


def test_a_huge_limit_is_lowered_too() -> None:
    checked = check_read_only("SELECT id FROM orders LIMIT 18446744073709551616", "mysql")
    assert (checked.limit, checked.sql.endswith("LIMIT 200")) == (200, True)


def test_a_smaller_limit_is_kept() -> None:
    checked = check_read_only("SELECT id FROM orders ORDER BY created_at LIMIT 5", "sqlite")
    assert checked.sql.endswith("LIMIT 5")
    assert (checked.limit, checked.capped) == (5, False)


def test_mysql_offset_comma_limit_is_capped_and_keeps_the_offset() -> None:
    checked = check_read_only("SELECT id FROM orders LIMIT 10, 5000", "mysql", row_cap=100)
    assert checked.sql == "SELECT id FROM orders LIMIT 100 OFFSET 10"


def test_a_union_is_capped_as_a_whole() -> None:
    checked = check_read_only("SELECT id FROM orders UNION ALL SELECT order_id FROM payment_attempts", "sqlite", 7)
    assert checked.sql.endswith("UNION ALL SELECT order_id FROM payment_attempts LIMIT 7")


def test_comments_never_reach_the_rendering() -> None:
    checked = check_read_only("SELECT id /* the id */ FROM orders -- done", "mysql")
    assert "/*" not in checked.sql and "--" not in checked.sql and "the id" not in checked.sql


def test_a_mysql_backslash_quote_stays_inside_its_string() -> None:
    # MySQL reads \' as a quote inside the string: one statement, and the rendering says the same in MySQL's terms.
    checked = check_read_only("SELECT * FROM orders WHERE status = 'paid\\'; DROP TABLE orders; -- '", "mysql")
    (again,) = sqlglot.parse(checked.sql, read="mysql")
    assert isinstance(again, exp.Select)
    strings = [lit.this for lit in again.find_all(exp.Literal) if lit.is_string]
    assert strings == ["paid'; DROP TABLE orders; -- "]


def test_the_longest_allowed_statement_is_checked() -> None:
    sql = "SELECT id FROM orders WHERE id = '" + "x" * (MAX_SQL_CHARS - 40) + "'"
    assert len(sql) <= MAX_SQL_CHARS
    assert check_read_only(sql, "sqlite").tables == ("orders",)


def test_an_unknown_dialect_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="dialect"):
        check_read_only("SELECT 1", "postgres")


_WORDS = st.sampled_from(
    [
        "SELECT", "*", "id", "FROM", "orders", "WHERE", "1", "=", ";", "--", "/*", "*/", "/*!", "'", "UNION",
        "DROP", "TABLE", "INTO", "@v", "FOR", "UPDATE", "LIMIT", "9999", "SLEEP(1)", "(", ")", ",", "WITH",
        "RECURSIVE", "c", "AS", "PRAGMA", "ATTACH", "\n",
    ]
)  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(words=st.lists(_WORDS, max_size=14), dialect=st.sampled_from(["sqlite", "mysql"]))
def test_whatever_passes_is_one_capped_select(words: list[str], dialect: str) -> None:
    try:
        checked = check_read_only(" ".join(words), dialect, row_cap=20)
    except UnsafeQuery as refused:
        assert refused.reason
        return
    statements = [s for s in sqlglot.parse(checked.sql, read=dialect) if s is not None]
    assert len(statements) == 1
    root = statements[0]
    assert isinstance(root, exp.Select | exp.Union | exp.Intersect | exp.Except)
    assert 0 <= checked.limit <= 20
    assert not any(isinstance(n, exp.Into | exp.Lock | exp.Anonymous) for n in root.walk())
