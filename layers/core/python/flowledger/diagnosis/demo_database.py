"""The demo database: the incident of ``demo_incident.py`` as rows in ``orders``, ``payment_attempts``
and ``deployments``.

Every checkout is one order and one payment attempt. Between the incident's start and end exactly
FAILED_CHECKOUTS orders failed with PAYMENT_TIMEOUT (their attempts waited WAIT_MS and answered
DB_POOL_EXHAUSTED) and SUCCESSFUL_CHECKOUTS_DURING were paid, slowly; before and after, orders are
paid. The rows come from a seeded generator, so the same ``now`` always gives the same database.

Timestamps are ISO-8601 UTC text (``2026-11-30T23:05:00Z``) in both SQLite and MySQL: the same
queries compare them the same way on either backend.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from flowledger.diagnosis import demo_incident as incident

_SEED = 2_140  # fixed: the demo tells the same story every time
_BEFORE = timedelta(hours=3)  # normal traffic shown before the incident
_AFTER = timedelta(hours=1, minutes=19)  # and after the rollback, up to about 01:00
_NORMAL_GAP_SECONDS = (4, 14)  # one checkout every few seconds in the evening

# Column types are the ones both dialects read; MySQL needs lengths on indexed text.
_TABLES: dict[str, tuple[tuple[str, str, str], ...]] = {
    # name: ((column, sqlite type, mysql type), ...); the first column is the primary key
    "orders": (
        ("id", "TEXT", "VARCHAR(16)"),
        ("created_at", "TEXT", "VARCHAR(20)"),
        ("status", "TEXT", "VARCHAR(8)"),
        ("amount_cents", "INTEGER", "INT"),
        ("failure_code", "TEXT", "VARCHAR(32)"),
    ),
    "payment_attempts": (
        ("id", "TEXT", "VARCHAR(16)"),
        ("order_id", "TEXT", "VARCHAR(16)"),
        ("attempted_at", "TEXT", "VARCHAR(20)"),
        ("outcome", "TEXT", "VARCHAR(8)"),
        ("latency_ms", "INTEGER", "INT"),
        ("error_code", "TEXT", "VARCHAR(32)"),
    ),
    "deployments": (
        ("id", "TEXT", "VARCHAR(16)"),
        ("service", "TEXT", "VARCHAR(32)"),
        ("version", "TEXT", "VARCHAR(16)"),
        ("deployed_at", "TEXT", "VARCHAR(20)"),
        ("change", "TEXT", "VARCHAR(200)"),
    ),
}
_INDEXES = (("orders", "created_at"), ("payment_attempts", "order_id"), ("payment_attempts", "attempted_at"))


@dataclass(frozen=True)
class DemoRows:
    """The demo's rows, table by table, in column order."""

    orders: list[tuple[Any, ...]]
    payment_attempts: list[tuple[Any, ...]]
    deployments: list[tuple[Any, ...]]

    def by_table(self) -> dict[str, list[tuple[Any, ...]]]:
        return {"orders": self.orders, "payment_attempts": self.payment_attempts, "deployments": self.deployments}


def iso(moment: datetime) -> str:
    """The demo's timestamp text: UTC, seconds, ``Z``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def demo_rows(now: datetime) -> DemoRows:
    """The rows of the demo incident seeded at ``now``."""
    times = incident.incident_times(now)
    rng = random.Random(_SEED)  # noqa: S311 - a seeded demo story, not a secret
    checkouts: list[tuple[datetime, str]] = []  # (moment, "paid" | "failed")

    moment = times.start - _BEFORE
    while moment < times.start:
        checkouts.append((moment, "paid"))
        moment += timedelta(seconds=rng.randint(*_NORMAL_GAP_SECONDS))

    # The incident: the first failure at its very start, the rest spread over the window.
    window = int((times.end - times.start).total_seconds())
    failed = [times.start] + [
        times.start + timedelta(seconds=s) for s in rng.sample(range(1, window), incident.FAILED_CHECKOUTS - 1)
    ]
    paid_during = [
        times.start + timedelta(seconds=s) for s in rng.sample(range(1, window), incident.SUCCESSFUL_CHECKOUTS_DURING)
    ]
    checkouts += [(m, "failed") for m in failed] + [(m, "paid") for m in paid_during]

    # Traffic after the rollback, but never in the future: a demo seeded just after midnight stops at now
    # (the incident itself always ends before midnight, so before any ``now``).
    moment = times.end
    while moment < min(times.end + _AFTER, now):
        checkouts.append((moment, "paid"))
        moment += timedelta(seconds=rng.randint(*_NORMAL_GAP_SECONDS))

    checkouts.sort(key=lambda c: (c[0], c[1]))
    orders: list[tuple[Any, ...]] = []
    attempts: list[tuple[Any, ...]] = []
    for number, (created, status) in enumerate(checkouts, start=1):
        order_id = f"ord_{number:06d}"
        during = times.start <= created < times.end
        if status == "failed":
            latency, outcome, error = incident.WAIT_MS, "error", incident.ERROR_CODE
        else:
            # Paid during the incident means it waited for one of the few connections.
            latency = rng.randint(1_500, 9_000) if during else rng.randint(80, 420)
            outcome, error = "success", None
        orders.append(
            (
                order_id,
                iso(created),
                status,
                rng.randint(1_000, 25_000),
                incident.CHECKOUT_FAILURE_CODE if status == "failed" else None,
            )
        )
        attempts.append((f"pa_{number:06d}", order_id, iso(created), outcome, latency, error))

    deployments = [
        (
            "dep_0001",
            incident.SERVICE,
            incident.GOOD_VERSION,
            iso(times.previous_deploy),
            "retry card network calls once on connection reset",
        ),
        (
            "dep_0002",
            "checkout-web",
            "5.8.1",
            iso(times.previous_deploy + timedelta(days=1, hours=3)),
            "copy change on the order summary page",
        ),
        (
            "dep_0003",
            incident.SERVICE,
            incident.BAD_VERSION,
            iso(times.deployed),
            f"db pool max_connections {incident.POOL_BEFORE} -> {incident.POOL_AFTER}",
        ),
        (
            "dep_0004",
            incident.SERVICE,
            incident.GOOD_VERSION,
            iso(times.end),
            f"rollback to {incident.GOOD_VERSION} (db pool max_connections "
            f"{incident.POOL_AFTER} -> {incident.POOL_BEFORE})",
        ),
    ]
    return DemoRows(orders=orders, payment_attempts=attempts, deployments=deployments)


def build_demo_database(path: Path, now: datetime) -> Path:
    """Write the SQLite demo database for ``now`` to ``path`` (atomically: a reader never sees half of it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        connection = sqlite3.connect(temporary)
        try:
            _fill_sqlite(connection, demo_rows(now))
        finally:
            connection.close()
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _fill_sqlite(connection: sqlite3.Connection, rows: DemoRows) -> None:
    with connection:
        for table, columns in _TABLES.items():
            body = ", ".join(f'"{name}" {kind}' for name, kind, _ in columns)
            connection.execute(f'CREATE TABLE "{table}" ({body}, PRIMARY KEY ("{columns[0][0]}"))')
            marks = ", ".join("?" for _ in columns)
            insert = f'INSERT INTO "{table}" VALUES ({marks})'  # noqa: S608 - names are this module's constants
            connection.executemany(insert, rows.by_table()[table])
        for table, column in _INDEXES:
            connection.execute(f'CREATE INDEX "{table}_{column}" ON "{table}" ("{column}")')


class DbApiConnection(Protocol):
    def cursor(self) -> Any: ...

    def commit(self) -> Any: ...


def mysql_demo_statements(now: datetime) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The demo as MySQL/MariaDB statements: each DDL with no rows, each INSERT with its rows (``%s`` marks)."""
    rows = demo_rows(now).by_table()
    statements: list[tuple[str, list[tuple[Any, ...]]]] = []
    for table, columns in _TABLES.items():
        body = ", ".join(f"`{name}` {kind}" for name, _, kind in columns)
        statements.append((f"DROP TABLE IF EXISTS `{table}`", []))
        statements.append(
            (f"CREATE TABLE `{table}` ({body}, PRIMARY KEY (`{columns[0][0]}`)) DEFAULT CHARSET=utf8mb4", [])
        )
    for table, column in _INDEXES:
        statements.append((f"CREATE INDEX `{table}_{column}` ON `{table}` (`{column}`)", []))
    for table, columns in _TABLES.items():
        names = ", ".join(f"`{name}`" for name, _, _ in columns)
        marks = ", ".join("%s" for _ in columns)
        insert = f"INSERT INTO `{table}` ({names}) VALUES ({marks})"  # noqa: S608 - names are this module's constants
        statements.append((insert, rows[table]))
    return statements


def load_demo_mysql(connection: DbApiConnection, now: datetime) -> None:
    """Create and fill the demo tables in the connection's current database (a MySQL or MariaDB DB-API connection)."""
    cursor = connection.cursor()
    try:
        for statement, batch in mysql_demo_statements(now):
            if batch:
                cursor.executemany(statement, batch)
            else:
                cursor.execute(statement)
    finally:
        cursor.close()
    connection.commit()
