"""`flowledger serve`: the local dev server (:mod:`flowledger.local.devserver` does the work)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from flowledger.cli.options import command, local_data_dir_option, positive_int


def add_commands(commands: Any) -> None:
    """Add ``serve``."""
    serve = command(commands, "serve", "run every route, the embedded AWS store and the scheduler locally", cmd_serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    local_data_dir_option(serve, "the saved store, signing key, admin credentials and local.json")
    serve.add_argument(
        "--reset",
        action="store_true",
        help="start empty: forget the saved store, the signing key (old tokens stop working) and the credentials",
    )
    serve.add_argument(
        "--workers", type=positive_int, default=4, help="worker processes running the REST functions (default 4)"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from flowledger.local.devserver import serve

    # Ctrl-C is how serve is meant to stop; everything was shut down on the way out.
    with contextlib.suppress(KeyboardInterrupt):
        serve(Path(args.data_dir), args.host, args.port, reset=args.reset, workers=args.workers)
    return 0
