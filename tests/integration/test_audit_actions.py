"""Every audited action, driven through the deployed handlers on moto: each row of the audit table
must record its action exactly as often as the table says, naming its subject and actor, and its
trigger must record nothing else. The table itself is checked against the package's emissions,
the routes, the jobs and the documentation's audit ledger page (docs/audit-ledger.md)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import flowledger
from flowledger.jobs import JOBS
from flowledger.reasoning.dimensions import AXES, PATIENT_LABELS, bucket
from flowledger.store import items
from flowledger.store.aws import AwsClients
from tests.integration.audit_table import (
    ADMIN,
    PATIENT,
    ROOT,
    ROWS,
    Env,
    Job,
    Route,
    Row,
    deployment,
    every_route,
    one_moto,
    readable_flow,
    recorded_by,
)
from tests.integration.provisioned import ProvisionedStates

# The page that documents every audited action, in its "Audited actions" table.
AUDIT_PAGE = ROOT / "docs" / "audit-ledger.md"
# Actions the page does not name, none today (checked so that the list only shrinks).
NOT_DOCUMENTED: set[str] = set()


@pytest.fixture(scope="module")
def clients() -> Iterator[AwsClients]:
    with one_moto() as shared:
        yield shared


@pytest.fixture
def env(clients: AwsClients, provisioned_states: ProvisionedStates, monkeypatch: pytest.MonkeyPatch) -> Env:
    """A deployment of the row's own on the module's moto, emptied of every earlier row's."""
    return Env(deployment(clients, "row", provisioned_states), monkeypatch)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_each_row_records_its_action_with_its_subject_and_actor(env: Env, row: Row) -> None:
    values = row.trigger.prepare(env)
    before = {event.event_id for event in env.events()}
    values = env.run(row.trigger, values)
    recorded = [event for event in env.events() if event.event_id not in before]
    assert Counter(event.action for event in recorded) == recorded_by(row.trigger)
    if row.action is None:
        return
    if "{ann}" in row.subject:  # the patient's pseudonym (made by her first event; read here only while she lives)
        values = {**values, "ann": env.services.subject_keys.pseudonym("p-ann")}
    subject = row.subject.format(**values)
    mine = [(event.subject, event.actor) for event in recorded if event.action == row.action]
    assert mine == [(subject, row.actor)] * row.count
    if row.count:
        # The subject's index serves each of them through the audit route.
        status, page = env.call(
            "GET", "/admin/v1/audit/events", ADMIN, query={"subject": subject, "action": row.action}
        )
        assert status == 200, page
        served = {event["event_id"] for event in page["events"]}
        assert {event.event_id for event in recorded if event.action == row.action} <= served


def test_the_patient_narrative_radar_is_the_stored_dimensions_snapshot(env: Env) -> None:
    services = env.base
    flow_id = readable_flow(env)["flow_id"]
    status, first = env.call("GET", f"/api/reasoning/flows/{flow_id}", PATIENT)
    assert status == 200, first
    # Scores no computation of this flow gives: the radar can only be the stored snapshot.
    scores = dict(zip(AXES, (1, 6, 0, 7, 2, 5), strict=True))
    tampered = {axis: {"score": score, "bucket": bucket(score)} for axis, score in scores.items()}
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("flows"),
        Key={"flow_id": {"S": flow_id}},
        UpdateExpression="SET dimensions_snapshot = :d",
        ExpressionAttributeValues=items.to_item({":d": tampered}),
    )
    expected = [{"label": PATIENT_LABELS[a], "score": s, "bucket": bucket(s)} for a, s in scores.items()]
    assert first["radar"] != expected
    status, narrative = env.call("GET", f"/api/reasoning/flows/{flow_id}", PATIENT)
    assert status == 200 and narrative["radar"] == expected
    status, dag = env.call("GET", f"/admin/v1/reasoning/flows/{flow_id}", ADMIN)
    assert status == 200 and dag["dimensions"] == tampered


def test_every_route_and_every_job_has_a_row() -> None:
    triggered = {(r.trigger.method, r.trigger.path) for r in ROWS if isinstance(r.trigger, Route)}
    assert {(route.method, route.path) for route in every_route()} <= triggered
    assert {job.name for job in JOBS} <= {r.trigger.name for r in ROWS if isinstance(r.trigger, Job)}


def _recorded_actions() -> list[re.Pattern[str]]:
    """What the package can record: the ``action=`` of every AuditEntry and the first argument of every
    ``_audit(...)``, literal or an f-string (its holes match any name segment)."""

    def pattern(node: ast.expr) -> re.Pattern[str] | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return re.compile(re.escape(node.value))
        if isinstance(node, ast.JoinedStr):
            parts = [re.escape(str(p.value)) if isinstance(p, ast.Constant) else "[a-z0-9_]+" for p in node.values]
            return re.compile("".join(parts))
        return None

    found = []
    for path in sorted(Path(flowledger.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            candidates = [k.value for k in node.keywords if k.arg == "action" and name == "AuditEntry"]
            if name == "_audit" and node.args:
                candidates.append(node.args[0])
            found += [p for p in map(pattern, candidates) if p is not None]
    return found


def test_the_table_has_every_action_the_package_records_and_no_other() -> None:
    emitted = _recorded_actions()
    assert len(emitted) > 20  # the scan found the emissions
    tabled = {row.action for row in ROWS if row.action}
    assert [p.pattern for p in emitted if not any(p.fullmatch(a) for a in tabled)] == []
    assert sorted(a for a in tabled if not any(p.fullmatch(a) for p in emitted)) == []


def _documented_actions() -> set[str]:
    """The action names the audit ledger page spells out, with its short forms expanded: `x.y.completed` /
    `.aborted`, `x.job.started|completed|error`."""
    named: set[str] = set()
    last = ""
    for token in re.findall(r"`([a-z_.|]+)`", AUDIT_PAGE.read_text()):
        if token.startswith(".") and last:
            token = last.rsplit(".", 1)[0] + token
        elif re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_|]+){2,}", token):
            last = token
        else:
            continue
        stem, _, ends = token.rpartition(".")
        named |= {f"{stem}.{end}" for end in ends.split("|")}
    return named


def test_the_audit_ledger_page_names_every_action_but_the_known_gaps() -> None:
    tabled = {row.action for row in ROWS if row.action}
    assert tabled - _documented_actions() <= NOT_DOCUMENTED
