"""A log in memory for the witness tests: chains grown as RFC 6962 trees, checkpoints signed as notes."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from flowledger.ledger.checkpoint_notes import checkpoint_text
from flowledger.ledger.checkpoints import ChainHead, Checkpoint, build_checkpoint
from flowledger.ledger.consistency import build_consistency
from flowledger.ledger.merkle import leaf_hash
from flowledger.ledger.signed_note import ED25519, Note, Signature, VerifierKey
from flowledger.ledger.tiles import ChainTree
from flowledger.ledger.witnessing import AddCheckpoint
from tests.memory_tiles import MemoryTiles

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


class MemoryLog:
    """Chains of random events; each ``checkpoint`` folds their heads, as the checkpoint job does."""

    def __init__(self, origin: str = "flowledger/test/audit", chains: tuple[str, ...] = ("chain-000", "chain-001")):
        self.private_key = Ed25519PrivateKey.generate()
        raw = self.private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key = VerifierKey(origin, ED25519, raw)
        self.tiles = {chain: MemoryTiles() for chain in chains}
        self.sizes = dict.fromkeys(chains, 0)
        self.last: Checkpoint | None = None
        self.head_hashes: dict[tuple[str, int], str] = {}  # a chain's head at a size keeps its hash
        self.taken = 0

    def grow(self, **counts: int) -> Checkpoint:
        """Append ``counts[chain]`` events to each chain (``chain_000=3``), then take a checkpoint."""
        for name, count in counts.items():
            chain = name.replace("_", "-")
            ChainTree(self.tiles[chain], self.sizes[chain]).append(leaf_hash(os.urandom(32)) for _ in range(count))
            self.sizes[chain] += count
        return self.checkpoint_of(self.sizes, self.tiles)

    def checkpoint_of(self, sizes: dict[str, int], tiles: dict[str, MemoryTiles]) -> Checkpoint:
        heads = [
            ChainHead(
                chain_id=chain,
                seq=size,
                hash=self.head_hashes.setdefault((chain, size), os.urandom(32).hex()),
                tree_root=ChainTree(tiles[chain], size).root().hex(),
            )
            for chain, size in sizes.items()
            if size
        ]
        self.taken += 1
        self.last = build_checkpoint(heads, self.last, T0 + timedelta(minutes=self.taken))
        return self.last

    def note(self, checkpoint: Checkpoint, signer: Ed25519PrivateKey | None = None) -> str:
        text = checkpoint_text(self.key.name, checkpoint)
        signature = (signer or self.private_key).sign(text.encode())
        return Note(text, (Signature(self.key.name, self.key.key_id, signature),)).to_text()

    def proof(self, earlier: Checkpoint, later: Checkpoint) -> dict[str, Any]:
        built = build_consistency(earlier, later, lambda chain, size: ChainTree(self.tiles[chain], size))
        parsed: dict[str, Any] = json.loads(built.to_bytes())
        return parsed

    def request(self, checkpoint: Checkpoint, since: Checkpoint | None, **changes: Any) -> bytes:
        """An add-checkpoint body for ``checkpoint`` from the witness's ``since``."""
        fields: dict[str, Any] = {
            "old_size": since.size if since else 0,
            "note": self.note(checkpoint),
            "checkpoint": checkpoint,
        }
        if "consistency" not in changes:
            fields["consistency"] = self.proof(since, checkpoint) if since else None
        return AddCheckpoint(**{**fields, **changes}).to_bytes()
