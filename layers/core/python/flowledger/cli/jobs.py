"""`flowledger jobs list|run`: the scheduled jobs, and running one now."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flowledger.cli import store
from flowledger.cli.options import actions, command, store_option
from flowledger.cli.text import counted


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
    result = run_job(args.name, store.agent_services(args.data_dir))  # the JSON on stdout, no metric records
    print(json.dumps(result, indent=2, default=str))
    print(summary_line(result), file=sys.stderr)
    return 0


def summary_line(result: dict[str, Any]) -> str:
    """One line for the person who ran the job: how many rows it could not process (each one audited)."""
    failed = result.get("rows_failed")
    if not isinstance(failed, int):
        return f"{result['job']}: done"
    audited = " (each in the audit log with its reason code)" if failed else ""
    return f"{result['job']}: done, {counted(failed, 'row')} failed{audited}"
