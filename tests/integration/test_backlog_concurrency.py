"""16 consumers pull 32 rows at once from the locked moto server: each row exactly once, in FIFO order.

Two rows a consumer is enough: with the ticket take made a read and a write back (two consumers can
hold one ticket) and the flip's "still pending" condition dropped, 32 rows gave a row twice in 5 runs
of 5. The same claim over HTTP through ``flowledger serve`` is tests/e2e/test_concurrency.py's; the
1,000-row run of both is in `make bench` (bench/full_size.py).
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from flowledger.config import load_settings
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.research.backlog import Backlog
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import build_services
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

CONSUMERS = 16
ROWS = 32  # two a consumer (every consumer got some in every run measured)
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.mark.usefixtures("clean_environment")
def test_concurrent_pulls_dispatch_every_row_exactly_once_in_fifo_order(locked_moto: str) -> None:
    settings = load_settings(aws_endpoint_url=locked_moto, resource_prefix="backlogconc")
    producer = build_services(settings, EMBEDDED_CREDENTIALS)
    for table in ("backlog", "backlog_tickets", "ledger", "ledger_leases"):
        create_table(producer.aws, table_spec(table))
    ticks = itertools.count()
    producer.clock = lambda: T0 + timedelta(milliseconds=next(ticks))
    backlog = Backlog(producer)
    created = enqueue_synthetic(backlog, ROWS, "conc")
    start_line = threading.Barrier(CONSUMERS)

    def consume(number: int) -> list[str]:
        backlog = Backlog(build_services(settings, EMBEDDED_CREDENTIALS))  # its own client and head cache
        pulled = []
        start_line.wait()
        while (row := backlog.pull_next(f"consumer:{number}")) is not None:
            pulled.append(row.request_id)
        return pulled

    with ThreadPoolExecutor(CONSUMERS) as pool:
        per_consumer = list(pool.map(consume, range(CONSUMERS)))
    everything = Counter(rid for pulls in per_consumer for rid in pulls)
    assert set(everything) == set(created) and set(everything.values()) == {1}
    for pulls in per_consumer:
        assert [created[rid] for rid in pulls] == sorted(created[rid] for rid in pulls)
    assert sum(1 for pulls in per_consumer if pulls) > CONSUMERS // 2
    stored = [backlog.get(rid) for rid in created]
    assert {row.status for row in stored if row} == {"dispatched"} and len(stored) == ROWS
