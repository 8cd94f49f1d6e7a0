from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.errors import UnknownJob
from flowledger.jobs import JOBS, Job, job_named, run_job
from flowledger.local.scheduler import LocalScheduler
from flowledger.services import Services, build_services

pytestmark = pytest.mark.usefixtures("clean_environment")


@pytest.fixture
def services() -> Services:
    services = build_services(load_settings())
    services.clock = lambda: datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    return services


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [("rate(1 minute)", 60), ("rate(5 minutes)", 300), ("rate(1 hour)", 3600), ("rate(2 days)", 172800)],
)
def test_rate_expressions_become_intervals(schedule: str, seconds: int) -> None:
    assert Job("j", schedule, "", lambda s: {}).interval_seconds == seconds


def test_cron_schedules_are_rejected_by_the_local_scheduler() -> None:
    with pytest.raises(ValueError, match="rate expression"):
        _ = Job("j", "cron(0 12 * * ? *)", "", lambda s: {}).interval_seconds


def test_every_registered_job_has_a_unique_name_and_a_valid_schedule() -> None:
    assert len({job.name for job in JOBS}) == len(JOBS)
    assert all(job.interval_seconds > 0 for job in JOBS)


def test_heartbeat_reports_the_clock(services: Services) -> None:
    assert run_job("heartbeat", services) == {"job": "heartbeat", "at": "2026-11-30T12:00:00+00:00"}


def test_unknown_job_names_the_known_ones() -> None:
    with pytest.raises(UnknownJob, match="heartbeat"):
        job_named("nope")


def test_jobs_function_runs_the_named_job(load_function: Callable[[str], Any], lambda_context: Any) -> None:
    handler = load_function("jobs").handler
    assert handler({"job": "heartbeat"}, lambda_context)["job"] == "heartbeat"
    with pytest.raises(UnknownJob):
        handler({"nojob": True}, lambda_context)


def test_local_scheduler_runs_due_jobs_and_survives_failures(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    done = threading.Event()

    def flaky(_: Services) -> dict[str, Any]:
        calls.append("run")
        if len(calls) >= 3:
            done.set()
        raise RuntimeError("job failed")

    job = Job("flaky", "rate(1 minute)", "", flaky)
    monkeypatch.setattr("flowledger.jobs.JOBS", (job,))
    ticks = iter(range(0, 10**9, 61))  # each reading of the clock is 61 s after the last
    scheduler = LocalScheduler([job], services, monotonic=lambda: float(next(ticks)))
    scheduler.start()
    try:
        assert done.wait(timeout=10)
    finally:
        scheduler.stop()
    assert scheduler.runs["flaky"] >= 3
