"""Any tampering with stored events is detected at the positions that changed, and only there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from flowledger.ledger.chain import GENESIS, Malformed, Position, Stored, verify_chain
from flowledger.ledger.events import GENESIS_HASH, AuditEntry, AuditEvent, parse_timestamp, seal

CHAIN = "chain-001"
START = datetime(2026, 1, 1, tzinfo=UTC)


def build_chain(size: int) -> list[AuditEvent]:
    events: list[AuditEvent] = []
    prev = GENESIS_HASH
    for seq in range(1, size + 1):
        entry = AuditEntry(
            action="reasoning.step.created", actor="user:a", subject=f"flow:{seq % 3}", payload={"n": seq}
        )
        event = seal(entry, CHAIN, seq, prev, START + timedelta(seconds=seq))
        events.append(event)
        prev = event.hash
    return events


def checkpointed(events: list[AuditEvent]) -> dict[int, str]:
    """The checkpoint taken after the last write: it knows the head."""
    return {events[-1].seq: events[-1].hash}


def findings(events: list[Stored], original: list[AuditEvent]) -> list[tuple[int, str]]:
    """(seq, problem) of every finding, checked against the checkpoint of the original chain."""
    report = verify_chain(CHAIN, events, GENESIS, checkpointed(original))
    return [(int(f.where.removeprefix(f"{CHAIN}.")), f.problem) for f in report.findings]


def first_bad_seq(events: list[Stored], original: list[AuditEvent]) -> int | None:
    found = findings(events, original)
    return found[0][0] if found else None


chains = st.integers(min_value=2, max_value=25).map(build_chain)


@given(chains)
def test_an_untouched_chain_verifies(events: list[AuditEvent]) -> None:
    report = verify_chain(CHAIN, events, GENESIS, checkpointed(events))
    assert report.findings == () and report.checked == len(events) and report.head.seq == len(events)


@given(chains, st.data())
def test_modifying_a_field_is_reported_at_that_event(events: list[AuditEvent], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    field, value = data.draw(
        st.sampled_from(
            [
                ("actor", "user:mallory"),
                ("action", "reasoning.flow.aborted"),
                ("payload", {"n": -1}),
                ("at", "2030-01-01T00:00:00.000000Z"),
                ("subject", "flow:other"),
                ("prev_hash", "f" * 64),
            ]
        )
    )
    tampered: list[Stored] = list(events)
    tampered[index] = events[index].model_copy(update={field: value})
    assert findings(tampered, events) == [(index + 1, "hash")]  # and the walk goes on past it


@given(chains, st.data())
def test_deleting_an_event_is_reported_at_the_gap(events: list[AuditEvent], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    assert findings([*events[:index], *events[index + 1 :]], events) == [(index + 1, "missing")]


@given(chains, st.data())
def test_truncating_the_tail_is_reported_at_the_first_missing_event(
    events: list[AuditEvent], data: st.DataObject
) -> None:
    keep = data.draw(st.integers(0, len(events) - 1))
    assert findings(list(events[:keep]), events) == [(keep + 1, "missing")]


@given(chains, st.data())
def test_inserting_an_event_is_reported_where_it_went(events: list[AuditEvent], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    donor = events[data.draw(st.integers(0, len(events) - 1).filter(lambda i: i != index))]
    # Keys are (chain, seq): an insertion takes seq index+1 and pushes the rest one place on.
    inserted = donor.model_copy(update={"seq": index + 1, "event_id": f"{CHAIN}.{index + 1}"})
    shifted = [e.model_copy(update={"seq": e.seq + 1, "event_id": f"{CHAIN}.{e.seq + 1}"}) for e in events[index:]]
    # Every event from there on now sits where its hash says it does not.
    expected = [(seq, "hash") for seq in range(index + 1, len(events) + 2)]
    assert findings([*events[:index], inserted, *shifted], events) == expected


@given(chains, st.data())
def test_reordering_two_events_is_reported_at_the_first_of_them(events: list[AuditEvent], data: st.DataObject) -> None:
    i, j = sorted(data.draw(st.lists(st.integers(0, len(events) - 1), min_size=2, max_size=2, unique=True)))
    # Swap contents, keeping the keys in place (what a rewrite of two items would store).
    swapped: list[Stored] = list(events)
    swapped[i] = events[j].model_copy(update={"seq": i + 1, "event_id": f"{CHAIN}.{i + 1}"})
    swapped[j] = events[i].model_copy(update={"seq": j + 1, "event_id": f"{CHAIN}.{j + 1}"})
    assert findings(swapped, events) == [(i + 1, "hash"), (j + 1, "hash")]  # the two, and not their neighbours


@given(chains, st.data())
def test_history_rewritten_and_rehashed_is_caught_by_the_checkpoint(
    events: list[AuditEvent], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    forged = events[:index]
    prev = events[index - 1].hash if index else GENESIS_HASH
    for event in events[index:]:
        entry = AuditEntry(action=event.action, actor="user:mallory", subject=event.subject, payload=event.payload)
        forged.append(seal(entry, CHAIN, event.seq, prev, parse_timestamp(event.at)))
        prev = forged[-1].hash
    assert verify_chain(CHAIN, forged).findings == ()  # links alone cannot tell...
    assert findings(list(forged), events) == [(len(events), "checkpoint")]  # ...the checkpointed head can


def test_verification_can_start_from_a_trusted_anchor() -> None:
    events = build_chain(10)
    anchor = Position(events[4].seq, events[4].hash)
    report = verify_chain(CHAIN, events[5:], anchor, {10: events[-1].hash})
    assert report.bad is None and report.checked == 5


@given(chains, st.data())
def test_a_malformed_item_is_one_finding_and_the_walk_goes_on(events: list[AuditEvent], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    later = data.draw(st.integers(index + 1, len(events)))  # a second change further on, or none (== len)
    stored: list[Stored] = list(events)
    stored[index] = Malformed(str(index + 1), "unexpected attribute note")
    expected = [(index + 1, "malformed")]
    if later < len(events):
        stored[later] = events[later].model_copy(update={"actor": "user:mallory"})
        expected.append((later + 1, "hash"))
    assert findings(stored, events) == expected


def test_items_under_keys_that_are_no_position_are_findings_and_skipped() -> None:
    events = build_chain(3)
    stored: list[Stored] = [Malformed("0", "seq: too small"), events[0], Malformed("1.5", "seq: not an integer")]
    report = verify_chain(CHAIN, [*stored, *events[1:]], GENESIS, checkpointed(events))
    assert [(f.where, f.problem) for f in report.findings] == [
        (f"{CHAIN}.0", "not_a_position"),
        (f"{CHAIN}.1.5", "not_a_position"),
    ]
    assert report.checked == 5 and report.head.seq == 3


def test_time_going_backwards_is_a_finding_at_that_event() -> None:
    events = build_chain(5)
    earlier = START  # before events[2].at: a backdated event, well sealed and linked
    entry = AuditEntry(action="reasoning.step.created", actor="user:a", subject="flow:x")
    backdated = seal(entry, CHAIN, 4, events[2].hash, earlier)
    rest = seal(entry, CHAIN, 5, backdated.hash, START + timedelta(seconds=9))
    assert findings([*events[:3], backdated, rest], [*events[:3], backdated, rest]) == [(4, "time")]


def test_equal_times_are_in_order() -> None:
    entry = AuditEntry(action="reasoning.step.created", actor="user:a", subject="flow:x")
    first = seal(entry, CHAIN, 1, GENESIS_HASH, START)
    second = seal(entry, CHAIN, 2, first.hash, START)
    assert verify_chain(CHAIN, [first, second]).findings == ()


def test_a_duplicated_position_is_reported_as_out_of_order() -> None:
    events = build_chain(3)
    report = verify_chain(CHAIN, [events[0], events[1], events[1], events[2]])
    assert [(f.where, f.problem) for f in report.findings] == [(f"{CHAIN}.2", "order")]
