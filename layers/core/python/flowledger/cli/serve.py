"""`flowledger serve`: the local dev server (:mod:`flowledger.local.devserver` does the work).

Every argument is checked, and the data dir locked, before the server's own imports: a bad port, a
data dir that is a file or another server's refuses at once, in one line (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
from pathlib import Path
from typing import Any

from flowledger.cli.options import command, local_data_dir_option

DEFAULT_PORT = 8000
DEFAULT_WORKERS = 4


def add_commands(commands: Any) -> None:
    """Add ``serve``."""
    serve = command(commands, "serve", "run every route, the embedded AWS store and the scheduler locally", cmd_serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    # Numbers are read as text and checked by the command, so a bad one is one line, not argparse's usage.
    serve.add_argument("--port", default=str(DEFAULT_PORT), help=f"port to listen on, 1-65535 (default {DEFAULT_PORT})")
    local_data_dir_option(serve, "the saved store, signing key, admin credentials and local.json")
    serve.add_argument(
        "--reset",
        action="store_true",
        help="start empty: forget the saved store, the signing key (old tokens stop working) and the credentials",
    )
    serve.add_argument(
        "--workers",
        default=str(DEFAULT_WORKERS),
        help=f"worker processes running the REST functions, 1-32 (default {DEFAULT_WORKERS})",
    )
    serve.add_argument(
        "--metrics-stdout",
        action="store_true",
        help="print the EMF metric lines on standard output, as Lambda does (default: DATA_DIR/metrics.jsonl)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    # From the first moment, SIGTERM unwinds as Ctrl-C does (the server's imports take a second).
    signal.signal(signal.SIGTERM, _interrupt)
    from flowledger.local.datadir_lock import DataDirLock
    from flowledger.local.serve_options import check_port, check_workers, prepare_data_dir, whole_number

    port = whole_number("--port", args.port)
    workers = whole_number("--workers", args.workers)
    check_workers(workers)
    data_dir = Path(args.data_dir)
    prepare_data_dir(data_dir)
    check_port(args.host, port)
    lock = DataDirLock.acquire(data_dir, f"http://{args.host}:{port}")
    try:
        from flowledger.local.devserver import serve
    except BaseException:
        lock.release()
        raise
    # Ctrl-C is how serve is meant to stop; everything was shut down on the way out.
    with contextlib.suppress(KeyboardInterrupt):
        serve(
            data_dir,
            args.host,
            port,
            reset=args.reset,
            workers=workers,
            metrics_stdout=args.metrics_stdout,
            lock=lock,
        )
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
