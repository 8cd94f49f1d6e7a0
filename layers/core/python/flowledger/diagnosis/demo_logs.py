"""The demo incident's log events, and seeding them into CloudWatch Logs (the embedded moto Logs locally).

Built from :mod:`flowledger.diagnosis.demo_incident` and the orders of the demo database
(:func:`flowledger.diagnosis.demo_database.demo_rows`), deterministically for a given ``now``:

- ``/flowledger/demo/checkout``: one line per order: INFO for a completed checkout (before, a few
  during, and after the incident), ERROR ``... payment step timed out after 30000 ms
  (PAYMENT_TIMEOUT)`` for each failed one;
- ``/flowledger/demo/payments``: the deploys (2.13.2 two days before, 2.14.0 with
  ``pool max_connections 50 -> 20``, the rollback to 2.13.2), one request line per order (ERROR
  ``DB_POOL_EXHAUSTED connection pool exhausted (20/20 in use) after waiting 30000 ms`` for each
  failed one), and a pool warning just before the first failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from flowledger.diagnosis.demo_database import demo_rows
from flowledger.diagnosis.demo_incident import (
    BAD_VERSION,
    CHECKOUT_FAILURE_CODE,
    CHECKOUT_LOG_GROUP,
    ERROR_CODE,
    GOOD_VERSION,
    PAYMENTS_LOG_GROUP,
    POOL_AFTER,
    POOL_BEFORE,
    SERVICE,
    WAIT_MS,
    incident_times,
)

CHECKOUT_STREAMS = ("checkout-web-1", "checkout-web-2")
PAYMENTS_STREAMS = (f"{SERVICE}-1", f"{SERVICE}-2")
DEPLOY_STREAM = "deploys"
# PutLogEvents takes at most 10,000 events (1 MiB) spanning at most 24 hours per call.
_BATCH_EVENTS = 1000
_BATCH_SPAN = timedelta(hours=23)


@dataclass(frozen=True)
class DemoLogEvent:
    log_group: str
    stream: str
    at: datetime
    message: str


def demo_log_events(now: datetime) -> list[DemoLogEvent]:
    """Every event of the demo incident for a demo seeded at ``now``, oldest first; none after ``now``.

    One checkout line and one payments line per order of the demo database (same order id, same
    second), so what the logs show can be looked up in the database and the other way round.
    """
    now = now.astimezone(UTC)
    times = incident_times(now)
    rows = demo_rows(now)
    events = _deploy_events(times.previous_deploy, times.deployed, times.end)
    events.append(
        DemoLogEvent(
            PAYMENTS_LOG_GROUP,
            PAYMENTS_STREAMS[0],
            times.start - timedelta(minutes=2),
            f"WARN connection pool {POOL_AFTER - 2}/{POOL_AFTER} in use, 6 requests waiting",
        )
    )
    # Columns as demo_database declares them: orders (id, created_at, status, amount_cents,
    # failure_code), payment_attempts (id, order_id, attempted_at, outcome, latency_ms, error_code).
    orders = {order[0]: order for order in rows.orders}
    for number, (_, order_id, attempted_at, _outcome, latency_ms, error_code) in enumerate(rows.payment_attempts):
        at = datetime.fromisoformat(attempted_at).astimezone(UTC)
        status = orders[order_id][2]
        pool = POOL_AFTER if times.deployed <= at < times.end else POOL_BEFORE
        checkout_stream, payments_stream = CHECKOUT_STREAMS[number % 2], PAYMENTS_STREAMS[number % 2]
        if status == "failed":
            checkout = (
                f"ERROR checkout order={order_id} failed: payment step timed out after {WAIT_MS} ms "
                f"({orders[order_id][4] or CHECKOUT_FAILURE_CODE})"
            )
            payments = (
                f"ERROR {error_code or ERROR_CODE} connection pool exhausted ({POOL_AFTER}/{POOL_AFTER} in use) "
                f"after waiting {latency_ms} ms order={order_id}"
            )
        else:
            checkout = f"INFO checkout order={order_id} completed: payment captured in {latency_ms} ms"
            level = "WARN" if times.start <= at < times.end else "INFO"
            in_use = pool if level == "WARN" else 4 + number % 9
            payments = f"{level} POST /v1/charges 201 in {latency_ms} ms order={order_id} (pool {in_use}/{pool} in use)"
        events.append(DemoLogEvent(CHECKOUT_LOG_GROUP, checkout_stream, at, checkout))
        events.append(DemoLogEvent(PAYMENTS_LOG_GROUP, payments_stream, at, payments))
    return sorted((e for e in events if e.at <= now), key=lambda e: (e.at, e.log_group, e.stream))


def _deploy_events(previous: datetime, deployed: datetime, rolled_back: datetime) -> list[DemoLogEvent]:
    """The payments-api deploys: the good version, the one that shrank the pool, the rollback."""
    lines = [
        (previous, f"INFO deploy {SERVICE} {GOOD_VERSION} started by ci"),
        (
            previous + timedelta(minutes=4),
            f"INFO deploy {SERVICE} {GOOD_VERSION} finished: 3/3 tasks healthy, pool max_connections {POOL_BEFORE}",
        ),
        (
            deployed,
            f"INFO deploy {SERVICE} {BAD_VERSION} started by ci: config change pool max_connections "
            f"{POOL_BEFORE} -> {POOL_AFTER}",
        ),
        (
            deployed + timedelta(minutes=3),
            f"INFO deploy {SERVICE} {BAD_VERSION} finished: 3/3 tasks healthy, pool max_connections {POOL_AFTER}",
        ),
        (
            rolled_back - timedelta(minutes=2),
            f"WARN rollback {SERVICE} {BAD_VERSION} -> {GOOD_VERSION} started by on-call: pool max_connections "
            f"{POOL_AFTER} -> {POOL_BEFORE}",
        ),
        (
            rolled_back,
            f"INFO rollback {SERVICE} to {GOOD_VERSION} finished: 3/3 tasks healthy, "
            f"pool max_connections {POOL_BEFORE}",
        ),
    ]
    return [DemoLogEvent(PAYMENTS_LOG_GROUP, DEPLOY_STREAM, at, message) for at, message in lines]


def seed_demo_logs(logs_client: Any, now: datetime) -> int:
    """Write the demo incident's events into ``logs_client``'s CloudWatch Logs; the number written.

    Idempotent: groups and streams are created when missing, and a stream that already holds
    events is left as it is, so seeding twice never doubles a line.
    """
    by_stream: dict[tuple[str, str], list[DemoLogEvent]] = {}
    for event in demo_log_events(now):
        by_stream.setdefault((event.log_group, event.stream), []).append(event)
    written = 0
    for group in dict.fromkeys(group for group, _ in by_stream):
        _create(logs_client.create_log_group, logGroupName=group)
    for (group, stream), events in by_stream.items():
        _create(logs_client.create_log_stream, logGroupName=group, logStreamName=stream)
        held = logs_client.get_log_events(logGroupName=group, logStreamName=stream, limit=1, startFromHead=True)
        if held.get("events"):
            continue
        for batch in _batches(events):
            logs_client.put_log_events(
                logGroupName=group,
                logStreamName=stream,
                logEvents=[{"timestamp": int(e.at.timestamp() * 1000), "message": e.message} for e in batch],
            )
            written += len(batch)
    return written


def _create(call: Any, **names: str) -> None:
    try:
        call(**names)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
            raise


def _batches(events: list[DemoLogEvent]) -> Iterator[list[DemoLogEvent]]:
    batch: list[DemoLogEvent] = []
    for event in events:
        if batch and (len(batch) >= _BATCH_EVENTS or event.at - batch[0].at > _BATCH_SPAN):
            yield batch
            batch = []
        batch.append(event)
    if batch:
        yield batch
