"""The backlog's ticket queue at its edges: rows pulled by type, consumers that die, other strategies."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from flowledger.research.backlog import Backlog
from flowledger.research.models import BacklogRow, Completion, DeeperRequest, Reason
from flowledger.research.tickets import TicketQueue
from flowledger.services import Services

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def backlog(services: Services) -> Backlog:
    ticks = itertools.count()
    services.clock = lambda: T0 + timedelta(seconds=next(ticks))
    return Backlog(services)


def enqueue(backlog: Backlog, n: int, trigger_type: str = "user_question", strategy: str | None = None) -> BacklogRow:
    row, created = backlog.enqueue(
        "user:producer",
        DeeperRequest(
            idempotency_key=f"tickets-{n:04d}",
            trigger_type=trigger_type,
            trigger_ref=f"q/{n}",
            reason=Reason.CLAIM_REJECTED if strategy else Reason.NO_EVIDENCE_HITS,
            question_framing="q",
        ),
        strategy=strategy,
    )
    assert created
    return row


def later(services: Services, minutes: int) -> None:
    services.clock = lambda: T0 + timedelta(minutes=minutes)


def test_tickets_follow_enqueue_order_and_a_repeated_key_takes_none(backlog: Backlog, services: Services) -> None:
    rows = [enqueue(backlog, n) for n in range(3)]
    again, created = backlog.enqueue(
        "user:producer",
        DeeperRequest(
            idempotency_key="tickets-0001",
            trigger_type="user_question",
            trigger_ref="q/1",
            reason=Reason.NO_EVIDENCE_HITS,
            question_framing="q",
        ),
    )
    assert not created and again.ticket == 2
    assert [row.ticket for row in rows] == [1, 2, 3]
    assert TicketQueue(services.aws.dynamodb, services.aws.table_name("backlog_tickets")).counter() == (3, 0)


def test_a_row_pulled_by_type_is_skipped_by_the_ticket_queue(backlog: Backlog) -> None:
    first, second = enqueue(backlog, 0, "critic"), enqueue(backlog, 1)
    pulled = backlog.pull_next("consumer:typed", trigger_type="critic")
    assert pulled is not None and pulled.request_id == first.request_id
    untyped = backlog.pull_next("consumer:any")
    assert untyped is not None and untyped.request_id == second.request_id
    assert backlog.pull_next("consumer:any") is None


def test_a_row_whose_consumer_died_after_taking_its_ticket_is_requeued_by_the_sweep(
    backlog: Backlog, services: Services
) -> None:
    row = enqueue(backlog, 0)
    TicketQueue(services.aws.dynamodb, services.aws.table_name("backlog_tickets")).take()  # and then nothing
    assert backlog.pull_next("consumer:b") is None
    later(services, 29)
    assert backlog.sweep_stale()["requeued"] == 0  # it may still be on its way
    later(services, 31)
    assert backlog.sweep_stale()["requeued"] == 1
    pulled = backlog.pull_next("consumer:b")
    assert pulled is not None and pulled.request_id == row.request_id and pulled.ticket == 2
    assert pulled.retry_count == 0


def test_a_recovered_row_goes_to_the_back_of_the_queue(backlog: Backlog, services: Services) -> None:
    first, second = enqueue(backlog, 0), enqueue(backlog, 1)
    assert backlog.pull_next("consumer:dies") is not None  # takes the first and never completes it
    later(services, 31)
    assert backlog.sweep_stale()["recovered"] == 1
    order = [backlog.pull_next("consumer:b"), backlog.pull_next("consumer:b")]
    assert [row.request_id for row in order if row] == [second.request_id, first.request_id]
    assert order[1] is not None and order[1].retry_count == 1


def test_a_row_of_another_strategy_is_parked_pending_and_served_to_a_pull_that_takes_it(
    backlog: Backlog, services: Services
) -> None:
    row = enqueue(backlog, 0, "critic", strategy="mark_for_review")
    later_row = enqueue(backlog, 1)
    pulled = backlog.pull_next("system:backlog_consumer", strategy="re_research")
    assert pulled is not None and pulled.request_id == later_row.request_id  # the other row is stepped over
    backlog.complete("system:backlog_consumer", pulled.request_id, Completion())
    assert backlog.pull_next("system:backlog_consumer", strategy="re_research") is None
    parked = backlog.get(row.request_id)
    assert parked is not None and parked.status == "pending" and parked.ticket is None
    later(services, 31)
    assert backlog.sweep_stale()["requeued"] == 0  # parked, not stranded
    taken = backlog.pull_next("system:backlog_consumer", strategy="mark_for_review")
    assert taken is not None and taken.request_id == row.request_id
    ledger = services.ledger
    actions = [e.action for c in ledger.chain_ids() for e in ledger.read_chain(c)]
    assert actions.count("reasoning.research.backlog.parked") == 1


def test_requeueing_a_stranded_row_leaves_no_slot_behind(backlog: Backlog, services: Services) -> None:
    enqueue(backlog, 0)
    tickets = TicketQueue(services.aws.dynamodb, services.aws.table_name("backlog_tickets"))
    tickets.take()  # a consumer that dies
    later(services, 31)
    assert backlog.sweep_stale()["requeued"] == 1
    assert tickets.slot(1) is None and tickets.slot(2) is not None
