"""`flowledger jobs list|run`: the scheduled jobs, and running one now."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flowledger.cli import store
from flowledger.cli.options import actions, command, store_option


def add_commands(commands: Any) -> None:
    """Add ``jobs list`` and ``jobs run``."""
    jobs = actions(command(commands, "jobs", "list the scheduled jobs or run one now"), "jobs_command")
    command(jobs, "list", "the registered jobs and their schedules", cmd_jobs_list)
    run = command(jobs, "run", "run one job now against the local or AWS store", cmd_jobs_run)
    run.add_argument("name", help="the job's name (see `flowledger jobs list`)")
    store_option(run)


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from flowledger.jobs import JOBS

    width = max(len(job.name) for job in JOBS)
    for job in JOBS:
        print(f"{job.name:<{width}}  {job.schedule:<18}  {job.description}")
    return 0


def cmd_jobs_run(args: argparse.Namespace) -> int:
    from flowledger.jobs import job_named, run_job

    job_named(args.name)  # an unknown name fails before any connection is made
    print(json.dumps(run_job(args.name, store.services(args.data_dir)), indent=2, default=str))
    return 0
