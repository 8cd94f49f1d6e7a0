"""The largest checkpoint the ledger can send a witness (``WITNESSED_CHAINS`` chains, every one moved, each at
``MAX_CHAIN_EVENTS`` events with the longest consistency path: ``bench/witness_bound.py``) fits the limit it is
sized from, and a body a byte over it is 413. That a real witness cosigns that body is proven in ``make bench``
(``bench/checkpoints_scale.py``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.merkle_consistency import consistency_proof_of
from flowledger.ledger.witnessing import (
    ADD_CHECKPOINT,
    MAX_CHAIN_EVENTS,
    MAX_REQUEST_BYTES,
    WITNESSED_CHAINS,
    AddCheckpoint,
)
from flowledger.witness.keys import FileWitnessKey
from flowledger.witness.service import Witness, answer
from flowledger.witness.state import FileState
from tests.bench_modules import bench_module
from tests.witness_log import MemoryLog

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
NOW = 1_796_000_000


@pytest.fixture(scope="module")
def bounds() -> ModuleType:
    return bench_module("witness_bound")


def test_the_longest_path_of_a_chain_within_the_bound_is_its_size_in_bits(bounds: ModuleType) -> None:
    """The bound the limit is sized from: no chain of at most MAX_CHAIN_EVENTS has a longer consistency path."""
    longest = MAX_CHAIN_EVENTS.bit_length()  # 41 for 2^40
    zero = bounds.VirtualTree("chain-000", MAX_CHAIN_EVENTS).root_of
    assert len(consistency_proof_of(MAX_CHAIN_EVENTS - 1, MAX_CHAIN_EVENTS, zero)) == longest
    for m, n in [(3, MAX_CHAIN_EVENTS // 2 + 1), (MAX_CHAIN_EVENTS // 2 + 1, MAX_CHAIN_EVENTS), (5, 2**39 + 7)]:
        assert len(consistency_proof_of(m, n, zero)) <= longest


@pytest.fixture(scope="module")
def bound(bounds: ModuleType) -> tuple[MemoryLog, Checkpoint, Checkpoint, bytes]:
    log = MemoryLog()
    earlier, later, proof = bounds.checkpoints_at_the_bound(WITNESSED_CHAINS, T0)
    body = AddCheckpoint(
        old_size=earlier.size, note=log.note(later), checkpoint=later, consistency=proof.to_json()
    ).to_bytes()
    return log, earlier, later, body


def witness_holding(log: MemoryLog, held: Checkpoint, folder: Path) -> Witness:
    state = FileState(folder)
    assert state.swap(log.key.name, None, held)
    return Witness(FileWitnessKey("witness.example", Ed25519PrivateKey.generate()), [log.key], state, lambda: NOW)


def test_the_limit_is_a_fifth_over_the_bound_and_a_byte_more_is_413(
    bound: tuple[MemoryLog, Checkpoint, Checkpoint, bytes], tmp_path: Path
) -> None:
    log, earlier, later, body = bound
    assert len(later.heads) == WITNESSED_CHAINS
    assert len(body) > 1 << 20  # over the old 1 MiB limit
    assert len(body) * 1.15 < MAX_REQUEST_BYTES < 6_000_000 * 3 / 4  # headroom; base64 within Lambda's 6 MB
    witness = witness_holding(log, earlier, tmp_path)
    padded = body + b" " * (MAX_REQUEST_BYTES + 1 - len(body))
    assert answer(witness, "POST", ADD_CHECKPOINT, padded, len(padded)).status == 413
    assert answer(witness, "POST", ADD_CHECKPOINT, None, MAX_REQUEST_BYTES + 1).status == 413  # by its length
    assert FileState(tmp_path).read(log.key.name) == earlier  # refused before anything was read
