"""The concurrency and durability tests at their full size, with their own assertions.

The suite runs each of these at the smallest load that still fails when the protection it checks is
taken out (docs/testing.md says which, and how that was measured); here each test function runs as
written, with its counts set back to the size it had before:

- 20 `kill -9`s at random points under 8 writers (``test_journal_durability.py``; the suite: 3);
- 16 signed consumers draining 1,000 backlog rows over HTTP (``test_concurrency.py``; the suite: 32);
- 16 consumers pulling 1,000 rows from the locked moto server (``test_backlog_concurrency.py``; 32);
- 8 threads, 12 rounds each, enqueueing, pulling, completing and failing (``test_backlog_counters.py``; 3);
- SIGTERM with 8 clients in flight (``test_concurrency.py``; the suite: 2).

Prints each one's size and seconds. A test that fails here (a write lost, a row twice, a counter off)
is a missed target: its assertion is printed and the benchmark exits 1. No time is a target.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: the tests are imported from it

from flowledger.config import Settings
from flowledger.local.moto_server import LockedMotoServer
from tests.e2e import test_concurrency as http_concurrency
from tests.e2e import test_journal_durability as durability
from tests.e2e.conftest import launch_server
from tests.integration import test_backlog_concurrency as backlog_concurrency
from tests.integration import test_backlog_counters as backlog_counters


def kill_9(scratch: Path) -> None:
    durability.KILLS = 20
    durability.test_kill_9_under_eight_writers_loses_no_acknowledged_write(scratch, launch_server)


def drain_over_http(scratch: Path) -> None:
    http_concurrency.ROWS = 1000
    server = launch_server(scratch / "data", "--workers", "4", env={"BACKLOG_CONSUMER_ENABLED": "false"})
    try:
        http_concurrency.test_sixteen_signed_consumers_drain_the_backlog_over_http(server)
    finally:
        server.stop()


def on_locked_moto(test: Callable[[str], None]) -> Callable[[Path], None]:
    def run(_: Path) -> None:
        for info in Settings.model_fields.values():  # the tests' clean_environment
            if info.validation_alias:
                os.environ.pop(str(info.validation_alias), None)
        server = LockedMotoServer()
        try:
            test(server.start())
        finally:
            server.stop()

    return run


def pulls_in_process(endpoint: str) -> None:
    backlog_concurrency.ROWS = 1000
    backlog_concurrency.test_concurrent_pulls_dispatch_every_row_exactly_once_in_fifo_order(endpoint)


def counters(endpoint: str) -> None:
    backlog_counters.ROUNDS = 12
    backlog_counters.test_eight_threads_enqueueing_pulling_completing_and_failing_leave_counters_equal_to_a_recount(
        endpoint
    )


def sigterm(scratch: Path) -> None:
    http_concurrency.BUSY_CLIENTS = 8
    http_concurrency.test_sigterm_stops_the_server_within_seconds_with_requests_in_flight(scratch, launch_server)


RUNS: list[tuple[str, Callable[[Path], None]]] = [
    ("kill -9 x 20 under 8 writers, no acknowledged write lost", kill_9),
    ("16 signed consumers drain 1,000 rows over HTTP", drain_over_http),
    ("16 consumers pull 1,000 rows from the locked moto server", on_locked_moto(pulls_in_process)),
    ("8 threads x 12 rounds, counters equal to a recount", on_locked_moto(counters)),
    ("SIGTERM with 8 clients in flight", sigterm),
]


def main() -> int:
    print("the concurrency and durability tests at full size (the suite runs them smaller)")
    failed = []
    for label, run in RUNS:
        with tempfile.TemporaryDirectory() as scratch:
            began = time.perf_counter()
            try:
                run(Path(scratch))
                outcome = "passed"
            except BaseException as exc:  # an assertion, or pytest.fail's Failed (a BaseException)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                traceback.print_exc()
                outcome = "FAILED"
                failed.append(label)
            print(f"  {label:<60} {time.perf_counter() - began:7.1f} s  {outcome}", flush=True)
    if failed:
        print(f"TARGET MISSED: {'; '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
