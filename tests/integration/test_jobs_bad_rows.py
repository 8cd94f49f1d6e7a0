"""Jobs survive bad rows: a row a job cannot process fails alone, with an audited reason code, and the
job goes on to the rows behind it; fed arbitrary stored rows, no job ever raises."""

from __future__ import annotations

import itertools
import json
import subprocess
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from flowledger.config import load_settings
from flowledger.errors import UndecodableItem
from flowledger.jobs import run_job
from flowledger.ledger.events import AuditEvent
from flowledger.local.datadir import EMBEDDED_CREDENTIALS, DataDir
from flowledger.pathways.store import to_pathway
from flowledger.research.backlog import Backlog
from flowledger.research.claims import ClaimTriage
from flowledger.research.loop import BacklogConsumer
from flowledger.research.models import BacklogRow, BacklogStatus, DeeperRequest, Reason
from flowledger.research.producers import CriticVerdict, on_critic_verdict
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all
from tests.e2e.conftest import FLOWLEDGER, clean_env
from tests.hypothesis_profiles import examples
from tests.integration import test_undecodable_items as undecodable
from tests.integration.test_cli import point_at
from tests.integration.test_research_loop import flags
from tests.integration.test_undecodable_items import NOW, put_raw, stale_flow

pathway = undecodable.pathway  # one good pathway's raw item, as a fixture here too

_ids = itertools.count()


def events_of(services: Services, subject: str) -> list[AuditEvent]:
    return services.ledger.subject_page(subject, 50, None, None, None)[0]


def enqueue_rejection(services: Services, claim_id: str) -> BacklogRow:
    """A rejected claim through the critic's producer, as the critic enqueues it."""
    row = on_critic_verdict(services, CriticVerdict(claim_id, "reject", "Unsupported claim", "critic"))
    assert row is not None
    return row


def test_a_claim_rejected_row_whose_ref_is_no_claim_id_fails_alone_and_the_rows_behind_it_are_served(
    services: Services,
) -> None:
    flags(services, critic_auto_enqueue_enabled=True)
    bad = enqueue_rejection(services, "claim/42")  # the critic's own form: not a claim id
    good = enqueue_rejection(services, "c-7")
    counts = BacklogConsumer(services, dispatchers={}).run_once()
    assert (counts["pulled"], counts["failed_invalid"], counts["marked_for_review"]) == (2, 1, 1)
    assert counts["rows_failed"] == 1
    stored = Backlog(services).get(bad.request_id)
    assert stored is not None and (stored.status, stored.failure_reason) == ("failed_voluntary", "invalid_trigger_ref")
    failed = [e for e in events_of(services, f"backlog:{bad.request_id}") if e.action.endswith(".failed_voluntary")]
    assert [e.payload for e in failed] == [{"failed": True, "reason": "invalid_trigger_ref"}]
    assert ClaimTriage(services).get("c-7") is not None  # the row behind it was served in the same run
    served = Backlog(services).get(good.request_id)
    assert served is not None and served.status is BacklogStatus.COMPLETED


def test_jobs_run_from_the_cli_exits_0_and_says_how_many_rows_failed(
    data_dir: DataDir, locked_moto: str, monkeypatch: pytest.MonkeyPatch, clean_environment: None
) -> None:
    point_at(data_dir, locked_moto, "badrows")
    local = build_services(load_settings(aws_endpoint_url=locked_moto, resource_prefix="badrows"), EMBEDDED_CREDENTIALS)
    provision_all(local.aws, local.settings)
    flags(local, critic_auto_enqueue_enabled=True)
    bad = enqueue_rejection(local, "claim/42")
    good = enqueue_rejection(local, "c-8")
    env = {**clean_env(), "BACKLOG_CONSUMER_ENABLED": "true"}
    job = subprocess.run(
        [*FLOWLEDGER, "jobs", "run", "backlog_consumer", "--data-dir", str(data_dir.path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert job.returncode == 0, job.stderr
    assert "Traceback" not in job.stderr
    assert job.stderr.strip().splitlines()[-1].startswith("backlog_consumer: done, 1 row failed")
    assert json.loads(job.stdout)["rows_failed"] == 1
    backlog = Backlog(local)
    assert backlog.get(bad.request_id).status is BacklogStatus.FAILED_VOLUNTARY  # type: ignore[union-attr]
    assert backlog.get(good.request_id).status is BacklogStatus.COMPLETED  # type: ignore[union-attr]


# ---- arbitrary stored rows --------------------------------------------------------------------------

ANY_ATTRIBUTE = st.one_of(
    st.text(max_size=6).map(lambda s: {"S": s}),
    st.sampled_from(["claim/42", "", "x" * 2100, "=1+1", "claim_rejected", "c-1", "no_evidence_hits"]).map(
        lambda s: {"S": s}
    ),
    st.integers(min_value=-3, max_value=10**12).map(lambda n: {"N": str(n)}),
    st.booleans().map(lambda b: {"BOOL": b}),
    st.just({"NULL": True}),
    st.binary(min_size=1, max_size=3).map(lambda b: {"B": b}),
    st.just({"L": [{"S": "a"}]}),
)


def changes_of(names: list[str]) -> st.SearchStrategy[dict[str, dict[str, Any] | None]]:
    """Arbitrary values (None: the attribute removed) for some of the attributes a job reads."""
    return st.dictionaries(st.sampled_from(names), ANY_ATTRIBUTE | st.none(), min_size=1, max_size=3)


# Every attribute a backlog job reads but none it selects rows by (key, status, ticket, strategy):
# the row is always one the job reaches.
BACKLOG_READS = [
    "trigger_type",
    "trigger_ref",
    "reason",
    "question_framing",
    "dispatched_from_backlog",
    "created_by",
    "retry_count",
]  # not status_changed_at either: an index key, whose type DynamoDB enforces (moto does not)
FEW = settings(max_examples=examples(10), suppress_health_check=[HealthCheck.function_scoped_fixture])


def stored(services: Services, table: str, item: dict[str, Any]) -> None:
    """Put ``item`` as it is; an item the store itself refuses (a bad index key) is no stored row: not an example."""
    try:
        put_raw(services, table, item)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ValidationException":
            raise
        reject()


def changed(item: dict[str, Any], changes: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    kept = {k: v for k, v in item.items() if k not in changes}
    return kept | {k: v for k, v in changes.items() if v is not None}


def poison_backlog_row(services: Services, row: BacklogRow, changes: dict[str, dict[str, Any] | None]) -> None:
    """The row, and its ticket's copy of it while it has one, with ``changes`` applied."""
    table = services.aws.table_name("backlog")
    key = {"request_id": {"S": row.request_id}}
    stored(services, "backlog", changed(services.aws.dynamodb.get_item(TableName=table, Key=key)["Item"], changes))
    if row.status is BacklogStatus.PENDING and row.ticket is not None:
        tickets = services.aws.table_name("backlog_tickets")
        slot = services.aws.dynamodb.get_item(TableName=tickets, Key={"ticket": {"N": str(row.ticket)}})["Item"]
        slot["row"] = {"M": changed(slot["row"]["M"], changes)}
        services.aws.dynamodb.put_item(TableName=tickets, Item=slot)


def enqueue_one(services: Services) -> BacklogRow:
    row, _ = Backlog(services).enqueue(
        "system:test",
        DeeperRequest(
            idempotency_key=f"bad-rows-{next(_ids):06d}",
            trigger_type="user_question",
            trigger_ref=f"q/{next(_ids)}",
            reason=Reason.CLAIM_REJECTED,
            question_framing="Why?",
        ),
    )
    return row


def raw_status(services: Services, request_id: str) -> str:
    item = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("backlog"), Key={"request_id": {"S": request_id}}
    )["Item"]
    return str(item["status"]["S"])


class Done:
    def dispatch(self, row: BacklogRow) -> str | None:
        return None


@FEW
@given(changes=changes_of(BACKLOG_READS))
def test_the_consumer_fed_arbitrary_rows_never_raises_and_records_each_row_it_cannot_process(
    services: Services, changes: dict[str, dict[str, Any] | None]
) -> None:
    row = enqueue_one(services)
    poison_backlog_row(services, row, changes)
    counts = BacklogConsumer(services, dispatchers={}, default=Done()).run_once()
    events = {e.action: e.payload for e in events_of(services, f"backlog:{row.request_id}")}
    status = raw_status(services, row.request_id)
    if status == "failed_voluntary":
        assert events["reasoning.research.backlog.failed_voluntary"]["reason"], events
    else:  # served, or passed over because it no longer reads as a row: then that is recorded
        assert status in ("completed", "pending"), (status, events)
    if status == "pending":
        assert events["memory.job.backlog_pull.row_failed"] == {"reason": "undecodable"}, events
    assert counts["lost"] == 0


@FEW
@given(changes=changes_of(BACKLOG_READS))
def test_the_stale_sweep_fed_arbitrary_rows_never_raises_and_records_each_row_it_cannot_move(
    services: Services, changes: dict[str, dict[str, Any] | None]
) -> None:
    services.clock = lambda: NOW
    backlog = Backlog(services)
    enqueue_one(services)
    pulled = backlog.pull_next("user:consumer")
    assert pulled is not None
    poison_backlog_row(services, pulled, changes)
    services.clock = lambda: NOW + timedelta(hours=1)
    result = run_job("backlog_stale_sweep", services)
    events = {e.action: e.payload for e in events_of(services, f"backlog:{pulled.request_id}")}
    status = raw_status(services, pulled.request_id)
    if status == "dispatched":  # not moved: the sweep says why
        assert "memory.job.backlog_stale_sweep.row_failed" in events, events
    else:
        assert status in ("pending", "failed_after_retries"), status
    assert result["rows_failed"] >= ("memory.job.backlog_stale_sweep.row_failed" in events)


PATHWAY_READS = [
    "trigger_ref",
    "trigger_summary",
    "hit_count",
    "last_hit_at",
    "created_at",
    "embedding_model",
    "embedding",
    "step_kinds",
    "seed_dimensions",
]


@FEW
@given(changes=changes_of(PATHWAY_READS))
def test_the_pathway_jobs_fed_arbitrary_rows_never_raise_and_record_each_row_they_cannot_read(
    services: Services, pathway: dict[str, Any], changes: dict[str, dict[str, Any] | None]
) -> None:
    pathway_id = f"pw_{next(_ids):026d}"
    item = changed({**pathway, "pathway_id": {"S": pathway_id}}, changes)
    stored(services, "pathways", item)
    try:
        to_pathway(item)
        readable = True
    except UndecodableItem:
        readable = False
    for job in ("pathway_embedding_backfill", "pathway_decay"):
        result = run_job(job, services)
        recorded = {e.action for e in events_of(services, f"pathway:{pathway_id}")}
        assert readable or f"memory.job.{job}.row_failed" in recorded, (job, recorded)
        assert result["rows_failed"] >= (not readable)


# Not created_at: it selects the flows the job reads (a flow without it is never reached).
FLOW_READS = ["created_by", "trigger_type", "trigger_ref", "trigger_summary", "step_count", "patient_id", "flow_state"]


@FEW
@given(changes=changes_of(FLOW_READS))
def test_flow_decay_fed_arbitrary_flows_never_raises_and_records_each_flow_it_cannot_close(
    services: Services, changes: dict[str, dict[str, Any] | None]
) -> None:
    flow_id = stale_flow(services, "A question")
    table = services.aws.table_name("flows")
    key = {"flow_id": {"S": flow_id}}
    stored(services, "flows", changed(services.aws.dynamodb.get_item(TableName=table, Key=key)["Item"], changes))
    services.clock = lambda: NOW
    run_job("flow_decay", services)
    state = services.aws.dynamodb.get_item(TableName=table, Key=key)["Item"].get("flow_state")
    recorded = {e.action for e in events_of(services, f"flow:{flow_id}")}
    if state != {"S": "aborted"}:  # not closed: closed meanwhile (not active), or recorded
        assert "memory.job.flow_decay.row_failed" in recorded or state != {"S": "active"}, (state, recorded)
