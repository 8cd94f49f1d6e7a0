"""Scheduled jobs: one registry read by EventBridge Scheduler (CDK), the local scheduler and the CLI."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.entrypoints import instrumented
from flowledger.errors import UnknownJob
from flowledger.ledger.audit import checkpoint_job
from flowledger.otlp.release_job import release_job
from flowledger.pathways.jobs import backfill_job, decay_job
from flowledger.reasoning.service import flow_decay_job
from flowledger.research.loop import consumer_job, stale_sweep_job
from flowledger.services import Services, bootstrap
from flowledger.subjects.erasure import RESUME_JOB, resume_erasures_job
from flowledger.subjects.retention import RETENTION_JOB, retention_job

logger = Logger(child=True)

JobResult = dict[str, Any]

_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class Job:
    name: str
    schedule: str  # an EventBridge Scheduler rate expression, e.g. "rate(5 minutes)"
    description: str
    run: Callable[[Services], JobResult]

    @property
    def interval_seconds(self) -> int:
        """The schedule's period, for the local scheduler."""
        match = _RATE.match(self.schedule)
        if not match:
            raise ValueError(f"job {self.name}: schedule must be a rate expression, got {self.schedule!r}")
        return int(match.group(1)) * _UNIT_SECONDS[match.group(2).rstrip("s")]


def heartbeat(services: Services) -> JobResult:
    """A no-op that proves the scheduler reaches the jobs function."""
    return {"at": services.clock().isoformat()}


CHECKPOINT_JOB = "ledger_checkpoint"
JOBS: tuple[Job, ...] = (
    Job("heartbeat", "rate(5 minutes)", "No-op that proves the scheduler reaches the jobs function.", heartbeat),
    Job(
        CHECKPOINT_JOB,
        "rate(5 minutes)",
        "Folds every audit chain head into a Merkle checkpoint, signed as a note.",
        checkpoint_job,
    ),
    Job("flow_decay", "rate(1 hour)", "Aborts flows left active for over 24 hours (reason timeout).", flow_decay_job),
    Job(
        "backlog_stale_sweep",
        "rate(5 minutes)",
        "Returns stuck dispatched backlog rows to pending, or fails them.",
        stale_sweep_job,
    ),
    Job(
        "backlog_consumer",
        "rate(1 minute)",
        "Drains the research backlog (only with BACKLOG_CONSUMER_ENABLED).",
        consumer_job,
    ),
    Job(
        "pathway_embedding_backfill",
        "rate(1 hour)",
        "Embeds un-embedded active pathways and publishes each family's matrix snapshot.",
        backfill_job,
    ),
    Job("pathway_decay", "rate(1 day)", "Demotes cold and stale pathways (non-destructive).", decay_job),
    Job(
        "otlp_release",
        "rate(1 minute)",
        "Writes OTLP spans that waited their full time for a parent, under their flow, marked orphan.",
        release_job,
    ),
    Job(
        RESUME_JOB,
        "rate(5 minutes)",
        "Goes on with every subject erasure left running (answered 202 and not sent again, or cut short).",
        resume_erasures_job,
    ),
    Job(
        RETENTION_JOB,
        "rate(1 day)",
        "Erases each class of the patients' data past its retention days (off unless configured); holds win.",
        retention_job,
    ),
)


CHECKPOINT_MINUTES = range(1, 61)  # the cadences a deployment may choose: events after the last checkpoint
# are tied to nothing outside the table for at most this long (docs/audit-ledger.md: the bound and its cost)


def jobs_with_checkpoints_every(minutes: int) -> tuple[Job, ...]:
    """``JOBS`` with the checkpoint job every ``minutes`` (1 to 60) instead of every 5."""
    if minutes not in CHECKPOINT_MINUTES:
        raise ValueError(f"the checkpoint cadence is 1 to 60 minutes, not {minutes}")
    schedule = "rate(1 minute)" if minutes == 1 else f"rate({minutes} minutes)"
    return tuple(replace(job, schedule=schedule) if job.name == CHECKPOINT_JOB else job for job in JOBS)


def job_named(name: str) -> Job:
    for job in JOBS:
        if job.name == name:
            return job
    raise UnknownJob(f"no job named {name!r}; known: {', '.join(job.name for job in JOBS)}")


def run_job(name: str, services: Services) -> JobResult:
    """Run one job now and return its result with the job's name."""
    job = job_named(name)
    result = job.run(services)
    logger.info("job finished", extra={"job": name})
    return {"job": name, **result}


def jobs_handler() -> Callable[[dict[str, Any], LambdaContext], JobResult]:
    """The jobs function's Lambda entrypoint: EventBridge Scheduler sends ``{"job": NAME}``."""

    def run(event: dict[str, Any], context: LambdaContext) -> JobResult:
        name = event.get("job")
        if not isinstance(name, str):
            raise UnknownJob('the event must be {"job": NAME}')
        return run_job(name, bootstrap())

    return instrumented("jobs", lambda: run)
