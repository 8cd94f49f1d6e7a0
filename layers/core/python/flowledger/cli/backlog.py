"""`flowledger backlog status|recount`: the research backlog."""

from __future__ import annotations

import argparse
from typing import Any

from flowledger.cli import store
from flowledger.cli.counters import add_recount
from flowledger.cli.options import actions, command, json_option, store_option


def add_commands(commands: Any) -> None:
    """Add ``backlog status`` and ``backlog recount``."""
    backlog = actions(command(commands, "backlog", "the research backlog"), "backlog_command")
    status = command(backlog, "status", "status counts, ages, retries, failures and loop health", cmd_backlog_status)
    json_option(status, "the view")
    store_option(status)
    add_recount(
        backlog,
        "backlog",
        "rebuild the status counters from every row (once, after upgrading a deployment)",
        "backlog_counters",
    )


def cmd_backlog_status(args: argparse.Namespace) -> int:
    import getpass

    from flowledger.research.backlog import Backlog

    view = Backlog(store.services(args.data_dir)).read_view(f"cli:{getpass.getuser()}")
    if args.json:
        print(view.model_dump_json(indent=2))
        return 0
    print(f"loop health: {view.loop_health}")
    for status, count in view.status_distribution.items():
        print(f"  {status:<22} {count:>6}")
    for label, age in (
        ("oldest pending", view.oldest_pending_age_seconds),
        ("oldest dispatched", view.oldest_dispatched_age_seconds),
    ):
        print(f"  {label:<22} {'-' if age is None else f'{age // 60} min'}")
    print("  retries               " + (", ".join(f"{k}: {v}" for k, v in view.retry_distribution.items()) or "-"))
    for failure in view.recent_failures:
        print(f"  failed {failure.request_id} {failure.status.value} {failure.failure_reason or ''}")
    return 0
