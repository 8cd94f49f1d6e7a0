"""The demo incident the embedded default ships: one story told by logs, database rows and a runbook.

Last night between 23:05 and 23:41 UTC, checkout failed: deployment 2.14.0 of payments-api lowered
its database connection pool from 50 to 20 connections; under the evening load the pool ran dry,
payments-api answered DB_POOL_EXHAUSTED after waiting 30000 ms, and 312 checkouts failed with
PAYMENT_TIMEOUT. The rollback to 2.13.2 at 23:41 ended it.

The logs (``/flowledger/demo/*`` in the embedded CloudWatch Logs), the demo database
(``orders``, ``payment_attempts``, ``deployments``) and the runbook document are all built from
these constants, so the facts a diagnosis quotes can be found in what its tools return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

CHECKOUT_LOG_GROUP = "/flowledger/demo/checkout"
PAYMENTS_LOG_GROUP = "/flowledger/demo/payments"
SERVICE = "payments-api"
BAD_VERSION = "2.14.0"
GOOD_VERSION = "2.13.2"
POOL_BEFORE = 50
POOL_AFTER = 20
ERROR_CODE = "DB_POOL_EXHAUSTED"
CHECKOUT_FAILURE_CODE = "PAYMENT_TIMEOUT"
WAIT_MS = 30000
FAILED_CHECKOUTS = 312
SUCCESSFUL_CHECKOUTS_DURING = 41  # a few still got a connection
DEMO_QUESTION = "Why did checkout fail last night?"


@dataclass(frozen=True)
class IncidentTimes:
    deployed: datetime  # 2.14.0 rolled out
    start: datetime  # first DB_POOL_EXHAUSTED
    end: datetime  # the rollback to 2.13.2
    previous_deploy: datetime  # 2.13.2, two days earlier


def incident_times(now: datetime) -> IncidentTimes:
    """The incident's times for a demo seeded at ``now``: the evening before, in UTC."""
    day = (now.astimezone(UTC) - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return IncidentTimes(
        deployed=day.replace(hour=22, minute=58),
        start=day.replace(hour=23, minute=5),
        end=day.replace(hour=23, minute=41),
        previous_deploy=day.replace(hour=10, minute=12) - timedelta(days=2),
    )
