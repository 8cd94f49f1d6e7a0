"""`flowledger flows stamp-listing`: once after an upgrade, older flows join the flows list."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flowledger.cli import store
from flowledger.cli.options import command, json_option, store_option


def add_command(flows: Any) -> None:
    """Add ``stamp-listing`` to the ``flows`` group."""
    parser = command(
        flows,
        "stamp-listing",
        "let flows written before the flows list show in it (once, after upgrading)",
        cmd_flows_stamp_listing,
        "Reads the flows table once and gives each flow without them the attributes the list's index and its"
        " agent filter read (its created year, the agents of its steps). Safe to run again: a flow already"
        " stamped is left as it is.",
    )
    store_option(parser)
    json_option(parser, "the count")


def cmd_flows_stamp_listing(args: argparse.Namespace) -> int:
    from flowledger.reasoning.listing import stamp_unlisted_flows

    counts = stamp_unlisted_flows(store.services(args.data_dir))
    print(json.dumps(counts) if args.json else f"stamped {counts['stamped']} flow(s) for the flows list")
    return 0
