"""Each checkpoint is published as a signed note the ledger's key verifies, and the checkpoint job signs
nothing when the chain heads do not extend the last checkpoint: it says why and raises the alarm metric."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from flowledger.ledger.audit import CHECKPOINT_REFUSED_METRIC, checkpoints_of, take_checkpoint, verify_ledger
from flowledger.ledger.checkpoint_notes import read_checkpoint_text
from flowledger.ledger.checkpoints import ChainHead, build_checkpoint
from flowledger.ledger.events import AuditEntry, AuditEvent, seal
from flowledger.ledger.merkle import merkle_root
from flowledger.ledger.signed_note import parse_note, verify
from flowledger.ledger.store import to_item
from flowledger.services import Services

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
CHAINS = ("chain-000", "chain-001")


class Recorded:
    """The metrics sink the job writes to, kept: (name, value) per emit."""

    def __init__(self) -> None:
        self.values: list[tuple[str, float]] = []

    def emit(self, name: str, value: float, unit: str, dimensions: Mapping[str, str]) -> None:
        self.values.append((name, value))


@pytest.fixture
def recorded(services: Services) -> Recorded:
    ticks = iter(range(10_000))
    services.clock = lambda: T0 + timedelta(seconds=next(ticks))
    services.metrics = sink = Recorded()
    return sink


def append(services: Services, chain_id: str, n: int) -> AuditEvent:
    services.ledger._writer.chain = chain_id  # the chain this test's writer appends to
    entry = AuditEntry(action="reasoning.step.created", actor="user:a", subject="flow:1", payload={"n": n})
    return services.ledger.append(entry)


def checkpoint(services: Services) -> dict[str, object]:
    return take_checkpoint(services.ledger, checkpoints_of(services), services)


def refusals(sink: Recorded) -> list[float]:
    return [value for name, value in sink.values if name == CHECKPOINT_REFUSED_METRIC]


def test_each_checkpoint_is_a_note_the_ledger_key_verifies(services: Services, recorded: Recorded) -> None:
    for n in range(3):
        for chain_id in CHAINS:
            append(services, chain_id, n)
    taken = checkpoint(services)
    store = checkpoints_of(services)
    saved = store.get(str(taken["checkpoint_id"]))
    raw = store.note(saved.checkpoint_id)
    assert raw is not None
    note = parse_note(raw)
    key = services.checkpoint_signer.verifier
    assert verify(note, key) is None
    lines = read_checkpoint_text(note.text)
    assert lines.origin == key.name == services.settings.ledger_origin
    assert (lines.size, lines.root, lines.checkpoint_id, lines.checkpoint_hash) == (
        6,
        saved.root,
        saved.checkpoint_id,
        saved.hash,
    )
    assert refusals(recorded) == [0]
    append(services, "chain-001", 3)
    again = checkpoint(services)  # extends the first: signed
    assert again["checkpoint_id"] != taken["checkpoint_id"] and refusals(recorded) == [0, 0]
    assert store.ids() == sorted([saved.checkpoint_id, str(again["checkpoint_id"])])  # notes are not checkpoints


def rewrite_from(services: Services, events: list[AuditEvent], first: int) -> None:
    """History rewritten from seq ``first`` on, every hash and link redone: only a checkpoint can tell."""
    prev = events[first - 2].hash
    for event in events[first - 1 :]:
        entry = AuditEntry(action="reasoning.step.created", actor="user:mallory", subject="flow:1", payload={"n": 9})
        forged = seal(entry, event.chain_id, event.seq, prev, datetime.fromisoformat(event.at.replace("Z", "+00:00")))
        services.aws.dynamodb.put_item(TableName=services.aws.table_name("ledger"), Item=to_item(forged))
        prev = forged.hash


def delete(services: Services, chain_id: str, *seqs: int) -> None:
    for seq in seqs:
        services.aws.dynamodb.delete_item(
            TableName=services.aws.table_name("ledger"), Key={"chain_id": {"S": chain_id}, "seq": {"N": str(seq)}}
        )


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (lambda s, e: rewrite_from(s, e, 2), "chain-000 does not extend seq 3"),  # rewritten, then one more event
        (lambda s, e: delete(s, "chain-000", 4, 3), "chain-000 went back from seq 3 to 2"),
        (lambda s, e: delete(s, "chain-000", 4, 3, 2, 1), "chain-000 is gone"),
    ],
)
def test_heads_that_do_not_extend_the_last_checkpoint_are_not_signed(
    services: Services, recorded: Recorded, tamper: object, problem: str
) -> None:
    events = [append(services, "chain-000", n) for n in range(3)]
    append(services, "chain-001", 0)
    first = checkpoint(services)
    events.append(append(services, "chain-000", 3))
    tamper(services, events)  # type: ignore[operator]
    services.ledger._forget("chain-000")  # the head as the next writer would read it
    refused = checkpoint(services)
    assert refused["previous"] == first["checkpoint_id"]
    assert any(str(p).startswith(problem) for p in refused["refused"]), refused  # type: ignore[attr-defined]
    assert checkpoints_of(services).ids() == [first["checkpoint_id"]]  # nothing signed, nothing stored
    assert refusals(recorded) == [0, 1]


def test_the_job_finds_the_last_checkpoint_from_its_day_or_days_before(services: Services, recorded: Recorded) -> None:
    append(services, "chain-000", 0)
    first = checkpoint(services)  # at T0
    store = checkpoints_of(services)
    later = T0 + timedelta(days=3)
    assert store.recent_ids(later) == [first["checkpoint_id"]]  # three days back, a day at a time
    append(services, "chain-000", 1)
    services.clock = lambda: later
    second = checkpoint(services)
    assert store.get(str(second["checkpoint_id"])).prev_checkpoint_hash == store.get(str(first["checkpoint_id"])).hash
    assert store.recent_ids(later) == [second["checkpoint_id"]]  # that day's only: the older is not listed
    assert (
        store.recent_ids(T0 + timedelta(days=30))
        == store.ids()
        == sorted([first["checkpoint_id"], second["checkpoint_id"]])
    )


def chain_root(services: Services, chain_id: str, seq: int) -> str:
    """The RFC 6962 root over the chain's event hashes 1..seq, from the events themselves."""
    events = list(services.ledger.read_chain(chain_id, until_seq=seq))
    return merkle_root([bytes.fromhex(event.hash) for event in events]).hex()


def test_each_head_carries_its_chains_tree_root_grown_from_the_last_checkpoint(
    services: Services, recorded: Recorded
) -> None:
    for n in range(5):
        append(services, "chain-000", n)
    append(services, "chain-001", 0)
    store = checkpoints_of(services)
    first = store.get(str(checkpoint(services)["checkpoint_id"]))
    assert {h.chain_id: h.tree_root for h in first.heads} == {
        "chain-000": chain_root(services, "chain-000", 5),
        "chain-001": chain_root(services, "chain-001", 1),
    }
    for n in range(5, 300):  # past a tile's 256 leaves
        append(services, "chain-000", n)
    second = store.get(str(checkpoint(services)["checkpoint_id"]))
    assert second.head_of("chain-000").tree_root == chain_root(services, "chain-000", 300)  # type: ignore[union-attr]
    assert second.head_of("chain-001") == first.head_of("chain-001")  # not moved: the same root, nothing read
    assert second.recomputed_root() == second.root and second.recomputed_hash() == second.hash


def test_a_checkpoint_from_before_the_trees_still_verifies_and_the_next_builds_them(
    services: Services, recorded: Recorded
) -> None:
    for n in range(3):
        append(services, "chain-000", n)
    ledger, store = services.ledger, checkpoints_of(services)
    heads = [ChainHead(chain_id="chain-000", seq=3, hash=ledger.head("chain-000").hash)]
    old = build_checkpoint(heads, None, T0)  # as the job wrote them: no tree_root at all
    store.put(old)
    assert b"tree_root" not in old.to_bytes()
    append(services, "chain-000", 3)
    newer = store.get(str(checkpoint(services)["checkpoint_id"]))
    assert newer.prev_checkpoint_hash == old.hash
    assert newer.head_of("chain-000").tree_root == chain_root(services, "chain-000", 4)  # type: ignore[union-attr]
    assert verify_ledger(ledger, store).ok
