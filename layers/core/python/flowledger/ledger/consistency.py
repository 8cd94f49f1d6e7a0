"""Consistency proofs between two checkpoints: the later one extends the earlier, chain by chain.

A proof file is RFC 8785 canonical JSON::

    {"format": "flowledger-consistency-proof/1",
     "from": <checkpoint A>, "to": <checkpoint B>,
     "chains": [{"chain_id": "chain-000", "from_seq": 41, "to_seq": 97, "path": ["<hex>", ...]}, ...]}

with one entry per chain of A, in A's order. It proves that B extends A when every chain of A is in B,
no chain went back, and each ``path`` is the RFC 6962 consistency proof from A's tree of that chain
(``from_seq`` event hashes, root ``tree_root`` in A) to B's (``to_seq``, B's ``tree_root``): the events
A covered are, unchanged and in order, the first events B covers. It is O(log n) hashes a chain however
many events came between, and ``check_consistency`` needs nothing but the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.events import HexHash, canonical, read_canonical
from flowledger.ledger.merkle_consistency import InconsistentTrees, consistency_proof_of, verify_consistency
from flowledger.ledger.tiles import ChainTree

FORMAT = "flowledger-consistency-proof/1"


class InvalidConsistency(ValueError):
    """The proof does not show that the later checkpoint extends the earlier; the message says which check failed."""


class ChainConsistency(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    chain_id: str
    from_seq: int = Field(ge=1)
    to_seq: int = Field(ge=1)
    path: list[HexHash]


class ConsistencyProof(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    format: Literal["flowledger-consistency-proof/1"]
    earlier: Checkpoint = Field(alias="from")
    later: Checkpoint = Field(alias="to")
    chains: list[ChainConsistency]

    def to_json(self) -> dict[str, object]:
        """The proof as the file holds it (a head without a tree root written as it always was)."""
        return {
            "format": self.format,
            "from": self.earlier.model_dump(exclude_none=True),
            "to": self.later.model_dump(exclude_none=True),
            "chains": [chain.model_dump() for chain in self.chains],
        }

    def to_bytes(self) -> bytes:
        return canonical(self.to_json())


TreeOf = Callable[[str, int], ChainTree]  # (chain_id, size) -> that chain's tree of that many events


def build_consistency(
    earlier: Checkpoint, later: Checkpoint, tree_of: TreeOf, paths: Mapping[str, list[bytes]] | None = None
) -> ConsistencyProof:
    """The proof that ``later`` extends ``earlier``; ``tree_of(chain_id, size)`` opens a chain's tree.

    ``paths`` are chains' paths already taken from their trees (the checkpoint job's, as it grew them to
    ``later``): those chains' trees are not read again.

    Raises ``InvalidConsistency`` when it does not (a chain gone or gone back), or when either checkpoint
    predates the chain trees.
    """
    chains = []
    for before in earlier.heads:
        after = later.head_of(before.chain_id)
        if after is None:
            raise InvalidConsistency(f"{before.chain_id} is in {earlier.checkpoint_id}, not in {later.checkpoint_id}")
        if before.tree_root is None or after.tree_root is None:
            raise InvalidConsistency("a checkpoint taken before the chains had trees has no consistency proof")
        if after.seq < before.seq:
            raise InvalidConsistency(f"{before.chain_id} went back from seq {before.seq} to {after.seq}")
        known = paths.get(before.chain_id) if paths is not None else None
        if known is not None:
            path = known
        else:
            tree = tree_of(before.chain_id, after.seq)
            if tree.root().hex() != after.tree_root:
                raise InvalidConsistency(
                    f"{before.chain_id}'s stored tree is not the one {later.checkpoint_id} recorded"
                )
            path = consistency_proof_of(before.seq, after.seq, tree.root_of) if before.seq < after.seq else []
        hexed = [node.hex() for node in path]
        chains.append(ChainConsistency(chain_id=before.chain_id, from_seq=before.seq, to_seq=after.seq, path=hexed))
    return ConsistencyProof(format=FORMAT, earlier=earlier, later=later, chains=chains)


def check_consistency(raw: bytes) -> ConsistencyProof:
    """Check a consistency proof file offline; raise ``InvalidConsistency`` naming the first failed check."""
    proof = read_canonical(raw, ConsistencyProof, InvalidConsistency, "a consistency proof")
    for checkpoint in (proof.earlier, proof.later):
        if checkpoint.recomputed_hash() != checkpoint.hash or checkpoint.recomputed_root() != checkpoint.root:
            raise InvalidConsistency(f"checkpoint {checkpoint.checkpoint_id} does not match its hash or root")
    if [chain.chain_id for chain in proof.chains] != [head.chain_id for head in proof.earlier.heads]:
        raise InvalidConsistency("the proof must have one entry per chain of the earlier checkpoint, in its order")
    for chain, before in zip(proof.chains, proof.earlier.heads, strict=True):
        after = proof.later.head_of(chain.chain_id)
        if after is None:
            raise InvalidConsistency(f"{chain.chain_id} disappeared")
        if (chain.from_seq, chain.to_seq) != (before.seq, after.seq):
            raise InvalidConsistency(f"{chain.chain_id}'s sizes are not the checkpoints'")
        if before.tree_root is None or after.tree_root is None:
            raise InvalidConsistency(f"{chain.chain_id} has no tree root in one of the checkpoints")
        if before.seq == after.seq and before.hash != after.hash:
            raise InvalidConsistency(f"{chain.chain_id}'s head at seq {before.seq} changed")
        try:
            verify_consistency(
                before.seq,
                after.seq,
                bytes.fromhex(before.tree_root),
                bytes.fromhex(after.tree_root),
                [bytes.fromhex(node) for node in chain.path],
            )
        except InconsistentTrees as exc:
            raise InvalidConsistency(f"{chain.chain_id}: {exc}") from None
    return proof
