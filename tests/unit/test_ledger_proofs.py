"""Inclusion proofs check offline, and a proof with any byte changed fails."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flowledger.ledger.checkpoints import ChainHead, build_checkpoint
from flowledger.ledger.events import GENESIS_HASH, AuditEntry, AuditEvent, seal
from flowledger.ledger.proofs import InvalidProof, build_proof, check_proof

START = datetime(2026, 11, 30, tzinfo=UTC)


def chain(chain_id: str, size: int) -> list[AuditEvent]:
    events, prev = [], GENESIS_HASH
    for seq in range(1, size + 1):
        entry = AuditEntry(
            action="reasoning.flow.started",
            actor="arn:aws:iam::1:user/x",
            subject=f"flow:{seq}",
            refs={"trace_id": f"t{seq}"},
            payload={"steps": seq, "safe": seq % 2 == 0},
        )
        events.append(seal(entry, chain_id, seq, prev, START + timedelta(seconds=seq)))
        prev = events[-1].hash
    return events


@pytest.fixture(scope="module")
def proof_bytes() -> bytes:
    chains = {f"chain-{n:03d}": chain(f"chain-{n:03d}", n + 2) for n in range(5)}
    heads = [ChainHead(chain_id=c, seq=e[-1].seq, hash=e[-1].hash) for c, e in chains.items()]
    first = build_checkpoint(heads[:2], None, START)
    checkpoint = build_checkpoint(heads, first, START + timedelta(minutes=5))
    events = chains["chain-003"]
    return build_proof(events[1], events[2:], checkpoint).to_bytes()


def test_a_valid_proof_checks(proof_bytes: bytes) -> None:
    proof = check_proof(proof_bytes)
    assert proof.event.event_id == "chain-003.2" and len(proof.segment) == 3


def test_a_trailing_newline_is_tolerated(proof_bytes: bytes) -> None:
    assert check_proof(proof_bytes + b"\n").event.seq == 2


def test_a_proof_of_the_head_itself_has_an_empty_segment() -> None:
    events = chain("chain-000", 3)
    checkpoint = build_checkpoint([ChainHead(chain_id="chain-000", seq=3, hash=events[-1].hash)], None, START)
    assert check_proof(build_proof(events[-1], [], checkpoint).to_bytes()).segment == []


def test_a_proof_with_any_byte_changed_fails(proof_bytes: bytes) -> None:
    accepted = []
    for position in range(len(proof_bytes)):
        changed = bytearray(proof_bytes)
        changed[position] ^= 0x01
        try:
            check_proof(bytes(changed))
        except InvalidProof:
            continue
        accepted.append(position)
    assert accepted == []


def test_a_segment_that_stops_short_of_the_head_fails() -> None:
    events = chain("chain-000", 4)
    checkpoint = build_checkpoint([ChainHead(chain_id="chain-000", seq=4, hash=events[-1].hash)], None, START)
    short = build_proof(events[0], events[1:3], checkpoint)
    with pytest.raises(InvalidProof, match="not at the checkpoint's head"):
        check_proof(short.to_bytes())
