"""Any tampering with stored events is detected, at the first position that changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from flowledger.ledger.chain import GENESIS, Position, verify_chain
from flowledger.ledger.events import GENESIS_HASH, AuditEntry, AuditEvent, seal

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


def first_bad_seq(events: list[AuditEvent], original: list[AuditEvent]) -> int | None:
    report = verify_chain(CHAIN, events, GENESIS, checkpointed(original))
    return report.bad.seq if report.bad else None


chains = st.integers(min_value=2, max_value=25).map(build_chain)


@given(chains)
def test_an_untouched_chain_verifies(events: list[AuditEvent]) -> None:
    report = verify_chain(CHAIN, events, GENESIS, checkpointed(events))
    assert report.bad is None and report.checked == len(events) and report.head.seq == len(events)


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
    tampered = list(events)
    tampered[index] = events[index].model_copy(update={field: value})
    assert first_bad_seq(tampered, events) == index + 1


@given(chains, st.data())
def test_deleting_an_event_is_reported_at_the_gap(events: list[AuditEvent], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    assert first_bad_seq(events[:index] + events[index + 1 :], events) == index + 1


@given(chains, st.data())
def test_truncating_the_tail_is_reported_at_the_first_missing_event(
    events: list[AuditEvent], data: st.DataObject
) -> None:
    keep = data.draw(st.integers(0, len(events) - 1))
    assert first_bad_seq(events[:keep], events) == keep + 1


@given(chains, st.data())
def test_inserting_an_event_is_reported_where_it_went(events: list[AuditEvent], data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    donor = events[data.draw(st.integers(0, len(events) - 1).filter(lambda i: i != index))]
    # Keys are (chain, seq): an insertion takes seq index+1 and pushes the rest one place on.
    inserted = donor.model_copy(update={"seq": index + 1, "event_id": f"{CHAIN}.{index + 1}"})
    shifted = [e.model_copy(update={"seq": e.seq + 1, "event_id": f"{CHAIN}.{e.seq + 1}"}) for e in events[index:]]
    assert first_bad_seq([*events[:index], inserted, *shifted], events) == index + 1


@given(chains, st.data())
def test_reordering_two_events_is_reported_at_the_first_of_them(events: list[AuditEvent], data: st.DataObject) -> None:
    i, j = sorted(data.draw(st.lists(st.integers(0, len(events) - 1), min_size=2, max_size=2, unique=True)))
    # Swap contents, keeping the keys in place (what a rewrite of two items would store).
    swapped = list(events)
    swapped[i] = events[j].model_copy(update={"seq": i + 1, "event_id": f"{CHAIN}.{i + 1}"})
    swapped[j] = events[i].model_copy(update={"seq": j + 1, "event_id": f"{CHAIN}.{j + 1}"})
    assert first_bad_seq(swapped, events) == i + 1


@given(chains, st.data())
def test_history_rewritten_and_rehashed_is_caught_by_the_checkpoint(
    events: list[AuditEvent], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(events) - 1))
    forged = events[:index]
    prev = events[index - 1].hash if index else GENESIS_HASH
    for event in events[index:]:
        entry = AuditEntry(action=event.action, actor="user:mallory", subject=event.subject, payload=event.payload)
        forged.append(seal(entry, CHAIN, event.seq, prev, START))
        prev = forged[-1].hash
    assert verify_chain(CHAIN, forged).bad is None  # links alone cannot tell...
    assert first_bad_seq(forged, events) == len(events)  # ...the checkpointed head can


def test_verification_can_start_from_a_trusted_anchor() -> None:
    events = build_chain(10)
    anchor = Position(events[4].seq, events[4].hash)
    report = verify_chain(CHAIN, events[5:], anchor, {10: events[-1].hash})
    assert report.bad is None and report.checked == 5
