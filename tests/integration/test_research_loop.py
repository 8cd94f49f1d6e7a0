"""Producers behind their flags, the loop break, the consumer's strategies, and the SDK."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from botocore.credentials import Credentials

from flowledger.config import CriticDispatchStrategy, load_settings
from flowledger.errors import BacklogContention, LedgerContention
from flowledger.jobs import run_job
from flowledger.research.backlog import Backlog
from flowledger.research.claims import ClaimTriage
from flowledger.research.client import MemoryClient
from flowledger.research.loop import LOOP_HEALTH_CRITICAL_METRIC, BacklogConsumer
from flowledger.research.models import BacklogRow, Completion
from flowledger.research.producers import CriticVerdict, ResearchResult, on_critic_verdict, on_research_result
from flowledger.services import Services


def flags(services: Services, **values: Any) -> None:
    """Turn settings on for one test (settings are frozen for the application, not for tests)."""
    for name, value in values.items():
        services.settings.__dict__[name] = value


def result(**overrides: Any) -> ResearchResult:
    return ResearchResult(
        **{
            "trigger_type": "user_question",
            "trigger_ref": "q/1",
            "question": "Why?",
            "hits": 3,
            "composite_k": 0.8,
            **overrides,
        }
    )


def test_research_producer_is_off_by_default_and_enqueues_weak_results_when_on(services: Services) -> None:
    assert on_research_result(services, result(hits=0)) is None
    flags(services, research_auto_enqueue_enabled=True)
    assert on_research_result(services, result()) is None  # strong enough
    assert on_research_result(services, result(hits=0)).reason == "no_evidence_hits"  # type: ignore[union-attr]
    assert on_research_result(services, result(trigger_ref="q/2", composite_k=0.59)).reason == "weak_composite_k"  # type: ignore[union-attr]
    assert on_research_result(services, result(trigger_ref="q/3", hits=0, dispatched_from_backlog=True)) is None


def test_a_composite_k_of_exactly_the_threshold_is_strong_enough(services: Services) -> None:
    flags(services, research_auto_enqueue_enabled=True)
    assert on_research_result(services, result(composite_k=0.6)) is None  # under 0.6 is weak; 0.6 is not
    assert on_research_result(services, result(composite_k=0.5999)).reason == "weak_composite_k"  # type: ignore[union-attr]


def test_critic_producer_enqueues_rejections_under_the_current_strategy(services: Services) -> None:
    verdict = CriticVerdict(
        claim_id="c-1",
        verdict="reject",
        rejection_summary="Unsupported",
        trigger_type="critic",
    )
    assert on_critic_verdict(services, verdict) is None
    flags(services, critic_auto_enqueue_enabled=True)
    row = on_critic_verdict(services, verdict)
    assert row is not None and (row.reason, row.strategy) == ("claim_rejected", "mark_for_review")
    accept = CriticVerdict(**{**verdict.__dict__, "verdict": "accept", "claim_id": "c-2"})
    assert on_critic_verdict(services, accept) is None


def test_consumer_is_off_by_default(services: Services) -> None:
    assert run_job("backlog_consumer", services) == {
        "job": "backlog_consumer",
        "skipped": "BACKLOG_CONSUMER_ENABLED is off",
    }


def test_the_consumer_pulls_nothing_while_the_model_configuration_cannot_be_read(services: Services) -> None:
    from flowledger.llm.aws_model_config import reader_for

    reader_for.cache_clear()  # a reader of this test's moto
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:no-such-key-AbCdEf"
    flags(
        services,
        research_auto_enqueue_enabled=True,
        backlog_consumer_enabled=True,
        openai_api_key=None,
        openai_api_key_secret_arn=missing,
    )
    row = on_research_result(services, result(hits=0))
    assert run_job("backlog_consumer", services) == {"job": "backlog_consumer", "skipped": "the model is unavailable"}
    stored = Backlog(services).get(row.request_id)  # type: ignore[union-attr]
    assert stored is not None and (stored.status, stored.dispatched_at) == ("pending", None)  # left for the next run
    reader_for.cache_clear()


def test_without_a_dispatcher_rows_fail_voluntarily(services: Services) -> None:
    # The job always has the research agents; a consumer built without any dispatcher fails rows.
    flags(services, research_auto_enqueue_enabled=True, backlog_consumer_enabled=True)
    row = on_research_result(services, result(hits=0))
    outcome = BacklogConsumer(services, dispatchers={}).run_once()
    assert (outcome["pulled"], outcome["failed_voluntary"]) == (1, 1)
    stored = Backlog(services).get(row.request_id)  # type: ignore[union-attr]
    assert stored is not None and (stored.status, stored.failure_reason) == (
        "failed_voluntary",
        "no_dispatcher_configured",
    )


def test_mark_for_review_sends_rejections_to_triage(services: Services) -> None:
    flags(services, critic_auto_enqueue_enabled=True)
    on_critic_verdict(services, CriticVerdict("c-9", "reject", "Unsupported claim", "critic"))
    counts = BacklogConsumer(services, dispatchers={}).run_once()
    assert counts["marked_for_review"] == 1
    assert ClaimTriage(services).get("c-9") is not None


def test_re_research_dispatches_and_leaves_rows_of_the_other_strategy(services: Services) -> None:
    flags(services, critic_auto_enqueue_enabled=True)
    on_critic_verdict(services, CriticVerdict("c-1", "reject", "Old strategy row", "critic"))
    flags(services, critic_dispatch_strategy=CriticDispatchStrategy.RE_RESEARCH)
    fresh = on_critic_verdict(services, CriticVerdict("c-2", "reject", "No evidence", "critic"))
    seen: list[BacklogRow] = []

    class Researcher:
        def dispatch(self, row: BacklogRow) -> str | None:
            seen.append(row)
            return "fl_01JD0000000000000000000000"

    counts = BacklogConsumer(services, dispatchers={"critic": Researcher()}).run_once()
    assert counts == {
        "pulled": 1,
        "completed": 1,
        "failed_voluntary": 0,
        "failed_invalid": 0,
        "failed_unreadable": 0,
        "rows_failed": 0,
        "marked_for_review": 0,
        "lost": 0,
    }
    assert [r.request_id for r in seen] == [fresh.request_id]  # type: ignore[union-attr]
    assert "No evidence" in seen[0].question_framing
    assert Backlog(services).view().status_distribution["pending"] == 1  # the old strategy's row stays


def emitted(out: str, name: str) -> list[tuple[float, dict[str, str]]]:
    """(value, dimensions) of each EMF record of metric ``name`` in the captured stdout."""
    found = []
    for line in out.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        record = json.loads(line)
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        if [m["Name"] for m in directive["Metrics"]] == [name]:
            assert directive["Namespace"] == "Flowledger"
            dimensions = {key: record[key] for keys in directive["Dimensions"] for key in keys}
            found.extend((value, dimensions) for value in record[name])
    return found


def test_the_stale_sweep_job_emits_the_loop_health_verdict_as_a_metric(
    services: Services, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "jobs")  # as the jobs function's environment sets it
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    services.clock = lambda: now
    flags(services, research_auto_enqueue_enabled=True)
    on_research_result(services, result(hits=0))
    assert Backlog(services).pull_next("user:consumer") is not None  # dispatched now, then never completed
    capsys.readouterr()
    services.clock = lambda: now + timedelta(minutes=16)  # dispatched 16 minutes ago: warn, not critical
    assert run_job("backlog_stale_sweep", services)["loop_health"] == "warn"
    assert emitted(capsys.readouterr().out, LOOP_HEALTH_CRITICAL_METRIC) == [(0.0, {"service": "jobs"})]
    # The sweep returns the stuck row to pending; created over an hour ago, it makes the verdict critical.
    services.clock = lambda: now + timedelta(minutes=61)
    outcome = run_job("backlog_stale_sweep", services)
    assert (outcome["recovered"], outcome["loop_health"]) == (1, "critical")
    assert emitted(capsys.readouterr().out, LOOP_HEALTH_CRITICAL_METRIC) == [(1.0, {"service": "jobs"})]


@pytest.mark.anyio
async def test_the_sdk_is_fail_soft(scripted_openai: Any, caplog: pytest.LogCaptureFixture) -> None:
    credentials = Credentials("AKIATEST", "secret")
    failing = MemoryClient(scripted_openai.base_url.removesuffix("/v1"), "us-east-1", credentials)
    scripted_openai.script = [{"status": 500}, {"status": 500}]
    unreachable = MemoryClient("http://127.0.0.1:9", "us-east-1", credentials, timeout_seconds=1)
    with caplog.at_level(logging.WARNING, logger="flowledger.research.client"):
        assert await failing.pull_next_research_request() is None
        assert await failing.list_claims_pending_review() is None
        assert (
            await unreachable.enqueue_deeper_research(
                idempotency_key="k" * 8,
                trigger_type="t",
                trigger_ref="r",
                reason="weak_composite_k",
                question_framing="q",
            )
            is None
        )
    assert len(caplog.records) == 2  # once per client
    signed = scripted_openai.requests[0]
    assert signed == {}  # the body of a pull without a filter
    await failing.aclose()
    await unreachable.aclose()


@pytest.mark.anyio
async def test_the_sdk_signs_its_requests() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"request": None})

    client = MemoryClient(
        "https://api.example.com/v1",
        "eu-west-1",
        Credentials("AKIATEST", "secret"),
        transport=httpx.MockTransport(answer),
    )
    assert await client.pull_next_research_request("critic") == {"request": None}
    authorization = seen[0].headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIATEST/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    await client.aclose()


def test_a_second_weak_result_while_the_first_is_open_is_the_same_row(services: Services) -> None:
    flags(services, research_auto_enqueue_enabled=True)
    first = on_research_result(services, result(hits=0))
    again = on_research_result(services, result(composite_k=0.3))  # another weak result, same trigger
    assert first is not None and again is not None and again.request_id == first.request_id
    assert on_research_result(services, result(trigger_ref="q/other", hits=0)).request_id != first.request_id  # type: ignore[union-attr]
    assert Backlog(services).view().status_distribution["pending"] == 2


@pytest.mark.parametrize("ending", ["completed", "failed_voluntary"])
def test_once_the_open_row_ends_a_fresh_attempt_enqueues_at_once(services: Services, ending: str) -> None:
    flags(services, research_auto_enqueue_enabled=True)
    first = on_research_result(services, result(hits=0))
    backlog = Backlog(services)
    pulled = backlog.pull_next("user:consumer")
    assert pulled is not None and pulled.request_id == first.request_id  # type: ignore[union-attr]
    assert on_research_result(services, result(hits=0)).request_id == first.request_id  # type: ignore[union-attr]
    backlog.complete("user:consumer", pulled.request_id, Completion(error="gave_up" if ending != "completed" else None))
    fresh = on_research_result(services, result(hits=0))  # not 30 days later: now
    assert fresh is not None and fresh.request_id != first.request_id and fresh.status == "pending"


def test_a_row_failed_after_retries_frees_its_trigger_too(services: Services) -> None:
    flags(services, research_auto_enqueue_enabled=True, backlog_max_retries=0)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    services.clock = lambda: now
    first = on_research_result(services, result(hits=0))
    assert Backlog(services).pull_next("user:consumer") is not None
    services.clock = lambda: now + timedelta(hours=1)
    assert Backlog(services).sweep_stale()["failed_after_retries"] == 1
    fresh = on_research_result(services, result(hits=0))
    assert fresh is not None and fresh.request_id != first.request_id  # type: ignore[union-attr]


def test_a_second_rejection_of_an_open_claim_is_the_same_row(services: Services) -> None:
    flags(services, critic_auto_enqueue_enabled=True)
    verdict = CriticVerdict("c-7", "reject", "Unsupported", "user_question")
    first, again = on_critic_verdict(services, verdict), on_critic_verdict(services, verdict)
    assert first is not None and again is not None and again.request_id == first.request_id
    BacklogConsumer(services, dispatchers={}).run_once()  # mark_for_review: triaged and completed
    fresh = on_critic_verdict(services, verdict)
    assert fresh is not None and fresh.request_id != first.request_id


@pytest.mark.usefixtures("clean_environment")
def test_concurrent_weak_results_for_one_trigger_open_one_row(locked_moto: str) -> None:
    """Eight producers at once, each with its own clients, on the locked moto server (whose transactions
    are atomic, as DynamoDB's are): one row opens, and every producer gets it."""
    import threading
    import uuid

    from flowledger.local.devserver import EMBEDDED_CREDENTIALS
    from flowledger.services import build_services
    from flowledger.store.provision import create_table
    from flowledger.store.tables import table_spec

    settings = load_settings(
        aws_endpoint_url=locked_moto,
        resource_prefix=f"guard{uuid.uuid4().hex[:8]}",
        research_auto_enqueue_enabled=True,
    )
    setup = build_services(settings, EMBEDDED_CREDENTIALS)
    for table in ("backlog", "backlog_tickets", "ledger", "ledger_leases"):
        create_table(setup.aws, table_spec(table))
    rows: list[Any] = []
    errors: list[BaseException] = []
    start_line = threading.Barrier(8)

    def produce() -> None:
        services = build_services(settings, EMBEDDED_CREDENTIALS)  # its own clients and head cache
        start_line.wait()
        for _ in range(20):  # a contended write is retried, as an agent's caller would
            try:
                rows.append(on_research_result(services, result(hits=0)))
                return
            except (BacklogContention, LedgerContention):
                continue
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(rows) == 8 and None not in rows
    assert len({r.request_id for r in rows}) == 1  # every producer got the one open row
    assert Backlog(setup).view().status_distribution["pending"] == 1


def test_a_close_that_loses_its_race_is_counted_and_the_run_goes_on(services: Services) -> None:
    """A row completed by someone else while its agent ran: the consumer logs it and closes the next."""
    flags(services, research_auto_enqueue_enabled=True)
    on_research_result(services, result(trigger_ref="q/a", hits=0))
    on_research_result(services, result(trigger_ref="q/b", hits=0))

    class Overtaken:
        def dispatch(self, row: BacklogRow) -> str | None:
            if row.trigger_ref == "q/a":  # an operator closed it meanwhile, through the admin route
                Backlog(services).complete("user:operator", row.request_id, Completion(error="closed_by_hand"))
            return None

    counts = BacklogConsumer(services, dispatchers={}, default=Overtaken()).run_once()
    assert (counts["pulled"], counts["lost"], counts["completed"]) == (2, 1, 1)


def test_a_stale_guard_naming_an_ended_row_never_blocks_its_trigger(services: Services) -> None:
    """A guard left behind (say, by a store restored from an older backup) is cleared, not obeyed."""
    from flowledger.research.backlog import guard_key
    from flowledger.research.producers import _key

    flags(services, research_auto_enqueue_enabled=True)
    first = on_research_result(services, result(hits=0))
    backlog = Backlog(services)
    pulled = backlog.pull_next("user:consumer")
    assert pulled is not None
    backlog.complete("user:consumer", pulled.request_id, Completion())
    table = services.aws.table_name("backlog")
    stale = {"request_id": {"S": guard_key(_key("research", "user_question", "q/1"))}}
    services.aws.dynamodb.put_item(TableName=table, Item={**stale, "open_request_id": {"S": first.request_id}})  # type: ignore[union-attr]
    fresh = on_research_result(services, result(hits=0))
    assert fresh is not None and fresh.request_id != first.request_id and fresh.status == "pending"  # type: ignore[union-attr]
    guard = services.aws.dynamodb.get_item(TableName=table, Key=stale)["Item"]
    assert guard["open_request_id"]["S"] == fresh.request_id  # the fresh row holds it now
