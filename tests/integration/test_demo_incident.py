"""The demo incident the embedded default ships: logs, database and runbook tell one story, and a
fresh dev server holds it, a restarted one keeps it, a reset one forgets it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from flowledger.config import load_settings
from flowledger.diagnosis import demo_incident as incident
from flowledger.diagnosis.demo_database import demo_rows
from flowledger.diagnosis.demo_logs import demo_log_events, seed_demo_logs
from flowledger.diagnosis.tool_logs import QueryLogsTool
from flowledger.diagnosis.tools import ToolOutcome
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.local import moto_state
from flowledger.local.datadir import DataDir
from flowledger.local.devserver import EMBEDDED_CREDENTIALS, LocalStack, start_local_stack
from flowledger.local.functions import settings_environment
from flowledger.local.moto_server import LockedMotoServer
from flowledger.services import build_services

# moto keeps only the last 14 days of log events, as CloudWatch does: the demo is seeded in the present.
NOW = datetime.now(UTC).replace(microsecond=0)
GROUPS = (incident.CHECKOUT_LOG_GROUP, incident.PAYMENTS_LOG_GROUP)


def all_messages(logs: Any, group: str) -> list[str]:
    """Every message in ``group``, through FilterLogEvents and its pages."""
    messages: list[str] = []
    request: dict[str, Any] = {"logGroupName": group}
    while True:
        page = logs.filter_log_events(**request)
        messages += [event["message"] for event in page["events"]]
        if not page.get("nextToken"):
            return messages
        request["nextToken"] = page["nextToken"]


def test_the_logs_tell_the_incident_the_database_holds() -> None:
    times = incident.incident_times(NOW)
    events = demo_log_events(NOW)
    assert events == demo_log_events(NOW)  # deterministic
    assert all(e.at <= NOW for e in events) and events == sorted(events, key=lambda e: e.at)
    failed = {order[0] for order in demo_rows(NOW).orders if order[2] == "failed"}
    assert len(failed) == incident.FAILED_CHECKOUTS
    timeouts = [e for e in events if incident.CHECKOUT_FAILURE_CODE in e.message]
    exhausted = [e for e in events if incident.ERROR_CODE in e.message]
    assert len(timeouts) == len(exhausted) == incident.FAILED_CHECKOUTS
    assert {e.message.split("order=")[1].split()[0] for e in timeouts} == failed
    assert {e.message.split("order=")[1] for e in exhausted} == failed
    assert all(e.log_group == incident.CHECKOUT_LOG_GROUP for e in timeouts)
    assert all(e.log_group == incident.PAYMENTS_LOG_GROUP for e in exhausted)
    assert all(times.start <= e.at < times.end for e in timeouts + exhausted)
    assert min(e.at for e in exhausted) == times.start
    assert "payment step timed out after 30000 ms" in timeouts[0].message
    assert "connection pool exhausted (20/20 in use) after waiting 30000 ms" in exhausted[0].message
    deploys = [(e.at, e.message) for e in events if e.stream == "deploys"]
    assert (
        times.deployed,
        "INFO deploy payments-api 2.14.0 started by ci: config change pool max_connections 50 -> 20",
    ) in deploys
    assert any(at == times.end and "rollback payments-api to 2.13.2 finished" in m for at, m in deploys)
    assert any(at == times.previous_deploy and "2.13.2" in m for at, m in deploys)
    # Normal traffic before the deploy and after the rollback, in both groups.
    for group in GROUPS:
        info = [e.at for e in events if e.log_group == group and e.message.startswith("INFO") and e.stream != "deploys"]
        assert min(info) < times.deployed and max(info) > times.end


def test_a_demo_seeded_just_after_midnight_has_no_line_from_the_future() -> None:
    early = NOW.replace(hour=0, minute=10, second=0)  # the same incident night as NOW's
    events = demo_log_events(early)
    assert events and max(e.at for e in events) <= early
    assert len(events) < len(demo_log_events(early + timedelta(hours=2)))
    assert sum(incident.ERROR_CODE in e.message for e in events) == incident.FAILED_CHECKOUTS


def test_seeding_twice_writes_each_line_once(clean_environment: None) -> None:
    with mock_aws():
        logs = build_services(load_settings(), EMBEDDED_CREDENTIALS).aws.logs
        batches: list[list[int]] = []
        logs.meta.events.register(
            "before-parameter-build.logs.PutLogEvents",
            lambda params, **_: batches.append([e["timestamp"] for e in params["logEvents"]]),
        )
        written = seed_demo_logs(logs, NOW)
        assert written == len(demo_log_events(NOW))
        # Each batch as CloudWatch Logs takes it (moto checks only the order): in order, at most
        # 10,000 events, spanning less than 24 hours.
        assert len(batches) > len(GROUPS)
        for stamps in batches:
            assert stamps == sorted(stamps) and len(stamps) <= 10_000
            assert stamps[-1] - stamps[0] < 24 * 3600 * 1000
        before = {group: all_messages(logs, group) for group in GROUPS}
        assert seed_demo_logs(logs, NOW) == 0
        assert {group: all_messages(logs, group) for group in GROUPS} == before
        assert sum(len(messages) for messages in before.values()) == written


def test_query_logs_finds_the_incident_in_the_seeded_logs(clean_environment: None) -> None:
    times = incident.incident_times(NOW)
    with mock_aws():
        logs = build_services(load_settings(), EMBEDDED_CREDENTIALS).aws.logs
        seed_demo_logs(logs, NOW)
        tool = QueryLogsTool(logs, load_settings().diagnosis_log_group_list, lambda: NOW)
        window = {
            "start": (times.deployed - timedelta(hours=1)).isoformat(),
            # The tool refuses a future end, and just after midnight the incident ended minutes ago.
            "end": min(times.end + timedelta(hours=1), NOW).isoformat(),
        }
        errors = tool.run(
            {"log_group": incident.PAYMENTS_LOG_GROUP, **window, "terms": [incident.ERROR_CODE], "limit": 5},
            timeout_seconds=10,
        )
        assert errors.outcome is ToolOutcome.OK and errors.truncated
        assert "(20/20 in use) after waiting 30000 ms" in errors.text
        assert times.start.strftime("%Y-%m-%dT%H:%M:%SZ") in errors.text
        deploy = tool.run(
            {
                "log_group": incident.PAYMENTS_LOG_GROUP,
                **window,
                "terms": ["deploy", incident.BAD_VERSION],
                "limit": 10,
            },
            timeout_seconds=10,
        )
        assert "pool max_connections 50 -> 20" in deploy.text
        failures = tool.run(
            {"log_group": incident.CHECKOUT_LOG_GROUP, **window, "terms": ["failed", "PAYMENT_TIMEOUT"], "limit": 1},
            timeout_seconds=10,
        )
        assert "failed: payment step timed out after 30000 ms (PAYMENT_TIMEOUT)" in failures.text


def test_a_snapshot_keeps_the_demo_logs_across_a_restore(tmp_path: Path) -> None:
    moto_state.reset_state()
    server = LockedMotoServer()
    endpoint = server.start()
    try:
        logs = build_services(load_settings(aws_endpoint_url=endpoint), EMBEDDED_CREDENTIALS).aws.logs
        seed_demo_logs(logs, NOW)
        saved = {group: all_messages(logs, group) for group in GROUPS}
        server.snapshot(tmp_path / "state.pickle")
        moto_state.reset_state()
        assert logs.describe_log_groups()["logGroups"] == []  # gone from memory: what comes back is the file's
        server.restore(tmp_path / "state.pickle")
        assert {group: all_messages(logs, group) for group in GROUPS} == saved
    finally:
        server.stop()
        moto_state.reset_state()


# The dev server itself (in-process, one function worker).


@pytest.fixture
def stacks(clean_environment: None) -> Iterator[list[LocalStack]]:
    """Started stacks, stopped at the end; moto's process-wide backends start and end empty."""
    moto_state.reset_state()
    started: list[LocalStack] = []
    yield started
    for stack in started:
        stack.stop()
    moto_state.reset_state()


def start(stacks: list[LocalStack], data_dir: Path, **options: Any) -> LocalStack:
    stack = start_local_stack(data_dir, "127.0.0.1", 8765, workers=1, **options)
    stacks.append(stack)
    return stack


def stop(stacks: list[LocalStack]) -> None:
    stacks.pop().stop()
    moto_state.reset_state()  # a restart starts from the saved file alone


def failed_orders(database: Path) -> int:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        (count,) = connection.execute("SELECT COUNT(*) FROM orders WHERE status = 'failed'").fetchone()
    return int(count)


def test_a_fresh_dev_server_holds_the_incident_and_a_restart_keeps_it(stacks: list[LocalStack], tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    database = data_dir / "demo-incident.sqlite"
    stack = start(stacks, data_dir)
    logs = stack.services.aws.logs
    saved = {group: all_messages(logs, group) for group in GROUPS}
    timeouts = [m for m in saved[incident.CHECKOUT_LOG_GROUP] if incident.CHECKOUT_FAILURE_CODE in m]
    assert len(timeouts) == incident.FAILED_CHECKOUTS
    assert any("pool max_connections 50 -> 20" in m for m in saved[incident.PAYMENTS_LOG_GROUP])
    # The database exists, and every diagnosis (chat app and function workers alike) is pointed at it.
    assert failed_orders(database) == incident.FAILED_CHECKOUTS
    assert stack.services.settings.diagnosis_sqlite_path == str(database)
    assert settings_environment(stack.services.settings)["FLOWLEDGER_DIAGNOSIS_SQLITE_PATH"] == str(database)
    # The runbook is what a knowledge lookup about the demo question finds first.
    for question in (incident.DEMO_QUESTION, "checkout fail", "Users report checkout hangs"):
        hits = KnowledgeIndex(stack.services).lookup(question).documents
        assert hits and hits[0].title == "On-call runbook: checkout failures", question
    built = database.stat().st_mtime_ns

    stop(stacks)
    restarted = start(stacks, data_dir)
    assert restarted.restored is not None
    assert {group: all_messages(restarted.services.aws.logs, group) for group in GROUPS} == saved  # nothing doubled
    assert database.stat().st_mtime_ns == built  # the same night, not rebuilt


def test_a_restored_store_rebuilds_only_a_missing_database(stacks: list[LocalStack], tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    start(stacks, data_dir)
    stop(stacks)
    (data_dir / "demo-incident.sqlite").unlink()
    start(stacks, data_dir)
    assert failed_orders(data_dir / "demo-incident.sqlite") == incident.FAILED_CHECKOUTS


def test_a_fresh_store_replaces_a_leftover_database(stacks: list[LocalStack], tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "demo-incident.sqlite").write_bytes(b"another night's file, its store long gone")
    start(stacks, data_dir)
    assert failed_orders(data_dir / "demo-incident.sqlite") == incident.FAILED_CHECKOUTS


def test_reset_forgets_the_demo_database(tmp_path: Path) -> None:
    directory = DataDir(tmp_path / "data")
    directory.ensure("us-east-1")
    directory.demo_database.write_bytes(b"an older night")
    directory.path.joinpath("demo-incident.sqlite-journal").write_bytes(b"half a build")
    directory.reset()
    assert sorted(p.name for p in directory.path.iterdir()) == []


def test_a_configured_database_is_left_alone(stacks: list[LocalStack], tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    own = tmp_path / "mine.sqlite"
    own.write_bytes(b"the developer's own database")
    stack = start(stacks, data_dir, diagnosis_sqlite_path=str(own))
    assert stack.services.settings.diagnosis_sqlite_path == str(own)
    assert own.read_bytes() == b"the developer's own database"
    assert not (data_dir / "demo-incident.sqlite").exists()
    # The logs are seeded all the same: they do not depend on the database.
    assert any(incident.ERROR_CODE in m for m in all_messages(stack.services.aws.logs, incident.PAYMENTS_LOG_GROUP))
