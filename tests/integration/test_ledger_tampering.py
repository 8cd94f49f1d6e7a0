"""Tampering with the stored ledger, case by case: verify reports exactly the right finding, at the right place.

The ledger is built with real appends on three chains and a checkpoint, then each test changes the
table directly with boto3, as someone holding write access to it could.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowledger.jobs import job_named
from flowledger.ledger.audit import VerificationReport, checkpoints_of, take_checkpoint, verify_ledger
from flowledger.ledger.checkpoints import build_checkpoint
from flowledger.ledger.events import AuditEntry, AuditEvent, parse_timestamp, seal, timestamp
from flowledger.ledger.store import Ledger, to_item
from flowledger.services import Services

AUDIT_PAGE = Path(__file__).resolve().parents[2] / "docs" / "audit-ledger.md"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
CHAINS = ("chain-000", "chain-001", "chain-002")
CHECKPOINTED = 5  # events per chain under the checkpoint
TAIL = 2  # chain-001's events after it

Built = dict[str, list[AuditEvent]]  # each chain's events as appended


@pytest.fixture
def built(services: Services) -> Built:
    """Five events on each of three chains, a checkpoint, then two more on chain-001 (seq 6 and 7)."""
    ticks = iter(range(10_000))
    services.clock = lambda: T0 + timedelta(seconds=next(ticks))
    events: Built = {chain_id: [] for chain_id in CHAINS}

    def append(chain_id: str, n: int) -> None:
        services.ledger._writer.chain = chain_id  # the chain this test's writer appends to
        entry = AuditEntry(action="reasoning.step.created", actor="user:a", subject=f"flow:{n % 3}", payload={"n": n})
        events[chain_id].append(services.ledger.append(entry))

    for n in range(CHECKPOINTED):
        for chain_id in CHAINS:
            append(chain_id, n)
    take_checkpoint(services.ledger, checkpoints_of(services), services)
    for n in range(TAIL):
        append("chain-001", CHECKPOINTED + n)
    assert verify(services).ok
    return events


def verify(services: Services) -> VerificationReport:
    return verify_ledger(services.ledger, checkpoints_of(services))


def findings(services: Services) -> list[tuple[str, str]]:
    """(place, problem) of every finding; every chain of the ledger was read whatever was found."""
    report = verify(services)
    assert [chain.chain_id for chain in report.chains if chain.known] == services.ledger.chain_ids()
    return [(finding.where, finding.problem) for finding in report.findings]


def key(chain_id: str, seq: int | str) -> dict[str, Any]:
    return {"chain_id": {"S": chain_id}, "seq": {"N": str(seq)}}


def item(services: Services, chain_id: str, seq: int) -> dict[str, Any]:
    found: dict[str, Any] = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("ledger"), Key=key(chain_id, seq)
    )["Item"]
    return found


def put(services: Services, stored: dict[str, Any]) -> None:
    services.aws.dynamodb.put_item(TableName=services.aws.table_name("ledger"), Item=stored)


def delete(services: Services, chain_id: str, *seqs: int) -> None:
    for seq in seqs:
        services.aws.dynamodb.delete_item(TableName=services.aws.table_name("ledger"), Key=key(chain_id, seq))


def update(services: Services, chain_id: str, seq: int, expression: str, values: dict[str, Any] | None = None) -> None:
    extra: dict[str, Any] = {"ExpressionAttributeValues": values} if values else {}
    if "#at" in expression:
        extra["ExpressionAttributeNames"] = {"#at": "at"}  # a reserved word
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("ledger"), Key=key(chain_id, seq), UpdateExpression=expression, **extra
    )


def forged(chain_id: str, seq: int, prev_hash: str, at: str, actor: str = "user:mallory") -> AuditEvent:
    """A well-sealed event: right hash, right link, the given time."""
    entry = AuditEntry(action="reasoning.step.created", actor=actor, subject="flow:1", payload={"n": 99})
    return seal(entry, chain_id, seq, prev_hash, parse_timestamp(at))


def rehash_from(services: Services, events: list[AuditEvent], first: int) -> None:
    """Rewrite a chain from seq ``first`` on and re-hash it: every link and hash holds."""
    prev = events[first - 2].hash
    for event in events[first - 1 :]:
        rewritten = forged(event.chain_id, event.seq, prev, event.at)
        put(services, to_item(rewritten))
        prev = rewritten.hash


def test_an_untouched_ledger_has_no_findings_and_says_what_it_checked(built: Built, services: Services) -> None:
    report = verify(services)
    assert report.ok and report.findings == [] and report.scanned_for_strays
    assert report.events_checked == 3 * CHECKPOINTED + TAIL and report.checkpoints_checked == 1
    checked = {chain.chain_id: (chain.checked, chain.head.seq) for chain in report.chains if chain.checked}
    assert checked == {"chain-000": (5, 5), "chain-001": (7, 7), "chain-002": (5, 5)}


def test_a_modified_field_is_one_finding_at_that_event(built: Built, services: Services) -> None:
    update(services, "chain-001", 3, "SET actor = :a", {":a": {"S": "user:mallory"}})
    assert findings(services) == [("chain-001.3", "hash")]


@pytest.mark.parametrize(
    ("expression", "values", "reason"),
    [
        ("SET note = :v", {":v": {"S": "hidden"}}, "unexpected attribute note"),  # an extra attribute
        ("REMOVE actor", None, "missing attribute actor"),
        ("SET payload = :v", {":v": {"S": "n=1"}}, "payload: Input should be a valid dictionary"),  # wrong type
        ("SET #at = :v", {":v": {"S": "yesterday"}}, "at: String should match pattern"),  # no timestamp
        ("SET refs = :v", {":v": {"SS": ["a", "b"]}}, ""),  # a type the codec does not read
    ],
    ids=["extra", "missing", "wrong-type", "not-a-time", "unreadable"],
)
def test_a_malformed_item_is_one_finding_at_its_place_and_the_rest_is_checked(
    built: Built, services: Services, expression: str, values: dict[str, Any] | None, reason: str
) -> None:
    update(services, "chain-001", 3, expression, values)
    report = verify(services)
    assert [(f.where, f.problem) for f in report.findings] == [("chain-001.3", "malformed")]
    assert reason in report.findings[0].detail
    assert report.events_checked == 3 * CHECKPOINTED + TAIL  # chain-001 went on past it, and the others


def test_verification_goes_on_past_a_finding_in_the_same_chain_and_in_others(built: Built, services: Services) -> None:
    update(services, "chain-001", 2, "SET note = :v", {":v": {"S": "x"}})
    update(services, "chain-001", 6, "SET actor = :a", {":a": {"S": "user:mallory"}})
    delete(services, "chain-002", 4)
    assert findings(services) == [("chain-001.2", "malformed"), ("chain-001.6", "hash"), ("chain-002.4", "missing")]


def test_a_deleted_middle_event_is_one_finding_at_the_gap(built: Built, services: Services) -> None:
    delete(services, "chain-002", 3)
    assert findings(services) == [("chain-002.3", "missing")]


@pytest.mark.parametrize(
    ("chain_id", "seqs", "place"),
    [
        ("chain-000", (5,), "chain-000.5"),
        ("chain-001", (5, 6, 7), "chain-001.5"),
        ("chain-002", (3, 4, 5), "chain-002.3"),
    ],
)
def test_a_deleted_tail_the_checkpoint_saw_is_caught_by_it(
    built: Built, services: Services, chain_id: str, seqs: tuple[int, ...], place: str
) -> None:
    delete(services, chain_id, *seqs)
    assert findings(services) == [(place, "missing")]


def test_the_tail_after_the_last_checkpoint_is_not_protected_and_the_docs_say_so(
    built: Built, services: Services
) -> None:
    tail = built["chain-001"]
    delete(services, "chain-001", 7)
    assert verify(services).ok  # deleted after the checkpoint: nothing can tell
    rewritten = forged("chain-001", 6, tail[4].hash, tail[5].at)
    put(services, to_item(rewritten))  # rewritten and re-hashed after the checkpoint
    put(services, to_item(forged("chain-001", 7, rewritten.hash, tail[5].at)))  # and a forged append
    assert verify(services).ok
    # The audit ledger page owns up to it, and the bound it names is the checkpoint job's schedule.
    text = " ".join(AUDIT_PAGE.read_text().split())
    assert "the events after a chain's last checkpointed head are tied to nothing outside the table" in text
    assert "every event is under a checkpoint within the cadence (5 minutes unless the deployment chose 1 to 60" in text
    assert job_named("ledger_checkpoint").schedule == "rate(5 minutes)"


def test_a_forged_insert_that_renumbers_the_rest_is_a_finding_per_moved_event(built: Built, services: Services) -> None:
    events = built["chain-002"]
    for event in reversed(events[2:]):  # 5 -> 6, 4 -> 5, 3 -> 4: the items keep every attribute but seq
        moved = item(services, "chain-002", event.seq)
        put(services, moved | {"seq": {"N": str(event.seq + 1)}})
    put(services, to_item(forged("chain-002", 3, events[1].hash, events[1].at)))  # well sealed and linked
    assert findings(services) == [
        ("chain-002.4", "misplaced"),
        ("chain-002.5", "misplaced"),
        ("chain-002.6", "misplaced"),
    ]


def test_a_forged_insert_with_the_rest_rehashed_is_caught_by_the_checkpoint(built: Built, services: Services) -> None:
    events = built["chain-002"]
    inserted = forged("chain-002", 3, events[1].hash, events[1].at)
    put(services, to_item(inserted))
    prev = inserted.hash
    for event in events[2:]:  # the old 3..5 re-sealed at 4..6
        moved = forged("chain-002", event.seq + 1, prev, event.at, actor=event.actor)
        put(services, to_item(moved))
        prev = moved.hash
    assert findings(services) == [("chain-002.5", "checkpoint")]


@pytest.mark.parametrize("chain_id", ["chain-016", "chain-999", "ledger"])
def test_a_forged_event_under_an_unknown_chain_is_a_finding(built: Built, services: Services, chain_id: str) -> None:
    stray = to_item(forged("chain-016", 1, "0" * 64, built["chain-000"][0].at))
    put(services, stray | {"chain_id": {"S": chain_id}, "event_id": {"S": f"{chain_id}.1"}})
    assert findings(services) == [(f"{chain_id}.1", "unknown_chain")]


def test_items_under_seqs_that_are_no_position_are_findings(built: Built, services: Services) -> None:
    copy = item(services, "chain-000", 2)
    for seq in ("0", "-1", "2.5"):
        put(services, copy | {"seq": {"N": seq}})
    assert findings(services) == [
        ("chain-000.-1", "not_a_position"),
        ("chain-000.0", "not_a_position"),
        ("chain-000.2.5", "not_a_position"),
    ]


@pytest.mark.parametrize(("first", "second"), [(2, 4), (3, 4)])
def test_two_swapped_events_are_two_findings(built: Built, services: Services, first: int, second: int) -> None:
    a, b = item(services, "chain-000", first), item(services, "chain-000", second)
    put(services, b | {"seq": {"N": str(first)}})
    put(services, a | {"seq": {"N": str(second)}})
    assert findings(services) == [(f"chain-000.{first}", "misplaced"), (f"chain-000.{second}", "misplaced")]


def test_history_rewritten_and_rehashed_is_caught_by_the_checkpoint(built: Built, services: Services) -> None:
    rehash_from(services, built["chain-000"], 3)
    assert findings(services) == [("chain-000.5", "checkpoint")]


def test_rewritten_and_rehashed_across_the_checkpoint_is_caught_at_its_head(built: Built, services: Services) -> None:
    rehash_from(services, built["chain-001"], 4)  # 4..7: the checkpoint's head 5 among them
    assert findings(services) == [("chain-001.5", "checkpoint")]


def test_time_going_backwards_is_a_finding_even_after_the_last_checkpoint(built: Built, services: Services) -> None:
    tail = built["chain-001"]
    backdated = forged("chain-001", 7, tail[5].hash, tail[0].at)  # re-sealed and linked, but earlier than seq 6
    put(services, to_item(backdated))
    assert findings(services) == [("chain-001.7", "time")]
    put(services, to_item(forged("chain-001", 8, backdated.hash, tail[-1].at)))  # the walk goes on past it
    assert findings(services) == [("chain-001.7", "time")]


def test_a_malformed_checkpoint_is_one_finding_and_the_rest_is_still_checked(built: Built, services: Services) -> None:
    store = checkpoints_of(services)
    taken = []
    for n in range(2):  # two more checkpoints, each after chain-002 moved
        services.ledger._writer.chain = "chain-002"
        services.ledger.append(AuditEntry(action="reasoning.step.created", actor="user:a", subject=f"flow:{n}"))
        taken.append(take_checkpoint(services.ledger, store, services)["checkpoint_id"])
    services.aws.s3.put_object(  # the middle one of three overwritten (possible where Object Lock is not on)
        Bucket=services.aws.bucket_name("checkpoints"), Key=f"checkpoints/{taken[0]}.json", Body=b"{not json"
    )
    update(services, "chain-002", 2, "SET actor = :a", {":a": {"S": "user:mallory"}})
    # The next checkpoint's link to it is not checked: as in a chain, it could say nothing more.
    assert findings(services) == [(f"checkpoint {taken[0]}", "malformed"), ("chain-002.2", "hash")]


def test_a_writer_whose_clock_is_behind_keeps_time_from_going_backwards(
    services: Services, fresh_ledger: Callable[[Services], Any]
) -> None:
    ahead, behind = fresh_ledger(services), fresh_ledger(services)
    ahead._clock = lambda: T0 + timedelta(hours=1)
    behind._clock = lambda: T0
    entry = AuditEntry(action="reasoning.step.created", actor="user:a", subject="flow:t")
    first = ahead.append(entry)
    behind._writer.chain = first.chain_id
    second = behind.append(entry)
    assert (second.chain_id, second.seq) == (first.chain_id, 2) and second.at == first.at
    assert verify(services).ok


def test_a_head_whose_time_is_no_timestamp_does_not_stop_appends(
    services: Services, fresh_ledger: Callable[[Services], Any]
) -> None:
    services.clock = lambda: T0
    entry = AuditEntry(action="reasoning.step.created", actor="user:a", subject="flow:t")
    first = services.ledger.append(entry)
    update(services, first.chain_id, 1, "SET #at = :v", {":v": {"S": "9999"}})  # sorts after any timestamp
    writer = fresh_ledger(services)
    writer._writer.chain = first.chain_id
    assert writer.append(entry).at == timestamp(T0)
    assert findings(services) == [(f"{first.chain_id}.1", "malformed")]


def test_chains_left_out_by_a_lower_shard_count_are_findings_in_the_table_and_the_checkpoint(
    built: Built, services: Services
) -> None:
    wider = Ledger(services.aws.dynamodb, services.aws.table_name("ledger"), 17, services.clock)  # chain-016 too
    wider._writer.chain = "chain-016"
    wider.append(AuditEntry(action="reasoning.step.created", actor="user:a", subject="flow:w"))
    checkpoint = take_checkpoint(wider, checkpoints_of(services), services)["checkpoint_id"]
    assert findings(services) == [(f"checkpoint {checkpoint}", "unknown_chain"), ("chain-016.1", "unknown_chain")]


def test_a_checkpoint_slipped_in_before_the_first_is_caught_by_both_links(built: Built, services: Services) -> None:
    store = checkpoints_of(services)
    real = store.latest()
    assert real is not None
    slipped = build_checkpoint(real.heads, real, T0 - timedelta(days=1))  # sorts first, links to the real one
    store.put(slipped)
    assert findings(services) == [
        (f"checkpoint {slipped.checkpoint_id}", "link"),  # the first, yet it links to another
        (f"checkpoint {real.checkpoint_id}", "link"),  # no longer links to the one before it
    ]


def test_from_a_checkpoint_only_what_follows_its_heads_is_read(built: Built, services: Services) -> None:
    store = checkpoints_of(services)
    [checkpoint_id] = store.ids()
    update(services, "chain-000", 2, "SET actor = :a", {":a": {"S": "user:mallory"}})  # under the trusted heads
    update(services, "chain-001", 7, "SET actor = :a", {":a": {"S": "user:mallory"}})  # after them
    report = verify_ledger(services.ledger, store, from_checkpoint=checkpoint_id)
    assert [(f.where, f.problem) for f in report.findings] == [("chain-001.7", "hash")]
    assert report.events_checked == TAIL
