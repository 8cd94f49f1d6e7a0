"""`flowledger pathways inspect|recount`: the pathway library."""

from __future__ import annotations

import argparse
from typing import Any

from flowledger.cli import store
from flowledger.cli.counters import add_recount
from flowledger.cli.options import actions, command, json_option, store_option


def add_commands(commands: Any) -> None:
    """Add ``pathways inspect`` and ``pathways recount``."""
    pathways = actions(command(commands, "pathways", "the pathway library"), "pathways_command")
    inspect = command(pathways, "inspect", "totals, models, maturity per trigger type, top hits", cmd_pathways_inspect)
    json_option(inspect, "the stats")
    store_option(inspect)
    add_recount(
        pathways,
        "pathways",
        "rebuild the library's counters and top-hits index from every pathway (once, after upgrading)",
        "pathway_counters",
    )


def cmd_pathways_inspect(args: argparse.Namespace) -> int:
    import getpass

    from flowledger.pathways.library import PathwayLibrary

    stats = PathwayLibrary(store.services(args.data_dir)).read_stats(f"cli:{getpass.getuser()}")
    if args.json:
        print(stats.model_dump_json(indent=2))
        return 0
    print(f"pathways: {stats.total} total, {stats.active} active, {stats.embedded} embedded, {stats.demoted} demoted")
    print(f"  {'trigger type':<32} {'active':>6}  maturity")
    for family, maturity in stats.maturity_by_trigger_type.items():
        print(f"  {family:<32} {stats.by_trigger_type.get(family, 0):>6}  {maturity}")
    print("  by model: " + (", ".join(f"{model} {count}" for model, count in stats.by_model.items()) or "-"))
    for top in stats.top_hits:
        print(f"  top hit {top.pathway_id} {top.trigger_type} {top.hit_count}")
    return 0
