"""The checkpoint job checks and grows the chains a chain at a time in each of its threads: it never holds more
than a chain's new events a thread, the roots it records are the trees of the events and the paths it keeps
their consistency proofs, a chain that does not extend the last checkpoint is named beside every other such
chain while no tree grows past it, and the heads are read several at a time."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from flowledger.ledger.audit import CHAIN_READERS, chain_heads
from flowledger.ledger.chain import GENESIS, Position
from flowledger.ledger.chain_trees import extend_trees
from flowledger.ledger.checkpoints import ChainHead, Checkpoint, build_checkpoint
from flowledger.ledger.consistency import build_consistency, check_consistency
from flowledger.ledger.events import AuditEntry, AuditEvent, seal
from flowledger.ledger.merkle import merkle_root
from flowledger.ledger.tiles import ChainTree
from tests.memory_tiles import MemoryTiles

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


class MemoryChains:
    """A ledger's chains in memory, read as the Ledger reads them: each event a new object, the ones alive watched."""

    def __init__(self, chains: int) -> None:
        self.events: dict[str, list[AuditEvent]] = {f"chain-{n:03d}": [] for n in range(chains)}
        self.tiles = {chain: MemoryTiles() for chain in self.events}
        self.alive = 0  # events read and not yet freed
        self.most_alive = 0
        self._lock = threading.RLock()

    def chain_ids(self) -> list[str]:
        return list(self.events)

    def grow(self, count: int) -> list[ChainHead]:
        for chain, events in self.events.items():
            for _ in range(count):
                last = events[-1].hash if events else GENESIS.hash
                entry = AuditEntry(action="reasoning.step.created", actor="user:a", subject=f"flow:{chain}")
                events.append(seal(entry, chain, len(events) + 1, last, T0))
        return [ChainHead(chain_id=c, seq=len(e), hash=e[-1].hash) for c, e in self.events.items() if e]

    def head(self, chain_id: str) -> Position:
        events = self.events[chain_id]
        return Position(len(events), events[-1].hash) if events else GENESIS

    def read_chain(self, chain_id: str, after_seq: int = 0, until_seq: int | None = None) -> Iterator[AuditEvent]:
        for event in self.events[chain_id][after_seq:until_seq]:
            read = event.model_copy()  # a new object, as each page parsed is
            with self._lock:
                self.alive += 1
                self.most_alive = max(self.most_alive, self.alive)
            weakref.finalize(read, self._freed)
            yield read

    def _freed(self) -> None:
        with self._lock:
            self.alive -= 1

    def tree(self, chain_id: str, size: int) -> ChainTree:
        return ChainTree(self.tiles[chain_id], size)


def extended(
    chains: MemoryChains, heads: list[ChainHead], previous: Checkpoint | None, workers: int = 1
) -> tuple[Checkpoint, dict[str, list[bytes]]]:
    result = extend_trees(heads, previous, chains, chains.tree, workers)  # type: ignore[arg-type]
    assert result.problems == []
    return build_checkpoint(result.heads, previous, T0 + timedelta(minutes=5 if previous else 0)), result.paths


@pytest.mark.parametrize("workers", [1, CHAIN_READERS])
def test_a_chains_events_at_most_are_held_a_worker_and_the_roots_are_the_events_trees(workers: int) -> None:
    chains = MemoryChains(12)
    first, paths = extended(chains, chains.grow(3), None, workers)
    assert paths == {}  # no tree before: no consistency path
    chains.most_alive = 0
    second, paths = extended(chains, chains.grow(40), first, workers)  # 480 new events, 40 a chain
    assert 0 < chains.most_alive <= 40 * workers, chains.most_alive  # a chain's a worker (the old job held all 480)
    for head in second.heads:
        hashes = [bytes.fromhex(event.hash) for event in chains.events[head.chain_id]]
        assert head.tree_root == merkle_root(hashes).hex() and head.seq == 43
    # The paths taken as the trees grew are the consistency proof's, which checks.
    proof = build_consistency(first, second, lambda chain, size: ChainTree(chains.tiles[chain], size))
    assert proof == build_consistency(first, second, lambda chain, size: chains.tree("none", 0), paths)
    check_consistency(proof.to_bytes())


def rewritten(chains: MemoryChains, chain_id: str, seq: int) -> None:
    """The chain's history from ``seq`` on replaced by another, every hash and link redone."""
    events = chains.events[chain_id]
    del events[seq - 1 :]
    for n in range(seq, seq + 3):
        entry = AuditEntry(action="reasoning.step.created", actor="user:mallory", subject="flow:x")
        events.append(seal(entry, chain_id, n, events[-1].hash, T0))


def test_every_chain_that_does_not_extend_is_named_and_no_tree_grows_past_the_first() -> None:
    chains = MemoryChains(4)
    first, _ = extended(chains, chains.grow(3), None)
    chains.grow(2)
    rewritten(chains, "chain-001", 2)
    chains.events["chain-003"].clear()  # gone
    tiles_before = {chain: dict(tiles.tiles) for chain, tiles in chains.tiles.items()}
    heads = [ChainHead(chain_id=c, seq=len(e), hash=e[-1].hash) for c, e in chains.events.items() if e]
    pooled = extend_trees(heads, first, chains, chains.tree, CHAIN_READERS)  # type: ignore[arg-type]
    for chain, tiles in chains.tiles.items():  # as before the pool's run, which may grow a chain beside a problem
        tiles.tiles = dict(tiles_before[chain])
    result = extend_trees(heads, first, chains, chains.tree)  # type: ignore[arg-type]
    assert result.problems == pooled.problems and result.heads == pooled.heads == [] and result.paths == {}
    assert [problem.split(" ")[0] for problem in result.problems] == ["chain-001", "chain-003"], result.problems
    assert "does not extend seq 3" in result.problems[0] and "is gone" in result.problems[1]
    # chain-000 was checked and grown before chain-001's problem; nothing after it grew.
    assert chains.tiles["chain-002"].tiles == tiles_before["chain-002"]
    assert chains.tiles["chain-000"].tiles != tiles_before["chain-000"]
    # The tiles grown ahead of the checkpoint do not change the trees it recorded.
    assert ChainTree(chains.tiles["chain-000"], 3).root().hex() == first.head_of("chain-000").tree_root  # type: ignore[union-attr]


def test_the_heads_are_read_several_at_a_time_and_come_in_chain_order() -> None:
    chains = MemoryChains(16)
    chains.grow(1)
    chains.events["chain-005"].clear()  # no event yet: no head
    together = threading.Barrier(2, timeout=5)  # a read waits for another one under way: never one at a time
    read = chains.head

    def head(chain_id: str) -> Position:
        together.wait()
        return read(chain_id)

    chains.head = head  # type: ignore[method-assign]
    heads = chain_heads(chains)  # type: ignore[arg-type]
    assert [h.chain_id for h in heads] == [c for c in chains.chain_ids() if c != "chain-005"]
    assert all(h.position == read(h.chain_id) for h in heads) and CHAIN_READERS > 1


def test_a_checkpoint_finds_each_chains_head_and_no_other() -> None:
    """``head_of`` bisects the heads in chain id order (which puts chain-1000 between chain-100 and chain-101)."""
    ids = [f"chain-{n:03d}" for n in range(1100)]
    heads = [ChainHead(chain_id=chain, seq=n + 1, hash=f"{n:064x}") for n, chain in enumerate(ids)]
    checkpoint = build_checkpoint(heads, None, T0)
    assert all(checkpoint.head_of(chain) == head for chain, head in zip(ids, heads, strict=True))
    assert [checkpoint.head_of(chain) for chain in ("chain-", "chain-1100", "chain-99", "chain-9999", "z")] == [
        None
    ] * 5
