"""`recount` of the backlog and of the pathway library: their status counters rebuilt from every row.

Once, after upgrading a deployment; both groups add the same command through :func:`add_recount`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from flowledger.cli import store
from flowledger.cli.options import command, json_option, store_option


def add_recount(group: Any, of: str, summary: str, audited_as: str) -> None:
    """Add ``recount`` to the ``backlog`` or ``pathways`` group (``of``)."""
    recount = command(
        group, "recount", summary, cmd_recount, f"Reads the whole table; audited as memory.job.{audited_as}.recounted."
    )
    recount.set_defaults(recount_of=of)
    json_option(recount, "the counts")
    store_option(recount)


def cmd_recount(args: argparse.Namespace) -> int:
    """Rebuild the backlog's or the pathway library's counters from their rows (once, after an upgrade)."""
    import getpass

    services = store.services(args.data_dir)
    if args.recount_of == "backlog":
        from flowledger.research.backlog_stats import BacklogStats

        counts = BacklogStats(services).recount(f"cli:{getpass.getuser()}")
    else:
        from flowledger.pathways.stats import PathwayStats

        counts = PathwayStats(services).recount(f"cli:{getpass.getuser()}")
    if args.json:
        print(json.dumps(counts, indent=2, sort_keys=True))
        return 0
    print(f"recounted the {args.recount_of} counters:")
    for name, count in counts.items():
        print(f"  {name:<32} {count:>8}")
    return 0
