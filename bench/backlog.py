"""Backlog pulls per second with 1, 4 and 16 consumers against the locked moto server, and
DynamoDB requests per successful pull (target: median <= 3 with 16 consumers); and the requests one
observability view makes, at 5 rows and at 320 (the same: the view reads counters)."""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from ledger import Meter

from flowledger.config import load_settings
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.moto_server import LockedMotoServer
from flowledger.research.backlog import Backlog
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

ROWS = 320


def run(endpoint: str, consumers: int) -> tuple[float, list[float]]:
    settings = load_settings(aws_endpoint_url=endpoint, resource_prefix=f"bl{consumers}x{int(time.time())}")
    aws = build_services(settings, EMBEDDED_CREDENTIALS).aws
    for table in ("backlog", "backlog_tickets", "ledger"):
        create_table(aws, table_spec(table))
    producer = Backlog(build_services(settings, EMBEDDED_CREDENTIALS))
    enqueue_synthetic(producer, ROWS, "bench", actor="user:bench")
    barrier = threading.Barrier(consumers + 1)
    per_pull: list[float] = []
    lock = threading.Lock()

    def consume(number: int) -> None:
        services = build_services(settings, EMBEDDED_CREDENTIALS)
        meter = Meter(services.aws.dynamodb)
        backlog = Backlog(services)
        barrier.wait()
        while True:
            meter.calls = Counter()
            row = backlog.pull_next(f"consumer:{number}")
            if row is None:
                return
            with lock:
                per_pull.append(sum(meter.calls.values()))

    with ThreadPoolExecutor(consumers) as pool:
        futures = [pool.submit(consume, n) for n in range(consumers)]
        barrier.wait()
        began = time.perf_counter()
        for future in futures:
            future.result()
    rate = ROWS / (time.perf_counter() - began)
    return rate, per_pull


def view_requests(endpoint: str, rows: int) -> int:
    """DynamoDB requests one observability view makes over a backlog of ``rows`` (counters: a constant)."""
    settings = load_settings(aws_endpoint_url=endpoint, resource_prefix=f"blview{rows}x{int(time.time())}")
    services = build_services(settings, EMBEDDED_CREDENTIALS)
    for table in ("backlog", "backlog_tickets", "ledger"):
        create_table(services.aws, table_spec(table))
    backlog = Backlog(services)
    enqueue_synthetic(backlog, rows, "view")
    meter = Meter(services.aws.dynamodb)
    backlog.view()
    return sum(meter.calls.values())


def main() -> int:
    server = LockedMotoServer()
    endpoint = server.start()
    try:
        print(f"backlog pulls through the ticket queue, locked moto server ({ROWS} rows per run)")
        print(f"{'consumers':>9} {'pulls/s':>8} {'requests/pull median':>21} {'p90':>5}")
        median16 = 0.0
        for consumers in (1, 4, 16):
            rate, per_pull = run(endpoint, consumers)
            median = statistics.median(per_pull)
            p90 = sorted(per_pull)[int(len(per_pull) * 0.9) - 1]
            print(f"{consumers:>9} {rate:>8.1f} {median:>21.1f} {p90:>5.0f}")
            if consumers == 16:
                median16 = median
        sizes = (5, ROWS)
        print("view requests per call: " + ", ".join(f"{view_requests(endpoint, n)} at {n} rows" for n in sizes))
        print(
            "target: median <= 3 requests per successful pull with 16 consumers"
            f" -> {'met' if median16 <= 3 else 'MISSED'}"
        )
        return 0 if median16 <= 3 else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
