"""The flows lists through the reasoning function on moto: the operators' list (filters, order, paging
across short pages, the cursor check, indexes only) and a patient's own list (consent, audit, rate,
only what the narrative may show)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.local.datadir import DataDir
from flowledger.services import Services, bootstrap
from flowledger.store.cursors import decode_cursor, encode_cursor
from tests.integration.provisioned import ProvisionedStates
from tests.integration.test_cli import store as store  # the fixture: a data dir's store on moto
from tests.integration.test_reasoning_routes import ADMIN, OTHER_PATIENT, PATIENT, WRITER, Call, ledger_actions
from tests.integration.test_reasoning_routes import call as call  # the fixture

T0 = datetime(2027, 2, 1, 9, 0, tzinfo=UTC)
LIST = "/admin/v1/reasoning/flows"
MINE = "/api/reasoning/flows"
SECRET = "Question about metformin 500mg"  # a summary the guard refuses: never shown to the patient


@dataclasses.dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The function's services run on this clock (each invocation bootstraps them)."""
    ticking = Clock()
    real = bootstrap()
    monkeypatch.setattr("flowledger.api.app.bootstrap", lambda: dataclasses.replace(real, clock=ticking))
    yield ticking


def start(call: Call, clock: Clock, at: datetime, **fields: str) -> str:
    clock.now = at
    body = {
        "trigger_type": fields.get("trigger_type", "user_question"),
        "trigger_ref": "chat/run-1",
        "trigger_summary": fields.get("summary", "A question about a lab trend"),
        "patient_id": fields.get("patient_id", "p-ann"),
    }
    status, answer, _ = call("POST", "/api/reasoning/flows", body, WRITER)
    assert status == 201, answer
    return str(answer["flow_id"])


def step(call: Call, flow_id: str, agent: str) -> None:
    body = {"step_kind": "retrieval", "agent": agent, "summary_text": "Read the guidelines", "confidence": 0.9}
    status, answer, _ = call("POST", f"/api/reasoning/flows/{flow_id}/steps", body, WRITER)
    assert status == 201, answer


def finish(call: Call, flow_id: str, outcome: str = "recommendation_delivered", state: str = "completed") -> None:
    body = {"state": state, "outcome": {"type": outcome, "summary": "Suggested a follow-up"}}
    status, answer, _ = call("PATCH", f"/api/reasoning/flows/{flow_id}", body, WRITER)
    assert status == 200, answer


def listing(call: Call, **query: str) -> tuple[int, Any]:
    status, body, _ = call("GET", LIST, user_arn=ADMIN, **query)
    return status, body


def every_page(call: Call, path: str = LIST, **query: str) -> tuple[list[str], list[int]]:
    """Every flow id the pages list, in order, and each page's length."""
    ids: list[str] = []
    sizes: list[int] = []
    cursor = None
    for _ in range(30):
        extra = {"cursor": cursor} if cursor else {}
        who = {"user_arn": ADMIN} if path == LIST else {"who": PATIENT}
        status, page, _ = call("GET", path, **who, **query, **extra)
        assert status == 200, page
        ids += [flow["flow_id"] for flow in page["flows"]]
        sizes.append(len(page["flows"]))
        cursor = page["next_cursor"]
        if not cursor:
            return ids, sizes
    pytest.fail("the pages never ended")


def seed_flows(call: Call, clock: Clock) -> dict[str, str]:
    """Six flows over two years: states, trigger types, outcomes, agents and patients that differ."""
    flows = {
        "old": start(call, clock, datetime(2026, 3, 1, tzinfo=UTC), patient_id="p-bob"),
        "june": start(call, clock, datetime(2026, 6, 1, tzinfo=UTC), trigger_type="lab_result"),
        "nov": start(call, clock, datetime(2026, 11, 1, tzinfo=UTC)),
        "jan": start(call, clock, datetime(2027, 1, 10, tzinfo=UTC), trigger_type="lab_result"),
        "jan2": start(call, clock, datetime(2027, 1, 20, tzinfo=UTC)),
        "active": start(call, clock, datetime(2027, 1, 30, tzinfo=UTC)),
    }
    clock.now = T0
    step(call, flows["old"], "critic")
    step(call, flows["june"], "researcher")
    step(call, flows["jan"], "researcher")
    step(call, flows["jan"], "critic")
    finish(call, flows["old"], "no_action")
    finish(call, flows["june"])
    finish(call, flows["nov"], "error", state="aborted")
    finish(call, flows["jan"])
    finish(call, flows["jan2"], "no_action")
    return flows


@pytest.fixture
def seeded(call: Call, clock: Clock, services: Services, provisioned_states: ProvisionedStates) -> dict[str, str]:
    """The six flows of :func:`seed_flows`, written through the function once per test process and put back into
    each test's moto (15 audited writes a test were a third of the module's time)."""
    flows = provisioned_states.seeded(services, "flow-listing", lambda: seed_flows(call, clock))
    clock.now = T0
    return dict(flows)


def test_every_flow_newest_first_across_years_page_by_page(call: Call, seeded: dict[str, str]) -> None:
    newest_first = [seeded[n] for n in ("active", "jan2", "jan", "nov", "june", "old")]
    assert every_page(call)[0] == newest_first
    ids, sizes = every_page(call, limit="2")
    assert ids == newest_first and max(sizes) <= 2
    page = listing(call)[1]
    row = next(f for f in page["flows"] if f["flow_id"] == seeded["jan"])
    assert (row["step_count"], row["flow_state"]) == (2, "completed")
    assert row["outcome"]["type"] == "recommendation_delivered"


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ({"state": "active"}, ["active"]),
        ({"state": "aborted"}, ["nov"]),
        ({"trigger_type": "lab_result"}, ["jan", "june"]),
        ({"outcome": "no_action"}, ["jan2", "old"]),
        ({"agent": "critic"}, ["jan", "old"]),
        ({"agent": "researcher", "trigger_type": "lab_result"}, ["jan", "june"]),
        ({"patient_id": "p-bob"}, ["old"]),
        ({"patient_id": "p-ann", "outcome": "recommendation_delivered"}, ["jan", "june"]),
        ({"patient_id": "p-ann", "agent": "critic"}, ["jan"]),
        ({"from": "2026-06-01", "to": "2026-11-01"}, ["nov", "june"]),
        ({"to": "2026-06-01"}, ["june", "old"]),  # a date takes in its whole day
        ({"from": "2027-01-15T00:00:00Z"}, ["active", "jan2"]),
        (
            {"from": "2026-01-01", "to": "2027-01-31", "state": "completed", "patient_id": "p-ann"},
            ["jan2", "jan", "june"],
        ),
    ],
)
def test_filters_narrow_the_list(call: Call, seeded: dict[str, str], query: dict[str, str], names: list[str]) -> None:
    assert every_page(call, limit="1", **query)[0] == [seeded[n] for n in names]


def test_a_filtered_list_pages_through_short_and_empty_pages(
    call: Call, seeded: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One aborted flow among six, pages of one that read two index items at most: the first page reads
    the two newest flows, neither aborted, and comes back empty, with a cursor to the rest."""
    monkeypatch.setattr("flowledger.reasoning.listing.QUERIES_PER_PAGE", 2)
    status, first = listing(call, state="aborted", limit="1")
    assert (status, first["flows"]) == (200, []) and first["next_cursor"]
    ids, sizes = every_page(call, state="aborted", limit="1")
    assert ids == [seeded["nov"]] and 0 in sizes


def test_the_list_reads_indexes_only(call: Call, seeded: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_scan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the flows list scanned a table")

    import flowledger.api.app as app

    services = app.bootstrap()
    monkeypatch.setattr(services.aws.dynamodb, "scan", no_scan)
    queried: list[str] = []
    query = services.aws.dynamodb.query
    monkeypatch.setattr(
        services.aws.dynamodb, "query", lambda **request: queried.append(request["IndexName"]) or query(**request)
    )
    monkeypatch.setattr("flowledger.api.app.bootstrap", lambda: services)
    assert listing(call, agent="critic")[1]["flows"]
    assert listing(call, patient_id="p-ann", outcome="no_action")[1]["flows"]
    assert set(queried) == {"by_listing", "by_patient"}


@pytest.mark.parametrize(
    "forge",
    [
        lambda cursor: "not-a-cursor",
        lambda cursor: encode_cursor({"v": 1}),
        lambda cursor: encode_cursor({**decode_cursor(cursor), "p": "1999"}),
        lambda cursor: encode_cursor({**decode_cursor(cursor), "f": "0" * 16}),
        lambda cursor: encode_cursor({**decode_cursor(cursor), "k": {"flow_id": "fl_X", "created_at": 1}}),
    ],
    ids=["garbage", "wrong_shape", "other_partition", "other_filters", "bad_key"],
)
def test_a_cursor_the_api_did_not_issue_is_a_422(
    call: Call, seeded: dict[str, str], forge: Callable[[str], str]
) -> None:
    cursor = listing(call, limit="2")[1]["next_cursor"]
    assert listing(call, limit="2", cursor=cursor)[0] == 200
    status, body = listing(call, limit="2", cursor=forge(cursor))
    assert (status, body["error"]) == (422, "invalid_input"), body


def test_a_cursor_resumes_only_the_filters_it_came_from(call: Call, seeded: dict[str, str]) -> None:
    cursor = listing(call, limit="1", state="completed")[1]["next_cursor"]
    assert listing(call, limit="1", state="completed", cursor=cursor)[0] == 200
    assert listing(call, limit="1", state="aborted", cursor=cursor)[0] == 422


@pytest.mark.parametrize(
    "query",
    [
        {"state": "open"},
        {"outcome": "maybe"},
        {"from": "yesterday"},
        {"from": "2027-01-10T10:00:00"},  # no zone
        {"from": "2027-01-10", "to": "2027-01-01"},
        {"trace_id": "trace-1", "state": "active"},
        {"limit": "101"},
    ],
)
def test_a_bad_filter_is_a_422(call: Call, seeded: dict[str, str], query: dict[str, str]) -> None:
    assert listing(call, **query)[0] == 422


def test_the_trace_search_stays(call: Call, clock: Clock) -> None:
    _, body, _ = call(
        "POST",
        "/api/reasoning/flows",
        {"trigger_type": "t", "trigger_ref": "r", "trigger_summary": "s", "trace_id": "trace-kept"},
        WRITER,
    )
    assert listing(call, trace_id="trace-kept")[1]["flows"][0]["flow_id"] == body["flow_id"]


# ---- a patient's own list ----------------------------------------------------------------------------


def consent(call: Call, who: dict[str, str] = PATIENT, on: bool = True) -> None:
    assert call("PUT", "/api/reasoning/consent", {"reasoning_read": on}, who)[0] == 200


def mine(call: Call, who: dict[str, str] = PATIENT, **query: str) -> tuple[int, Any]:
    status, body, _ = call("GET", MINE, who=who, **query)
    return status, body


def test_a_patient_lists_only_their_own_flows_newest_first(call: Call, clock: Clock, services: Services) -> None:
    safe = start(call, clock, T0 - timedelta(days=3), summary="A question about a lab trend")
    unsafe = start(call, clock, T0 - timedelta(days=2), summary=SECRET)
    running = start(call, clock, T0 - timedelta(days=1))
    start(call, clock, T0, patient_id="p-bob", summary="Bob's question")
    clock.now = T0
    finish(call, safe)
    finish(call, unsafe)
    consent(call)

    status, page = mine(call)
    assert status == 200, page
    assert [f["flow_id"] for f in page["flows"]] == [running, unsafe, safe]
    shown = {f["flow_id"]: f for f in page["flows"]}
    assert shown[safe]["trigger_summary"] == "A question about a lab trend" and shown[safe]["explained"]
    assert shown[unsafe]["trigger_summary"] is None and not shown[unsafe]["explained"]
    assert shown[running]["trigger_summary"] is None and shown[running]["state"] == "active"
    assert set(shown[safe]) == {"flow_id", "state", "explained", "trigger_summary", "started_at", "closed_at"}
    assert SECRET not in json.dumps(page) and "Bob" not in json.dumps(page)
    assert every_page(call, MINE, limit="1")[0] == [running, unsafe, safe]


def test_the_patient_list_is_consent_gated_audited_and_owned(call: Call, clock: Clock, services: Services) -> None:
    start(call, clock, T0, summary=SECRET)
    assert mine(call)[1]["error"] == "consent_required"
    assert ("patient.reasoning.flows.listed", "user:u-ann") not in ledger_actions(services)
    consent(call)
    cursor = mine(call, limit="1")[1]["next_cursor"]
    assert mine(call)[0] == 200
    events = [e for c in services.ledger.chain_ids() for e in services.ledger.read_chain(c)]
    listed = [e for e in events if e.action == "patient.reasoning.flows.listed"]
    ann = services.subject_keys.pseudonym("p-ann")  # the ledger names a patient by pseudonym, never by id
    assert [(e.actor, e.subject) for e in listed] == [("user:u-ann", f"patient:{ann}")] * 2
    assert "p-ann" not in json.dumps([e.model_dump(mode="json") for e in events])
    assert SECRET not in json.dumps([e.model_dump(mode="json") for e in listed])
    # Another patient cannot page through this one's list, nor an operator's token read it.
    consent(call, OTHER_PATIENT)
    if cursor:
        assert mine(call, OTHER_PATIENT, cursor=cursor)[0] == 422
    assert mine(call, {**WRITER, "scope": "reasoning.read"})[1]["error"] == "forbidden"
    assert mine(call, WRITER)[0] == 403


def test_the_patient_list_has_the_narratives_rate(call: Call, clock: Clock) -> None:
    consent(call)
    for _ in range(30):
        assert mine(call)[0] == 200
    status, body = mine(call)
    assert (status, body["error"]) == (429, "rate_limited")


# ---- flows from before the list (`flowledger flows stamp-listing`) ------------------------------------


def test_stamp_listing_brings_older_flows_into_the_list(
    store: Services, data_dir: DataDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """Flows written before the list carry no listing_year nor agents: the CLI stamps them, once."""
    from flowledger.cli import main
    from flowledger.identity import Principal
    from flowledger.reasoning.listing import FlowFilters, FlowListing
    from flowledger.reasoning.models import FlowStart, StepCreate
    from flowledger.reasoning.service import FlowService

    writer = Principal(kind="user", id="agent-old", scopes=frozenset({"reasoning.write"}))
    flows = FlowService(store)
    old = flows.start_flow(writer, FlowStart(trigger_type="old_kind", trigger_ref="r", trigger_summary="An old one"))
    step = StepCreate(step_kind="retrieval", agent="archivist", summary_text="Read the archive")
    flows.add_step(writer, old.flow_id, step)
    table = store.aws.table_name("flows")
    key = {"flow_id": {"S": old.flow_id}}
    store.aws.dynamodb.update_item(TableName=table, Key=key, UpdateExpression="REMOVE listing_year, agents")
    listing = FlowListing(store)
    assert listing.list_flows(FlowFilters(trigger_type="old_kind"), 10, None).flows == []

    assert main(["flows", "stamp-listing", "--data-dir", str(data_dir.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"stamped": 1}  # after the seeding's metrics
    listed = listing.list_flows(FlowFilters(trigger_type="old_kind", agent="archivist"), 10, None).flows
    assert [flow.flow_id for flow in listed] == [old.flow_id]
    assert main(["flows", "stamp-listing", "--data-dir", str(data_dir.path)]) == 0
    assert capsys.readouterr().out.strip() == "stamped 0 flow(s) for the flows list"
