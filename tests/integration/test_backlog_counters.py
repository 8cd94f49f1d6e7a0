"""The backlog view from counters: exact under concurrency, a fixed number of requests, a recount for upgrades."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.errors import BacklogContention
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.research.backlog import Backlog
from flowledger.research.backlog_stats import RECOUNT_ATTEMPTS, BacklogStats
from flowledger.research.models import BacklogStatus, Completion, DeeperRequest, Reason
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import Services, build_services
from flowledger.store.counters import KEY_PREFIX, SHARDS
from flowledger.store.provision import create_table
from flowledger.store.tables import table_spec

THREADS = 8
# Three rounds, the fewest in which each thread enqueues, pulls, completes and fails: with an enqueue's
# counter update written on its own before its transaction (a retried ticket counts twice), 5 runs of 5
# failed; without the locked server's lock, about half failed, as with 12 rounds. `make bench`
# (bench/full_size.py) runs 12.
ROUNDS = 3
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def stored_rows(services: Services) -> list[dict[str, Any]]:
    """Every backlog row, read whole from the table (the counters left out): the truth the view must match."""
    db = services.aws.dynamodb
    table = services.aws.table_name("backlog")
    found, start = [], {}
    while True:
        page = db.scan(TableName=table, ConsistentRead=True, **start)
        found += [i for i in page["Items"] if not i["request_id"]["S"].startswith(KEY_PREFIX)]
        if "LastEvaluatedKey" not in page:
            return found
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def recounted(services: Services) -> tuple[dict[str, int], dict[str, int]]:
    """The status and retry distributions a full read of the rows gives."""
    rows = stored_rows(services)
    statuses = Counter(i["status"]["S"] for i in rows)
    retries = Counter(
        i.get("retry_count", {"N": "0"})["N"] for i in rows if i["status"]["S"] in ("pending", "dispatched")
    )
    return {s.value: statuses.get(s.value, 0) for s in BacklogStatus}, dict(retries)


class Requests:
    """DynamoDB requests made on one client, and the items they returned, counted through botocore's event hooks."""

    def __init__(self, client: Any) -> None:
        self.made: Counter[str] = Counter()
        self.items_read = 0
        client.meta.events.register("before-call.dynamodb.*", self._count)
        client.meta.events.register("after-call.dynamodb.*", self._read)

    def _count(self, event_name: str, **_: Any) -> None:
        self.made[event_name.rsplit(".", 1)[-1]] += 1

    def _read(self, parsed: dict[str, Any], **_: Any) -> None:
        self.items_read += len(parsed.get("Items", [])) + sum(len(v) for v in parsed.get("Responses", {}).values())

    def during(self, action: Callable[[], object]) -> Counter[str]:
        self.made, self.items_read = Counter(), 0
        action()
        return Counter(self.made)


def deeper(key: str) -> DeeperRequest:
    return DeeperRequest(
        idempotency_key=key, trigger_type="user_question", trigger_ref=f"r/{key}", reason=Reason.NO_EVIDENCE_HITS,
        question_framing="q",
    )  # fmt: skip


@pytest.fixture
def ticking(services: Services) -> Iterator[Callable[[timedelta], None]]:
    """A clock that moves 1 ms a read from wherever the test sets it."""
    base = [T0]
    ticks = itertools.count()
    services.clock = lambda: base[0] + timedelta(milliseconds=next(ticks))

    def set_to(offset: timedelta) -> None:
        base[0] = T0 + offset

    yield set_to


@pytest.mark.usefixtures("clean_environment")
def test_eight_threads_enqueueing_pulling_completing_and_failing_leave_counters_equal_to_a_recount(
    locked_moto: str,
) -> None:
    settings = load_settings(aws_endpoint_url=locked_moto, resource_prefix="backlogcounters")
    setup = build_services(settings, EMBEDDED_CREDENTIALS)
    for table in ("backlog", "backlog_tickets", "ledger", "ledger_leases"):
        create_table(setup.aws, table_spec(table))
    start_line = threading.Barrier(THREADS)

    def work(number: int) -> None:
        backlog = Backlog(build_services(settings, EMBEDDED_CREDENTIALS))  # its own client and head cache
        start_line.wait()
        for n in range(ROUNDS):
            while True:  # 8 enqueuers contend for the ticket counter: a 503 the client retries with its key
                try:
                    backlog.enqueue(f"user:{number}", deeper(f"conc-{number}-{n:04d}"))
                    break
                except BacklogContention:
                    continue
            if n % 3 == 2:  # every third round a thread drains a little and closes what it took
                for taken in range(2):
                    row = backlog.pull_next(f"consumer:{number}")
                    if row is not None and taken == 0:
                        backlog.complete(f"consumer:{number}", row.request_id, Completion())
                    elif row is not None:
                        backlog.complete(f"consumer:{number}", row.request_id, Completion(error="gave_up"))
        backlog.pull_next(f"consumer:{number}")  # left dispatched

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(work, range(THREADS)))
    # Then a sweep far in the future recovers every dispatched row (retry 1), and one more round of pulls.
    later = build_services(settings, EMBEDDED_CREDENTIALS)
    later.clock = lambda: datetime.now(UTC) + timedelta(hours=2)
    swept = Backlog(later).sweep_stale()
    assert swept["recovered"] == THREADS
    for _ in range(3):
        Backlog(later).pull_next("consumer:late")
    view = Backlog(later).view()
    statuses, retries = recounted(later)
    assert sum(statuses.values()) == THREADS * ROUNDS
    assert view.status_distribution == statuses
    assert view.retry_distribution == retries and retries.get("1") == THREADS
    assert BacklogStats(later).recount() == {  # and the recount agrees, changing nothing
        **{f"status:{s}": n for s, n in statuses.items() if n},
        **{f"retries:{r}": n for r, n in retries.items()},
    }
    assert Backlog(later).view().status_distribution == statuses


def test_the_view_reads_the_same_few_items_with_five_rows_or_two_hundred(services: Services) -> None:
    backlog = Backlog(services)
    requests = Requests(services.aws.dynamodb)

    def load(count: int, prefix: str) -> Counter[str]:
        enqueue_synthetic(backlog, count, prefix)
        for _ in range(count // 5):
            row = backlog.pull_next("user:consumer")
            assert row is not None
            backlog.complete("user:consumer", row.request_id, Completion(error="gave_up"))
        backlog.pull_next("user:consumer")
        return requests.during(backlog.view)

    small = load(5, "few")
    large = load(195, "many")  # 200 rows in all
    assert small == large == Counter({"BatchGetItem": 1, "Query": 4})
    # and each returns a bounded number of items: the counter shards, two oldest rows, ten failures a status
    assert requests.items_read <= SHARDS + 1 + 1 + 2 * 10


def test_oldest_dispatched_counts_from_the_latest_dispatch_not_the_creation(
    services: Services, ticking: Callable[[timedelta], None]
) -> None:
    backlog = Backlog(services)
    row, _ = backlog.enqueue("user:x", deeper("old-row-0001"))
    assert backlog.pull_next("user:consumer") is not None
    ticking(timedelta(hours=2))
    assert backlog.sweep_stale()["recovered"] == 1  # created 2 h ago, back to pending
    assert backlog.pull_next("user:consumer") is not None  # dispatched again now
    ticking(timedelta(hours=2, minutes=10))
    view = backlog.view()
    assert 599 <= view.oldest_dispatched_age_seconds <= 601  # type: ignore[operator]  # 10 min, not 2 h 10
    assert view.loop_health == "healthy" and view.retry_distribution == {"1": 1}
    backlog.complete("user:consumer", row.request_id, Completion())  # it leaves play with its retry count
    assert backlog.view().retry_distribution == {}


def test_recent_failures_are_the_latest_ten_of_the_past_day_newest_first(
    services: Services, ticking: Callable[[timedelta], None]
) -> None:
    backlog = Backlog(services)
    failed_ids = []
    for n in range(14):
        ticking(timedelta(hours=n * 2))  # the first ones fail more than a day before the view
        backlog.enqueue("user:x", deeper(f"failing-{n:04d}"))
        row = backlog.pull_next("user:consumer")
        assert row is not None
        backlog.complete("user:consumer", row.request_id, Completion(error=f"reason_{n}"))
        failed_ids.append(row.request_id)
    ticking(timedelta(hours=27, minutes=1))
    view = backlog.view()
    # Failed in the past 24 h: those failed at 4 h .. 26 h (12 rows); the ten newest are shown, newest first.
    assert [f.request_id for f in view.recent_failures] == failed_ids[::-1][:10]
    assert [f.failure_reason for f in view.recent_failures][:2] == ["reason_13", "reason_12"]
    assert view.status_distribution["failed_voluntary"] == 14 and view.loop_health == "warn"


def test_terminal_counts_are_lifetime_totals_that_outlive_the_rows_ttl(services: Services) -> None:
    backlog = Backlog(services)
    enqueue_synthetic(backlog, 3, "ttl")
    done = []
    for _ in range(3):
        row = backlog.pull_next("user:consumer")
        assert row is not None
        done.append(backlog.complete("user:consumer", row.request_id, Completion()).request_id)
    table = services.aws.table_name("backlog")
    services.aws.dynamodb.delete_item(TableName=table, Key={"request_id": {"S": done[0]}})  # as the TTL would
    assert Backlog(services).view().status_distribution["completed"] == 3
    # A recount never lowers a lifetime total to the rows retained.
    assert BacklogStats(services).recount()["status:completed"] == 3


def forget_the_counters(services: Services) -> None:
    """An upgraded deployment: rows written by the previous version carry no counters and no status time."""
    db, table = services.aws.dynamodb, services.aws.table_name("backlog")
    for item in db.scan(TableName=table)["Items"]:
        key = {"request_id": item["request_id"]}
        if item["request_id"]["S"].startswith(KEY_PREFIX):
            db.delete_item(TableName=table, Key=key)
        else:
            db.update_item(TableName=table, Key=key, UpdateExpression="REMOVE status_changed_at")


def test_the_recount_rebuilds_missing_counters_and_stamps_older_rows(
    services: Services, ticking: Callable[[timedelta], None]
) -> None:
    backlog = Backlog(services)
    enqueue_synthetic(backlog, 4, "legacy")
    assert backlog.pull_next("user:consumer") is not None
    row = backlog.pull_next("user:consumer")
    assert row is not None
    backlog.complete("user:consumer", row.request_id, Completion(error="gave_up"))
    forget_the_counters(services)
    ticking(timedelta(minutes=20))
    before = backlog.view()
    assert before.status_distribution["pending"] == 0 and before.oldest_dispatched_age_seconds is None
    assert BacklogStats(services).recount() == {
        "retries:0": 3,
        "status:dispatched": 1,
        "status:failed_voluntary": 1,
        "status:pending": 2,
    }
    after = backlog.view()
    assert after.status_distribution == {**recounted(services)[0]}
    assert after.oldest_dispatched_age_seconds is not None and after.oldest_dispatched_age_seconds >= 1200
    assert after.loop_health == "warn" and [f.request_id for f in after.recent_failures] == [row.request_id]


def test_a_recount_that_a_write_overtook_scans_again_and_never_loses_the_write(services: Services) -> None:
    backlog = Backlog(services)
    enqueue_synthetic(backlog, 2, "racing")
    writer = Backlog(build_services(services.settings, EMBEDDED_CREDENTIALS))
    raced = []

    def enqueue_during_the_first_scan(**_: Any) -> None:
        if not raced:
            raced.append(writer.enqueue("user:rival", deeper("rival-key-0001")))

    # The rival's write lands after the scan read the rows and before the recount replaces the counters.
    events = services.aws.dynamodb.meta.events
    events.register("after-call.dynamodb.Scan", enqueue_during_the_first_scan)
    try:
        counts = BacklogStats(services).recount()
    finally:
        events.unregister("after-call.dynamodb.Scan", enqueue_during_the_first_scan)
    assert counts["status:pending"] == 3  # the second scan saw the rival's row
    assert backlog.view().status_distribution["pending"] == 3


def test_a_recount_overtaken_every_time_gives_up_replacing_nothing(services: Services) -> None:
    backlog = Backlog(services)
    enqueue_synthetic(backlog, 1, "busy")
    writer = Backlog(build_services(services.settings, EMBEDDED_CREDENTIALS))
    keys = itertools.count()

    def enqueue_during_every_scan(**_: Any) -> None:
        writer.enqueue("user:rival", deeper(f"rival-{next(keys):06d}"))

    services.aws.dynamodb.meta.events.register("before-call.dynamodb.Scan", enqueue_during_every_scan)
    with pytest.raises(BacklogContention):
        BacklogStats(services).recount()
    services.aws.dynamodb.meta.events.unregister("before-call.dynamodb.Scan", enqueue_during_every_scan)
    rivals = next(keys)
    assert rivals == RECOUNT_ATTEMPTS  # one scan per attempt, each overtaken
    assert backlog.view().status_distribution["pending"] == 1 + rivals  # the rivals' counts were kept
