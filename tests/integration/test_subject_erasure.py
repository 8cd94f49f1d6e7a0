"""Erasing a patient through the subjects and reasoning functions on moto: what the patient's flows held is
gone from every table, their key with it, every route about them answers 410, another patient is untouched,
the ledger and an evidence bundle made before still verify, a crash at any step is finished by a retry, and
a legal hold stops it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from flowledger.errors import LegalHold
from flowledger.identity import Principal
from flowledger.ledger.audit import checkpoints_of, export_bundle, take_checkpoint, verify_ledger
from flowledger.pathways.snapshot import SnapshotRows, SnapshotStore
from flowledger.pathways.store import pathway_id_for
from flowledger.reasoning.export import ClosedFlowReader, ExportWindow
from flowledger.services import Services
from flowledger.store.object_versions import object_versions
from flowledger.store.tables import TABLES
from flowledger.subjects import subject_id_of
from flowledger.subjects.erasure import SubjectErasure
from flowledger.subjects.holdings import subject_view
from tests.bundle_verifier import verifier
from tests.integration.test_reasoning_routes import (
    ADMIN,
    OTHER_PATIENT,
    PATIENT,
    WRITER,
    Call,
    add_step,
    close,
    open_flow,
)
from tests.integration.test_reasoning_routes import call as call  # the fixture

OFFICER = "arn:aws:sts::123456789012:assumed-role/erasure-officer/kim"
ANN_CANARY, BOB_CANARY = "canary-ann-7f3a9c", "canary-bob-51d2e0"
STEPS_EACH = 2


@pytest.fixture
def admin_call(load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Call:
    handler = load_function("subjects").handler

    def invoke(method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
        response = handler(rest_event(method, path, body=body, user_arn=OFFICER), lambda_context)
        text = response.get("body") or "null"
        return response["statusCode"], json.loads(text), response.get("headers") or {}

    return invoke


def patient_flow(call: Call, patient: dict[str, str], canary: str) -> tuple[str, str]:
    """A closed flow of the patient with a sealed field holding ``canary``: its id and its first step's."""
    flow_id = open_flow(call, patient_id=patient["patient_id"])
    first = ""
    for n in range(STEPS_EACH):
        status, step = add_step(
            call, flow_id, inputs={"query": f"{canary} {n}", "k": n}, pii_fields={"inputs": ["query"]}
        )
        assert status == 201, step
        first = first or step["step_id"]
    assert close(call, flow_id)[0] == 200
    return flow_id, first


def everything(services: Services) -> str:
    """Every item of every table, as one text to search."""
    db = services.aws.dynamodb
    return json.dumps([db.scan(TableName=services.aws.table_name(spec.name))["Items"] for spec in TABLES], default=str)


def sealed(call: Call, flow_id: str, step_id: str) -> tuple[int, Any]:
    path = f"/admin/v1/reasoning/flows/{flow_id}/steps/{step_id}/sealed"
    status, body, _ = call("GET", path, user_arn=ADMIN, side="inputs", field="query")
    return status, body


def test_an_erased_patient_is_gone_everywhere_and_every_proof_still_verifies(
    call: Call, admin_call: Call, services: Services
) -> None:
    ann = [patient_flow(call, PATIENT, ANN_CANARY) for _ in range(2)]
    bob_flow, bob_step = patient_flow(call, OTHER_PATIENT, BOB_CANARY)
    assert call("PUT", "/api/reasoning/consent", {"reasoning_read": True}, PATIENT)[0] == 200
    assert call("GET", "/api/reasoning/flows", None, PATIENT)[0] == 200
    status, held, _ = admin_call("GET", "/admin/v1/subjects/p-ann")
    assert status == 200, held
    assert held["state"] == "held" and held["pseudonym"].startswith("ps_")
    assert {c["data_class"]: c["items"] for c in held["classes"]} == {"flows": 2, "consents": 1}
    # The fields are sealed under Ann's own key, and the ledger names her by pseudonym only.
    assert ANN_CANARY not in everything(services)
    ledger = services.ledger
    before = [e for c in ledger.chain_ids() for e in ledger.read_chain(c)]
    assert "p-ann" not in json.dumps([e.model_dump(mode="json") for e in before])
    store = checkpoints_of(services)
    take_checkpoint(ledger, store, services)
    earlier_bundle = export_bundle(services, f"flow:{ann[0][0]}").bundle.to_bytes()

    # A snapshot of the family's pathways, as the backfill job publishes one: it names Ann's flows' pathways.
    snapshots = SnapshotStore.of(services)
    ann_pathways = [pathway_id_for(flow_id) for flow_id, _ in ann]
    rows = SnapshotRows("minilm", "user_question", ann_pathways, ["chat/run-1"] * 2, [1, 1], ["x", "x"], [None, None])
    snapshots.publish(rows, "v1", "2027-01-01T00:00:00.000000Z")
    status, receipt, _ = admin_call("POST", "/admin/v1/subjects/p-ann/erasure", {"reason": "gdpr_art17_request"})
    assert status == 200, receipt
    # The pathways Ann's flows seeded are dropped, and every snapshot of their family with them.
    assert object_versions(services.aws.s3, snapshots.bucket, "pathways/snapshots/") == []
    assert receipt["phase"] == "completed" and receipt["final_after"] > receipt["completed_at"]
    assert receipt["counts"] == {
        "flows": 2,
        "steps": 2 * STEPS_EACH,
        "waiting_spans": 0,
        "pathways": 2,  # each closed flow seeded a pathway
        "snapshot_objects": 2,  # the snapshot and its pointer
        "sessions": 0,
        "session_items": 0,
        "documents": 0,
        "document_items": 0,
        "objects": 0,
        "chunks": 0,
        "consents": 1,
        "rate_limits": 1,
    }
    # Nothing names or holds Ann: not her id, not her canary, not her key; Bob's data is all there.
    stored = everything(services)
    assert "p-ann" not in stored and ANN_CANARY not in stored and "sbj_" in stored
    assert "p-bob" in stored
    assert sealed(call, bob_flow, bob_step) == (
        200,
        {**sealed(call, bob_flow, bob_step)[1], "value": f"{BOB_CANARY} 0"},
    )
    # Every route about Ann answers 410 erased.
    flow_id, step_id = ann[0]
    assert sealed(call, flow_id, step_id)[0] == 410
    assert call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN)[:2][0] == 410
    for method, path, body in (
        ("GET", f"/api/reasoning/flows/{flow_id}", None),
        ("GET", "/api/reasoning/flows", None),
        ("GET", "/api/reasoning/consent", None),
        ("PUT", "/api/reasoning/consent", {"reasoning_read": True}),
    ):
        status, answer, _ = call(method, path, body, PATIENT)
        assert (status, answer["error"]) == (410, "erased"), path
    new_flow = {"trigger_type": "user_question", "trigger_ref": "chat/run-9", "trigger_summary": "A new question"}
    new_flow["patient_id"] = "p-ann"
    status, answer, _ = call("POST", "/api/reasoning/flows", new_flow, WRITER)
    assert (status, answer["error"]) == (410, "erased")
    assert "p-ann" not in everything(services)  # and the refused requests wrote nothing about her
    status, after, _ = admin_call("GET", "/admin/v1/subjects/p-ann")
    assert (after["state"], after["classes"], after["pseudonym"]) == ("erased", [], None)
    # The ledger verifies, the bundle made before still does, and the flow's new bundle carries its tombstone.
    take_checkpoint(ledger, store, services)
    assert verify_ledger(ledger, store).ok
    log_key = verifier.Key(services.checkpoint_signer.verifier.vkey())
    assert verifier.verify(earlier_bundle, log_key, [], 0)[0].startswith("bundle OK")
    later = export_bundle(services, f"flow:{flow_id}").bundle
    report = verifier.verify(later.to_bytes(), log_key, [], 0)
    assert report[0].startswith("bundle OK"), report
    assert "admin.subject.flow_erased" in [e.action for e in later.events]
    # An export of the window meets the tombstones: no record of Ann's flows, and says how many were erased.
    reader = ClosedFlowReader(services, ExportWindow())
    assert [record.flow.flow_id for record in reader.records()] == [bob_flow]
    assert reader.erased == 2 and reader.skipped == 0
    # A retry answers the same receipt and writes nothing.
    count = sum(1 for c in ledger.chain_ids() for _ in ledger.read_chain(c))
    status, again, _ = admin_call("POST", "/admin/v1/subjects/p-ann/erasure", {"reason": "gdpr_art17_request"})
    assert (status, again) == (200, receipt)
    assert sum(1 for c in ledger.chain_ids() for _ in ledger.read_chain(c)) == count


CRASH_POINTS = [
    *("begun", "key", "document", "uploads", "flow_fenced", "flow_contents", "flow", "flows"),
    *("session", "conversations", "consents", "receipt"),
]


def chat_and_upload(services: Services) -> None:
    """Ann's chat session and her upload to it, as the chat and documents functions write them."""
    import base64

    from flowledger.chat.runs import RunStore
    from flowledger.workspaces.documents import DocumentService
    from flowledger.workspaces.models import DocumentCreate

    session = "ses_01JD0000000000000000000077"
    RunStore(services).create(
        session, "run_1", "u-ann", f"{ANN_CANARY} asked", "offline", True, subject_id=subject_id_of("p-ann")
    )
    patient = Principal(kind="user", id="u-ann", scopes=frozenset({"documents"}), patient_id="p-ann")
    content = base64.b64encode(f"notes {ANN_CANARY}".encode()).decode()
    body = DocumentCreate(session_id=session, file_name="notes.txt", kind="text", content_base64=content)
    DocumentService(services).create(patient, body)


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_a_crash_at_any_step_is_finished_by_a_retry(call: Call, services: Services, crash_at: str) -> None:
    flows = [patient_flow(call, PATIENT, ANN_CANARY) for _ in range(2)]
    chat_and_upload(services)
    officer = Principal(kind="iam", id=OFFICER)

    class Crash(Exception):
        pass

    def crash(point: str) -> None:
        if point == crash_at:
            raise Crash(point)

    with pytest.raises(Crash):
        SubjectErasure(services, after=crash).erase(officer, "p-ann", "gdpr_art17_request")
    if crash_at != "begun":
        # However far it got, the key went first: nothing of Ann opens any more.
        assert sealed(call, *flows[1])[0] == 410
    view = SubjectErasure(services).erase(officer, "p-ann", "gdpr_art17_request")
    assert view.phase == "completed"
    assert (view.counts["flows"], view.counts["steps"]) == (2, 2 * STEPS_EACH)
    assert (view.counts["sessions"], view.counts["documents"]) == (1, 1)
    stored = everything(services)
    assert "p-ann" not in stored and ANN_CANARY not in stored
    assert object_versions(services.aws.s3, services.aws.bucket_name("documents"), "") == []
    assert verify_ledger(services.ledger, checkpoints_of(services)).ok


def test_a_legal_hold_stops_erasure_until_it_is_lifted(call: Call, admin_call: Call, services: Services) -> None:
    patient_flow(call, PATIENT, ANN_CANARY)
    hold = {"reason": "Litigation hold: claim 2026-114"}
    status, placed, _ = admin_call("PUT", "/admin/v1/subjects/p-ann/hold", hold)
    assert (status, placed["placed_by"]) == (200, OFFICER)
    status, refused, _ = admin_call("POST", "/admin/v1/subjects/p-ann/erasure", {"reason": "gdpr_art17_request"})
    assert (status, refused["error"]) == (409, "legal_hold")
    assert "claim 2026-114" in refused["message"]
    assert admin_call("GET", "/admin/v1/subjects/p-ann")[1]["state"] == "held"
    assert admin_call("DELETE", "/admin/v1/subjects/p-ann/hold")[0] == 200
    assert admin_call("DELETE", "/admin/v1/subjects/p-ann/hold")[0] == 404
    assert admin_call("POST", "/admin/v1/subjects/p-ann/erasure", {"reason": "gdpr_art17_request"})[0] == 200
    # Once erasure has begun no hold can stop it.
    status, late, _ = admin_call("PUT", "/admin/v1/subjects/p-ann/hold", hold)
    assert (status, late["error"]) == (409, "conflict")
    assert "2026-114" not in json.dumps(
        [e.model_dump(mode="json") for c in services.ledger.chain_ids() for e in services.ledger.read_chain(c)]
    )


def test_an_erasure_out_of_time_answers_202_and_the_next_request_finishes_it(
    call: Call, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    patient_flow(call, PATIENT, ANN_CANARY)
    officer = Principal(kind="iam", id=OFFICER)
    running = SubjectErasure(services).erase(officer, "p-ann", "gdpr_art17_request", deadline=0.0)
    assert running.phase == "flows" and running.counts["flows"] == 0
    done = SubjectErasure(services).erase(officer, "p-ann", "another_reason_ignored")
    assert (done.phase, done.reason, done.erasure_id) == ("completed", "gdpr_art17_request", running.erasure_id)
    with pytest.raises(LegalHold):
        SubjectErasure(services).erase(officer, "p-none", "x") if _hold(services, "p-none") else None


def _hold(services: Services, patient_id: str) -> bool:
    from flowledger.subjects.holds import LegalHolds

    LegalHolds(services).place(Principal(kind="iam", id=OFFICER), patient_id, "audit")
    return subject_id_of(patient_id).startswith("sbj_")


@pytest.mark.anyio
async def test_a_patients_chat_sessions_are_erased_with_them(services: Services) -> None:
    from flowledger.api.chat_app import create_app
    from tests.integration.test_chat_sessions_list import client, turn

    app = create_app(lambda: services)
    async with client(app, "u-ann") as ann, client(app, "u-bob") as bob:
        ann.headers["x-amzn-request-context"] = json.dumps(
            {"authorizer": {"sub": "u-ann", "scope": "chat", "patient_id": "p-ann"}}
        )
        session = await turn(ann, f"What does {ANN_CANARY} mean for my dose?")
        await turn(ann, f"And {ANN_CANARY} tomorrow?", session)
        await turn(bob, f"What does {BOB_CANARY} mean?")
        # Ann's words are sealed under her key (Bob is no patient: his are not), and read back to her.
        assert ANN_CANARY not in everything(services) and BOB_CANARY in everything(services)
        runs = (await ann.get(f"/api/chat/sessions/{session}/runs")).json()["runs"]
        assert [run["query"] for run in runs] == [
            f"And {ANN_CANARY} tomorrow?",
            f"What does {ANN_CANARY} mean for my dose?",
        ]
        sessions = (await ann.get("/api/chat/sessions")).json()["sessions"]
        assert [s["title"] for s in sessions] == [f"What does {ANN_CANARY} mean for my dose?"]
        held = {c.data_class: c.items for c in subject_view(services, "p-ann").classes}
        assert held == {"conversations": 1}  # what is held about her, by class
        view = SubjectErasure(services).erase(Principal(kind="iam", id=OFFICER), "p-ann", "gdpr_art17_request")
        assert (view.counts["sessions"], view.counts["session_items"]) == (1, 3)  # the header and two runs
        stored = everything(services)
        assert ANN_CANARY not in stored and BOB_CANARY in stored
        refused = await ann.post("/api/chat", json={"query": "hello again"}, headers={"accept": "application/json"})
        assert (refused.status_code, refused.json()["error"]) == (410, "erased")
        assert ANN_CANARY not in everything(services) and "hello again" not in everything(services)


def test_retention_erases_a_patients_old_flows_and_a_hold_keeps_them(services: Services) -> None:
    from datetime import UTC, datetime, timedelta

    from flowledger.reasoning.models import FlowStart
    from flowledger.reasoning.service import FlowService
    from flowledger.subjects.holds import LegalHolds
    from flowledger.subjects.retention import RetentionPolicy, retention_job

    now = datetime(2027, 3, 1, tzinfo=UTC)
    writer = Principal(kind="user", id="agent-researcher", scopes=frozenset({"reasoning.write"}))

    def flow(patient_id: str, days_old: int) -> str:
        services.clock = lambda: now - timedelta(days=days_old)
        start = FlowStart(
            trigger_type="user_question", trigger_ref="chat/run-1", trigger_summary="A question", patient_id=patient_id
        )
        return FlowService(services).start_flow(writer, start).flow_id

    old_ann, new_ann, old_bob, old_cara = flow("p-ann", 40), flow("p-ann", 5), flow("p-bob", 40), flow("p-cara", 40)
    services.clock = lambda: now
    LegalHolds(services).place(Principal(kind="iam", id=OFFICER), "p-bob", "Litigation hold")
    assert retention_job(services) == {"retention": "off"}  # the default keeps everything
    services.settings = services.settings.model_copy(update={"retention_flows_days": 30})
    assert RetentionPolicy.of(services).flows_days == 30
    result = retention_job(services)
    assert (result["flows"], result["held"], result["failed"]) == (2, 1, 0)
    flows = services.aws.dynamodb
    state = {
        flow_id: flows.get_item(TableName=services.aws.table_name("flows"), Key={"flow_id": {"S": flow_id}})["Item"][
            "flow_state"
        ]["S"]
        for flow_id in (old_ann, new_ann, old_bob, old_cara)
    }
    assert state == {old_ann: "erased", new_ann: "active", old_bob: "active", old_cara: "erased"}
    # Retention erases items, not the subject: Ann keeps her key and may have new flows.
    assert SubjectErasure(services).status("p-ann") is None
    assert retention_job(services)["flows"] == 0  # nothing more is due


def test_the_cli_checks_patient_ids_as_the_routes_do() -> None:
    from flowledger.cli import subjects as cli_subjects
    from flowledger.subjects import PATIENT_ID_PATTERN

    assert cli_subjects.PATIENT_ID_PATTERN == PATIENT_ID_PATTERN


def test_retention_erases_a_patients_old_sessions_and_uploads(services: Services) -> None:
    from datetime import UTC, datetime, timedelta

    from flowledger.subjects.retention import retention_job

    now = datetime(2027, 3, 1, tzinfo=UTC)
    services.clock = lambda: now - timedelta(days=40)
    chat_and_upload(services)  # Ann's session and her upload to it, 40 days old
    services.clock = lambda: now
    services.settings = services.settings.model_copy(
        update={"retention_conversations_days": 30, "retention_uploads_days": 30}
    )
    result = retention_job(services)
    assert (result["sessions"], result["documents"], result["failed"]) == (1, 1, 0)
    assert ANN_CANARY not in everything(services)
    assert object_versions(services.aws.s3, services.aws.bucket_name("documents"), "") == []
    assert retention_job(services)["sessions"] == 0


def test_a_process_that_still_holds_an_erased_patients_key_writes_nothing_for_them(services: Services) -> None:
    import dataclasses

    from flowledger.errors import SubjectErased
    from flowledger.reasoning.models import ConsentChange, FlowStart
    from flowledger.reasoning.service import FlowService

    writer = Principal(kind="user", id="agent-researcher", scopes=frozenset({"reasoning.write"}))
    ann = Principal(kind="user", id="u-ann", scopes=frozenset({"reasoning.read"}), patient_id="p-ann")
    start = FlowStart(trigger_type="user_question", trigger_ref="chat/run-1", trigger_summary="Q", patient_id="p-ann")
    warm = FlowService(services)
    warm.start_flow(writer, start)  # this process now holds Ann's key
    elsewhere = dataclasses.replace(services)  # another function's process, with caches of its own
    SubjectErasure(elsewhere).erase(Principal(kind="iam", id=OFFICER), "p-ann", "gdpr_art17_request")
    # The fence in each write's own transaction refuses, whatever the warm process remembers.
    with pytest.raises(SubjectErased):
        warm.start_flow(writer, start)
    with pytest.raises(SubjectErased):
        warm.set_consent(ann, ConsentChange(reasoning_read=True))
    assert "p-ann" not in everything(services)
