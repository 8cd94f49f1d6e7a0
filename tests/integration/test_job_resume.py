"""Scheduled jobs stopped midway by a fault at the botocore boundary resume where they stopped.

Each job's per-item write is one transaction with its audit event, conditional on the very state the
write changes (a pathway not yet demoted, a row still dispatched at the time it was read). So a run
that a fault stops leaves every item either done with its event or untouched, and the next run
(after the fault clears) does the untouched ones only: each item once, each event once.

Two faults on the Nth write of the run: refused (throttled; nothing written) and applied with its
answer lost (a read timeout after DynamoDB committed), the case where a blind retry would double it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError

from flowledger.jobs import run_job
from flowledger.ledger.audit import checkpoints_of, verify_ledger
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.reasoning.models import FlowView
from flowledger.research.backlog import Backlog
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import Services

ENDPOINT = "https://dynamodb.us-east-1.amazonaws.com"
ITEMS = 5
FAULTY_WRITE = 3  # the run's third TransactWriteItems


def throttled(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
    error = {"Error": {"Code": "ThrottlingException", "Message": "injected"}, "ResponseMetadata": {}}
    return AWSResponse(ENDPOINT, 400, {}, None), error


def answer_lost(**_: Any) -> None:
    raise ReadTimeoutError(endpoint_url=ENDPOINT)


# fault name -> (botocore event, hook): before-call answers for AWS (nothing sent); after-call runs once it applied.
FAULTS: dict[str, tuple[str, Callable[..., Any]]] = {
    "throttled": ("before-call.dynamodb.TransactWriteItems", throttled),
    "answer-lost": ("after-call.dynamodb.TransactWriteItems", answer_lost),
}


@dataclass
class NthCall:
    """Lets every call through but the ``nth``."""

    nth: int
    hook: Callable[..., Any]
    calls: int = 0

    def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        return self.hook(**kwargs) if self.calls == self.nth else None


@contextlib.contextmanager
def fault_on_nth_write(services: Services, fault: str, nth: int = FAULTY_WRITE) -> Iterator[NthCall]:
    event, hook = FAULTS[fault]
    injected = NthCall(nth, hook)
    events = (services.aws.s3 if ".s3." in event else services.aws.dynamodb).meta.events
    events.register(event, injected)
    try:
        yield injected
    finally:
        events.unregister(event, injected)


def events_by_subject(services: Services, action: str) -> Counter[str]:
    """How many audit events of ``action`` each subject has, read from the ledger table itself."""
    counted: Counter[str] = Counter()
    for chain_id in services.ledger.chain_ids():
        counted.update(event.subject for event in services.ledger.read_chain(chain_id) if event.action == action)
    return counted


def run_stopped_by(services: Services, fault: str, job: str) -> None:
    """The job hits the fault and stops with it (the scheduler sees a failed run)."""
    with fault_on_nth_write(services, fault) as injected, pytest.raises((ClientError, BotoCoreError)):
        run_job(job, services)
    assert injected.calls >= FAULTY_WRITE


# ---- pathway decay ----------------------------------------------------------------------------------


@pytest.fixture
def cold_pathways(services: Services, qualifying_flow: Callable[[str, str], FlowView]) -> list[str]:
    """ITEMS pathways never hit, then the clock moved past the cold threshold."""
    extractor = PathwayExtractor(services)
    ids = []
    for n in range(ITEMS):
        extracted = extractor.extract(qualifying_flow(f"fl_01RESUME{n:017d}", f"chat/run-{n}"), [], "system:test")
        assert extracted.pathway_id is not None
        ids.append(extracted.pathway_id)
    later = services.clock() + timedelta(days=services.settings.pathway_cold_days + 1)
    services.clock = lambda: later
    return ids


def demoted(services: Services, pathway_ids: list[str]) -> dict[str, bool]:
    table = services.aws.table_name("pathways")
    return {
        pathway_id: "demoted_at"
        in services.aws.dynamodb.get_item(TableName=table, Key={"pathway_id": {"S": pathway_id}}, ConsistentRead=True)[
            "Item"
        ]
        for pathway_id in pathway_ids
    }


@pytest.mark.parametrize("fault", FAULTS)
def test_pathway_decay_stopped_by_a_fault_demotes_the_rest_next_run_each_once(
    services: Services, cold_pathways: list[str], fault: str
) -> None:
    run_stopped_by(services, fault, "pathway_decay")
    done_first = sum(demoted(services, cold_pathways).values())
    # started is write 1, so writes 2.. are demotions: the fault stopped the run partway
    assert done_first == (FAULTY_WRITE - 2) + (1 if fault == "answer-lost" else 0)

    second = run_job("pathway_decay", services)
    assert second["demoted_cold"] == ITEMS - done_first
    assert all(demoted(services, cold_pathways).values())
    assert events_by_subject(services, "reasoning.pathway.demoted") == {f"pathway:{p}": 1 for p in cold_pathways}
    assert run_job("pathway_decay", services)["demoted_cold"] == 0  # and a third run has nothing left
    assert verify_ledger(services.ledger, checkpoints_of(services)).ok


# ---- backlog stale sweep ----------------------------------------------------------------------------


@pytest.fixture
def stale_rows(services: Services) -> list[str]:
    """ITEMS rows dispatched to a consumer that died, then the clock moved past the stale threshold."""
    backlog = Backlog(services)
    ids = list(enqueue_synthetic(backlog, ITEMS, "resume"))
    for _ in ids:
        assert backlog.pull_next("system:dead-consumer") is not None
    later = services.clock() + timedelta(minutes=services.settings.backlog_stale_after_minutes + 1)
    services.clock = lambda: later
    return ids


@pytest.mark.parametrize("fault", FAULTS)
def test_the_stale_sweep_stopped_by_a_fault_recovers_the_rest_next_run_each_once(
    services: Services, stale_rows: list[str], fault: str
) -> None:
    run_stopped_by(services, fault, "backlog_stale_sweep")
    backlog = Backlog(services)
    recovered_first = sum(row.status.value == "pending" for rid in stale_rows if (row := backlog.get(rid)))
    # each requeue is one write: the fault stopped the sweep at its third row
    assert recovered_first == (FAULTY_WRITE - 1) + (1 if fault == "answer-lost" else 0)

    second = run_job("backlog_stale_sweep", services)
    assert (second["recovered"], second["requeued"]) == (ITEMS - recovered_first, 0)
    rows = [backlog.get(rid) for rid in stale_rows]
    assert [(row.status.value, row.retry_count) for row in rows if row] == [("pending", 1)] * ITEMS
    recovered = events_by_subject(services, "reasoning.research.backlog.recovered")
    assert recovered == {f"backlog:{rid}": 1 for rid in stale_rows}
    # none is lost or doubled in the ticket queue either: the rows come out once each, then none
    pulled = [backlog.pull_next("system:backlog_consumer") for _ in range(ITEMS + 1)]
    assert sorted(row.request_id for row in pulled if row) == sorted(stale_rows) and pulled[-1] is None
    assert verify_ledger(services.ledger, checkpoints_of(services)).ok


# ---- ledger checkpoint ------------------------------------------------------------------------------


def test_a_checkpoint_refused_by_s3_is_taken_whole_by_the_next_run(services: Services) -> None:
    enqueue_synthetic(Backlog(services), 3, "checkpointed")  # three audit events to fold
    s3_events = services.aws.s3.meta.events
    refused = NthCall(1, lambda **_: (AWSResponse(ENDPOINT, 503, {}, None), {"Error": {"Code": "SlowDown"}}))
    s3_events.register("before-call.s3.PutObject", refused)
    try:
        with pytest.raises(ClientError):
            run_job("ledger_checkpoint", services)
    finally:
        s3_events.unregister("before-call.s3.PutObject", refused)
    assert checkpoints_of(services).ids() == []
    taken = run_job("ledger_checkpoint", services)
    assert taken["events"] == 3
    report = verify_ledger(services.ledger, checkpoints_of(services))
    assert report.ok and report.checkpoints_checked == 1
