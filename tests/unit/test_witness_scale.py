"""A witness takes the largest checkpoint the ledger can produce (``WITNESSED_CHAINS`` chains, every one moved,
each at ``MAX_CHAIN_EVENTS`` events with the longest consistency path) and cosigns it; a body over the limit
is still 413, and the body at the bound is what ``MAX_REQUEST_BYTES`` is sized from."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from flowledger.ledger.checkpoints import ChainHead, Checkpoint, build_checkpoint
from flowledger.ledger.consistency import build_consistency
from flowledger.ledger.merkle import node_hash, split
from flowledger.ledger.merkle_consistency import consistency_proof_of
from flowledger.ledger.witnessing import (
    ADD_CHECKPOINT,
    MAX_CHAIN_EVENTS,
    MAX_REQUEST_BYTES,
    WITNESSED_CHAINS,
    AddCheckpoint,
)
from flowledger.witness.keys import FileWitnessKey
from flowledger.witness.service import Answer, Witness, answer
from flowledger.witness.state import FileState
from tests.witness_log import MemoryLog

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
NOW = 1_796_000_000


class VirtualTree:
    """A chain's RFC 6962 tree of any size, every leaf the same (a hash of the chain id): a perfect subtree's
    root then depends on its height alone, so any root or consistency proof takes O(log n) hashes, and they
    verify as a real chain's do."""

    def __init__(self, chain_id: str, size: int) -> None:
        self.size = size
        self._perfect = [hashlib.sha256(chain_id.encode()).digest()]  # the root of 2**height leaves, by height
        while len(self._perfect) <= size.bit_length():
            self._perfect.append(node_hash(self._perfect[-1], self._perfect[-1]))

    def root_of(self, start: int, end: int) -> bytes:
        width = end - start
        if width & (width - 1) == 0:
            return self._perfect[width.bit_length() - 1]
        k = split(width)
        return node_hash(self.root_of(start, start + k), self.root_of(start + k, end))

    def root(self) -> bytes:
        return self.root_of(0, self.size)


def test_the_longest_path_of_a_chain_within_the_bound_is_its_size_in_bits() -> None:
    """The bound the limit is sized from: no chain of at most MAX_CHAIN_EVENTS has a longer consistency path."""
    longest = MAX_CHAIN_EVENTS.bit_length()  # 41 for 2^40
    zero = VirtualTree("chain-000", MAX_CHAIN_EVENTS).root_of
    assert len(consistency_proof_of(MAX_CHAIN_EVENTS - 1, MAX_CHAIN_EVENTS, zero)) == longest
    for m, n in [(3, MAX_CHAIN_EVENTS // 2 + 1), (MAX_CHAIN_EVENTS // 2 + 1, MAX_CHAIN_EVENTS), (5, 2**39 + 7)]:
        assert len(consistency_proof_of(m, n, zero)) <= longest


def at_the_bound(log: MemoryLog) -> tuple[Checkpoint, Checkpoint, bytes]:
    """Two checkpoints of WITNESSED_CHAINS chains, every chain moved from MAX_CHAIN_EVENTS - 1 to MAX_CHAIN_EVENTS
    events (its longest path), and the body submitting the second from the first."""
    chains = [f"chain-{n:03d}" for n in range(WITNESSED_CHAINS)]
    trees = {chain: VirtualTree(chain, MAX_CHAIN_EVENTS) for chain in chains}

    def heads(size: int) -> list[ChainHead]:
        return [
            ChainHead(
                chain_id=chain,
                seq=size,
                hash=hashlib.sha256(f"{chain}.{size}".encode()).hexdigest(),
                tree_root=trees[chain].root_of(0, size).hex(),
            )
            for chain in chains
        ]

    earlier = build_checkpoint(heads(MAX_CHAIN_EVENTS - 1), None, T0)
    later = build_checkpoint(heads(MAX_CHAIN_EVENTS), earlier, T0 + timedelta(minutes=5))
    proof = build_consistency(earlier, later, lambda chain, size: trees[chain])  # type: ignore[arg-type,return-value]
    body = AddCheckpoint(
        old_size=earlier.size, note=log.note(later), checkpoint=later, consistency=proof.to_json()
    ).to_bytes()
    return earlier, later, body


@pytest.fixture(scope="module")
def bound() -> tuple[MemoryLog, Checkpoint, Checkpoint, bytes]:
    log = MemoryLog()
    return (log, *at_the_bound(log))


def witness_holding(log: MemoryLog, held: Checkpoint, folder: Path) -> Witness:
    state = FileState(folder)
    assert state.swap(log.key.name, None, held)
    return Witness(FileWitnessKey("witness.example", Ed25519PrivateKey.generate()), [log.key], state, lambda: NOW)


def test_a_witness_cosigns_the_largest_checkpoint_the_ledger_can_produce(
    bound: tuple[MemoryLog, Checkpoint, Checkpoint, bytes], tmp_path: Path
) -> None:
    log, earlier, later, body = bound
    assert len(later.heads) == WITNESSED_CHAINS
    assert 1 << 20 < len(body) <= MAX_REQUEST_BYTES  # over the old 1 MiB limit, within the one sized for it
    witness = witness_holding(log, earlier, tmp_path)
    reply = answer(witness, "POST", ADD_CHECKPOINT, body, len(body))
    assert reply.status == 200 and reply.body.startswith("\u2014 witness.example "), reply
    assert FileState(tmp_path).read(log.key.name) == later


def test_the_limit_is_a_fifth_over_the_bound_and_a_byte_more_is_413(
    bound: tuple[MemoryLog, Checkpoint, Checkpoint, bytes], tmp_path: Path
) -> None:
    log, earlier, _, body = bound
    assert len(body) * 1.15 < MAX_REQUEST_BYTES < 6_000_000 * 3 / 4  # headroom; base64 within Lambda's 6 MB
    witness = witness_holding(log, earlier, tmp_path)
    padded = body + b" " * (MAX_REQUEST_BYTES + 1 - len(body))
    assert answer(witness, "POST", ADD_CHECKPOINT, padded, len(padded)).status == 413
    assert answer(witness, "POST", ADD_CHECKPOINT, None, MAX_REQUEST_BYTES + 1).status == 413  # by its length
    assert FileState(tmp_path).read(log.key.name) == earlier  # refused before anything was read


def test_a_witness_refuses_the_bound_with_one_path_wrong(
    bound: tuple[MemoryLog, Checkpoint, Checkpoint, bytes], tmp_path: Path
) -> None:
    """Cosigning the bound is not the witness skipping checks on a large body: the last chain's path is checked."""
    import json

    from flowledger.ledger.events import canonical

    log, earlier, later, body = bound
    parsed = json.loads(body)
    parsed["consistency"]["chains"][-1]["path"][0] = "7" * 64
    witness = witness_holding(log, earlier, tmp_path)
    reply: Answer = answer(witness, "POST", ADD_CHECKPOINT, canonical(parsed))
    last = later.heads[-1].chain_id
    assert reply.status == 422 and last in reply.body, reply
    assert FileState(tmp_path).read(log.key.name) == earlier
