"""`flowledger token`: a bearer token from the local issuer of a dev server's data directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flowledger.cli.options import command, local_data_dir_option, positive_int


def add_commands(commands: Any) -> None:
    """Add ``token``."""
    token = command(commands, "token", "mint a bearer token from the local issuer", cmd_token)
    token.add_argument("--sub", required=True, help="the caller's subject (user id)")
    token.add_argument("--scopes", default="", help="comma-separated: reasoning.write,reasoning.read,chat,documents")
    token.add_argument("--patient-id", help="opaque patient id the token speaks for")
    token.add_argument("--ttl", type=positive_int, default=3600, help="lifetime in seconds (default 3600)")
    local_data_dir_option(token)


def cmd_token(args: argparse.Namespace) -> int:
    from flowledger.local.datadir import DataDir

    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    print(DataDir(Path(args.data_dir)).token(args.sub, scopes, patient_id=args.patient_id, ttl_seconds=args.ttl))
    return 0
