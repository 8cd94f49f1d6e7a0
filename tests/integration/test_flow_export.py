"""The flow export on moto: flows written through FlowService (so the guard and the audit run), closed, then
read back through the by_closed index as raw records and as DPO pairs."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowledger.identity import Principal
from flowledger.pathways.jobs import decay_job
from flowledger.pathways.library import PathwayLibrary
from flowledger.pathways.store import pathway_id_for
from flowledger.reasoning.dataset import HIDDEN_SUMMARY, FlowRecord, read_records
from flowledger.reasoning.export import ClosedFlowReader, ExportWindow, closed_flow_records
from flowledger.reasoning.flow_lint import lint_records
from flowledger.reasoning.models import FlowClose, FlowStart, Outcome, StepCreate
from flowledger.reasoning.preference import PreferencePairs
from flowledger.reasoning.service import FlowService, _active_shard
from flowledger.services import Services
from flowledger.store.provision import create_table, provision_all
from flowledger.store.tables import table_spec

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
WRITER = Principal(kind="user", id="agent-export", scopes=frozenset({"reasoning.write"}))
OPERATOR = "arn:aws:sts::123456789012:assumed-role/operator/export"
# Markers that must never reach an export file.
PATIENT = "pt-MARKER-7731"
TRIGGER_SUMMARY = "Trigger summary MARKER that stays in the store"
SECRET_INPUT = "input MARKER q1"
SECRET_OUTPUT = "output MARKER a1"
UNSAFE_SUMMARY = "Reviewed metformin 500mg for the patient"


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Recorder:
    """Flows through the real FlowService, each closed at a time the test picks."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.now = T0
        services.clock = lambda: self.now
        self.service = FlowService(services)

    def flow(
        self,
        closed_at: datetime,
        *,
        trigger_type: str = "user_question",
        state: str = "completed",
        outcome: str = "recommendation_delivered",
        confidence: float | None = 0.95,
        summaries: tuple[str, ...] = ("Retrieved four passages", "Asked the model", "Gave a verdict"),
        kinds: tuple[str, ...] = ("retrieval", "llm_prompt", "verdict"),
        close: bool = True,
    ) -> str:
        self.now = closed_at - timedelta(seconds=10)
        flow = self.service.start_flow(
            WRITER,
            FlowStart(
                trigger_type=trigger_type,
                trigger_ref="question/export-test",
                trigger_summary=TRIGGER_SUMMARY,
                patient_id=PATIENT,
                trace_id="tr-export-1",
            ),
        )
        parent: list[str] = []
        for n, (kind, summary) in enumerate(zip(kinds, summaries, strict=True)):
            self.now += timedelta(seconds=1)
            step = self.service.add_step(
                WRITER,
                flow.flow_id,
                StepCreate(
                    step_kind=kind,
                    agent="researcher",
                    summary_text=summary,
                    inputs={"question": SECRET_INPUT, "n": n},
                    outputs={"answer": SECRET_OUTPUT},
                    pii_fields={"inputs": ["question"]},
                    confidence=confidence,
                    latency_ms=40,
                    back_refs={"llm_call_log_ref": "llm-1"} if kind == "llm_prompt" else {},
                    parent_step_ids=parent,
                ),
            )
            parent = [step.step_id]
        if close:
            self.now = closed_at
            self.service.close_flow(
                WRITER,
                flow.flow_id,
                FlowClose(
                    state=state,
                    reason="gave_up" if state == "aborted" else None,
                    outcome=Outcome(type=outcome, summary="Recommended an answer", confidence=confidence),
                ),
            )
        return flow.flow_id


@pytest.fixture
def recorder(services: Services) -> Recorder:
    return Recorder(services)


def ids(records: list[FlowRecord]) -> list[str]:
    return [r.flow.flow_id for r in records]


def jsonl(records: list[FlowRecord]) -> bytes:
    return b"".join(r.model_dump_json(exclude_none=True).encode() + b"\n" for r in records)


def test_a_window_is_its_closed_flows_in_close_order_across_shards(recorder: Recorder, services: Services) -> None:
    closes = [T0 + timedelta(minutes=m) for m in (7, 1, 12, 3, 9, 5, 11, 2, 8, 4, 10, 6)]
    flow_at = {recorder.flow(at): at for at in closes}
    recorder.flow(T0 + timedelta(minutes=5, seconds=30), close=False)  # still active: never exported
    since, until = T0 + timedelta(minutes=2), T0 + timedelta(minutes=11)

    window = ExportWindow(since=stamp(since), until=stamp(until))
    records = list(closed_flow_records(services, window))

    # since is inclusive and until exclusive: the flows closed at minute 2 .. 10
    expected = sorted((at, f) for f, at in flow_at.items() if since <= at < until)
    assert ids(records) == [f for _, f in expected]
    assert len({_active_shard(f) for f in ids(records)}) > 1  # the merge really interleaved several shards
    assert [r.flow.closed_at for r in records] == sorted(r.flow.closed_at for r in records)
    everything = list(closed_flow_records(services, ExportWindow()))
    assert ids(everything) == [f for _, f in sorted((at, f) for f, at in flow_at.items())]


def test_records_hold_no_inputs_outputs_trigger_summary_or_patient_and_hide_flagged_summaries(
    recorder: Recorder, services: Services
) -> None:
    flagged = recorder.flow(T0, summaries=("Retrieved four passages", UNSAFE_SUMMARY, "Gave a verdict"))
    clean = recorder.flow(T0 + timedelta(minutes=1))

    records = list(closed_flow_records(services, ExportWindow()))
    data = jsonl(records)

    for marker in (PATIENT, TRIGGER_SUMMARY, SECRET_INPUT, SECRET_OUTPUT, "metformin", "llm-1", "inputs", "outputs"):
        assert marker.encode() not in data, marker
    by_id = {r.flow.flow_id: r for r in records}
    hidden = by_id[flagged].steps[1]
    assert (hidden.summary_hidden, hidden.summary_text) == (True, HIDDEN_SUMMARY)
    assert by_id[flagged].flow.patient_safe_summary is False
    assert [s.summary_text for s in by_id[clean].steps] == [
        "Retrieved four passages",
        "Asked the model",
        "Gave a verdict",
    ]
    assert [s.back_refs.llm_call_log_ref for s in by_id[clean].steps] == [False, True, False]
    assert by_id[clean].flow.agents == ["researcher"] and by_id[clean].flow.aggregate_confidence == 0.95
    # The file reads back as records and passes the shape lint.
    parsed = [record for _, record in read_records(io.BytesIO(data))]
    assert ids(parsed) == ids(records)
    report = lint_records(read_records(io.BytesIO(data)))
    assert report.critical == 0 and report.verdict != "FAIL"


def test_outcome_min_confidence_and_limit(recorder: Recorder, services: Services) -> None:
    high = recorder.flow(T0, confidence=0.95)
    low = recorder.flow(T0 + timedelta(minutes=1), confidence=0.4)
    aborted = recorder.flow(T0 + timedelta(minutes=2), state="aborted", outcome="error", confidence=None)
    none = recorder.flow(T0 + timedelta(minutes=3), outcome="no_action", confidence=None)

    def export(**window: Any) -> list[str]:
        return ids(list(closed_flow_records(services, ExportWindow(**window))))

    assert export(outcome="aborted") == [aborted]
    assert export(outcome="error") == [aborted]
    assert export(outcome="completed") == [high, low, none]
    assert export(outcome="recommendation_delivered") == [high, low]
    assert export(min_confidence=0.9) == [high]  # no confidence at all is below any minimum
    assert export(min_confidence=0.0) == [high, low]
    assert export(limit=2) == [high, low]
    reader = ClosedFlowReader(services, ExportWindow(limit=3))
    assert len(list(reader.records())) == 3 and reader.limit_reached
    whole = ClosedFlowReader(services, ExportWindow(limit=4))
    assert len(list(whole.records())) == 4 and not whole.limit_reached


def test_the_step_query_never_fetches_inputs_or_outputs_but_a_tools_name(
    recorder: Recorder, services: Services
) -> None:
    recorder.flow(T0)
    requests: list[dict[str, Any]] = []
    services.aws.dynamodb.meta.events.register(
        "provide-client-params.dynamodb.Query", lambda params, **_: requests.append(dict(params))
    )
    assert len(list(closed_flow_records(services, ExportWindow()))) == 1
    index = [r for r in requests if r.get("IndexName") == "by_closed"]
    steps = [r for r in requests if r["TableName"] == services.aws.table_name("steps")]
    assert len(index) == 16  # one query per shard, no scan
    assert len(steps) == 1
    names = steps[0]["ExpressionAttributeNames"]
    paths = {
        ".".join(names[part] for part in path.strip().split("."))
        for path in steps[0]["ProjectionExpression"].split(",")
    }
    assert not {path.split(".")[0] for path in paths} & {"outputs", "pii_fields"}
    # of the inputs, only where a step names its tool in the clear: never a content
    assert {path for path in paths if path.startswith("inputs")} == {"inputs.tool", "inputs.otel.tool"}
    assert not any(r["TableName"] == services.aws.table_name("flows") and "IndexName" not in r for r in requests)


def test_the_index_holds_no_trigger_summary_or_patient_id(recorder: Recorder, services: Services) -> None:
    flow_id = recorder.flow(T0)
    (item,) = services.aws.dynamodb.query(
        TableName=services.aws.table_name("flows"),
        IndexName="by_closed",
        KeyConditionExpression="closed_shard = :s",
        ExpressionAttributeValues={":s": {"S": _active_shard(flow_id)}},
    )["Items"]
    assert "trigger_summary" not in item and "patient_id" not in item and "dimensions_snapshot" not in item
    assert {"trigger_type", "outcome", "step_count", "patient_safe_summary"} <= set(item)


def test_an_older_store_gets_the_index_and_exports_flows_closed_since(services: Services) -> None:
    """A data dir saved before by_closed existed: provisioning adds the index, and the export reads it."""
    client = services.aws.dynamodb
    client.delete_table(TableName=services.aws.table_name("flows"))
    flows = table_spec("flows")
    create_table(services.aws, replace(flows, indexes=tuple(i for i in flows.indexes if i.name != "by_closed")))
    provision_all(services.aws, services.settings)
    described = client.describe_table(TableName=services.aws.table_name("flows"))["Table"]
    assert "by_closed" in {i["IndexName"] for i in described["GlobalSecondaryIndexes"]}
    flow_id = Recorder(services).flow(T0)
    assert ids(list(closed_flow_records(services, ExportWindow()))) == [flow_id]


@pytest.fixture
def paired(recorder: Recorder, services: Services) -> dict[str, str]:
    """Flows of two families with opposite outcomes: reused vs. demoted pathway and aborted, accepted vs. rejected."""
    names = {
        "reused": recorder.flow(T0),
        "demoted": recorder.flow(T0 + timedelta(minutes=1)),
        "aborted": recorder.flow(T0 + timedelta(minutes=2), state="aborted", outcome="error", confidence=None),
        "plain": recorder.flow(T0 + timedelta(minutes=3), confidence=0.5),  # seeds no pathway: unlabelled
        # As the critic records them: no confidence anywhere.
        "accepted": recorder.flow(
            T0 + timedelta(minutes=4), trigger_type="claim_review", outcome="claim_created", confidence=None
        ),
        "rejected": recorder.flow(
            T0 + timedelta(minutes=5), trigger_type="claim_review", outcome="no_action", confidence=None
        ),
    }
    library = PathwayLibrary(services)
    library.hit(OPERATOR, pathway_id_for(names["reused"]))
    recorder.now = T0 + timedelta(days=31)  # the unreused pathway goes cold and is demoted
    decay_job(services)
    demoted = library.store.get(pathway_id_for(names["demoted"]))
    assert demoted is not None and demoted[0].demoted_at is not None
    return names


def dpo_rows(services: Services, window: ExportWindow | None = None) -> tuple[PreferencePairs, list[dict[str, Any]]]:
    pairer = PreferencePairs(services)
    pairer.add_all(closed_flow_records(services, window or ExportWindow()))
    return pairer, [json.loads(pair.model_dump_json()) for pair in pairer.pairs()]


def test_dpo_pairs_follow_the_pairing_rule(paired: dict[str, str], services: Services) -> None:
    pairer, rows = dpo_rows(services)

    picked = {
        (r["metadata"]["family"], r["metadata"]["chosen_flow_id"], r["metadata"]["rejected_flow_id"]) for r in rows
    }
    # user_question: one chosen (reused) against the earlier-closed of demoted and aborted; claim_review: one pair
    assert picked == {
        ("user_question", paired["reused"], paired["demoted"]),
        ("claim_review", paired["accepted"], paired["rejected"]),
    }
    by_family = {r["metadata"]["family"]: r for r in rows}
    reuse = by_family["user_question"]["metadata"]
    assert (reuse["rule"], reuse["chosen_label"], reuse["rejected_label"]) == (
        "pathway_reuse",
        "pathway_reused",
        "pathway_demoted",
    )
    assert (reuse["chosen_hit_count"], reuse["rejected_hit_count"]) == (1, 0)
    claims = by_family["claim_review"]["metadata"]
    assert (claims["chosen_label"], claims["rejected_label"], claims["chosen_hit_count"]) == (
        "claim_accepted",
        "claim_rejected",
        -1,
    )
    assert (pairer.counts.flows, pairer.counts.chosen, pairer.counts.rejected, pairer.counts.unlabelled) == (6, 2, 3, 1)
    for row in rows:
        assert row["prompt"][-1] == {"role": "user", "content": f"Trigger type: {row['metadata']['family']}"}
        text = json.dumps(row)
        for marker in (PATIENT, TRIGGER_SUMMARY, SECRET_INPUT, SECRET_OUTPUT, "question/export-test"):
            assert marker not in text, marker
    assert "1. retrieval by researcher: Retrieved four passages" in by_family["user_question"]["chosen"][0]["content"]


def test_the_dpo_file_loads_with_datasets_with_one_type_per_column(
    paired: dict[str, str], services: Services, tmp_path: Path
) -> None:
    datasets = pytest.importorskip("datasets")
    _, rows = dpo_rows(services)
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    loaded = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))

    assert loaded.num_rows == 2
    assert set(loaded.column_names) == {"prompt", "chosen", "rejected", "metadata"}
    features = loaded.features
    for column in ("prompt", "chosen", "rejected"):
        message = features[column][0] if isinstance(features[column], list) else features[column].feature
        assert {name: feature.dtype for name, feature in message.items()} == {"role": "string", "content": "string"}
    types = {name: feature.dtype for name, feature in features["metadata"].items()}
    assert types["chosen_confidence"] == types["rejected_confidence"] == "float64"
    assert types["chosen_hit_count"] == types["rejected_hit_count"] == types["chosen_steps"] == "int64"
    assert types["family"] == types["chosen_outcome"] == types["chosen_closed_at"] == "string"
    confidences = sorted(loaded["metadata"][i]["chosen_confidence"] for i in range(2))
    assert confidences == [-1.0, 0.95]  # a flow without confidence is -1.0, not null


def test_the_dpo_window_is_the_raw_window(paired: dict[str, str], services: Services) -> None:
    window = ExportWindow(until=stamp(T0 + timedelta(minutes=4)))  # the claim checks closed later
    _, rows = dpo_rows(services, window)
    assert [r["metadata"]["family"] for r in rows] == ["user_question"]


def test_many_candidates_stay_bounded_per_family(recorder: Recorder, services: Services, monkeypatch: Any) -> None:
    monkeypatch.setattr("flowledger.reasoning.preference.RESERVOIR", 2)
    for m in range(5):
        recorder.flow(T0 + timedelta(minutes=m), trigger_type="claim_review", outcome="claim_created")
        recorder.flow(T0 + timedelta(minutes=m, seconds=30), trigger_type="claim_review", outcome="no_action")
    pairer, rows = dpo_rows(services)
    assert (pairer.counts.chosen, pairer.counts.rejected, len(rows)) == (5, 5, 2)
    used = [r["metadata"]["chosen_flow_id"] for r in rows] + [r["metadata"]["rejected_flow_id"] for r in rows]
    assert len(set(used)) == 4  # no flow in two pairs


def test_lookahead_keeps_the_merge_order_and_runs_only_a_few_flows_ahead(
    recorder: Recorder, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [recorder.flow(T0 + timedelta(minutes=m)) for m in range(12)]
    reader = ClosedFlowReader(services, ExportWindow(), lookahead=3)
    asked: list[str] = []
    real = reader._step_items

    def counted(flow: dict[str, Any]) -> list[dict[str, Any]]:
        asked.append(flow["flow_id"])
        return real(flow)

    monkeypatch.setattr(reader, "_step_items", counted)
    records = reader.records()
    first = next(records)
    assert first.flow.flow_id == made[0]
    assert reader.read <= 3 and len(asked) <= 3  # the first record came out with at most 3 flows read ahead
    assert [first.flow.flow_id, *ids(list(records))] == made
    assert sorted(asked) == sorted(made)  # each flow's steps asked for once
