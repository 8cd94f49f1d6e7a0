"""The options and argument types every command group shares, and the helpers that build the parser tree.

Only ``argparse`` and ``os`` are imported here: building the whole parser (``flowledger --help``) stays a
matter of milliseconds, and each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any

DEFAULT_DATA_DIR = ".flowledger"

ArgumentType = Callable[[str], Any]


def command(
    commands: Any, name: str, summary: str, func: Any = None, description: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand whose own ``--help`` starts with the line its parent lists it with."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}." + (f" {description}" if description else ""),
    )
    if func is not None:
        parser.set_defaults(func=func)
    return parser


def actions(parser: argparse.ArgumentParser, dest: str) -> Any:
    """The sub-commands of a group (``flowledger audit ACTION``); one of them is required."""
    return parser.add_subparsers(
        dest=dest, required=True, metavar="ACTION", title="actions", help="`ACTION --help` shows its options"
    )


def store_option(parser: argparse.ArgumentParser) -> None:
    """``--data-dir`` for commands that touch the store: a local server's, or AWS when omitted."""
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("FLOWLEDGER_DATA_DIR"),
        help="a running dev server's data directory (default $FLOWLEDGER_DATA_DIR); omit to use the AWS environment",
    )


def local_data_dir_option(parser: argparse.ArgumentParser, help: str = "the dev server's data directory") -> None:
    """``--data-dir`` for commands that only make sense locally (serve, token, chat): ``.flowledger`` by default."""
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help=f"{help} (default {DEFAULT_DATA_DIR})")


def scope_option(parser: argparse.ArgumentParser) -> None:
    """``--scope`` for the knowledge commands: the operator's ``global`` corpus unless told otherwise."""
    parser.add_argument(
        "--scope",
        default="global",
        help="the knowledge scope: global (default), workspace:ID or conversation:ID",
    )


def json_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json``: the command's output as JSON instead of text."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def positive_int(value: str) -> int:
    """An argparse type: a whole number above 0."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return number


def share(value: str) -> float:
    """An argparse type: a share between 0 and 1 (0.05 is 5 %)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0.0 <= number <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return number


def pattern(regex: str, what: str) -> ArgumentType:
    """An argparse type: the value when it matches ``regex``, a usage error naming ``what`` otherwise."""

    def check(value: str) -> str:
        if not re.fullmatch(regex, value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return value

    return check


def bounded_text(limit: int) -> ArgumentType:
    """An argparse type: text of 1 to ``limit`` characters that is not blank."""

    def check(value: str) -> str:
        if not value.strip() or len(value) > limit:
            raise argparse.ArgumentTypeError(f"must be 1 to {limit} characters, not blank")
        return value

    return check
