"""The largest checkpoint the ledger sends a witness: ``WITNESSED_CHAINS`` chains, every one moved from
``MAX_CHAIN_EVENTS - 1`` to ``MAX_CHAIN_EVENTS`` events (each with its longest consistency path).

What ``MAX_REQUEST_BYTES`` is sized from: ``bench/checkpoints_scale.py`` submits it to a real witness, and
``tests/unit/test_witness_scale.py`` checks that it stays within the limit.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from flowledger.ledger.checkpoints import ChainHead, Checkpoint, build_checkpoint
from flowledger.ledger.consistency import ConsistencyProof, build_consistency
from flowledger.ledger.merkle import node_hash, split
from flowledger.ledger.witnessing import MAX_CHAIN_EVENTS


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


def checkpoints_at_the_bound(chains: int, at: datetime) -> tuple[Checkpoint, Checkpoint, ConsistencyProof]:
    """Two checkpoints of ``chains`` chains five minutes apart, every chain moved by one event at the bound's size,
    and the consistency proof between them."""
    ids = [f"chain-{n:03d}" for n in range(chains)]
    trees = {chain: VirtualTree(chain, MAX_CHAIN_EVENTS) for chain in ids}

    def heads(size: int) -> list[ChainHead]:
        return [
            ChainHead(
                chain_id=chain,
                seq=size,
                hash=hashlib.sha256(f"{chain}.{size}".encode()).hexdigest(),
                tree_root=trees[chain].root_of(0, size).hex(),
            )
            for chain in ids
        ]

    earlier = build_checkpoint(heads(MAX_CHAIN_EVENTS - 1), None, at)
    later = build_checkpoint(heads(MAX_CHAIN_EVENTS), earlier, at + timedelta(minutes=5))
    proof = build_consistency(earlier, later, lambda chain, size: trees[chain])  # type: ignore[arg-type,return-value]
    return earlier, later, proof
