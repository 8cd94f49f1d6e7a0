"""Tamper-evident audit ledger: sharded hash chains, Merkle checkpoints, inclusion proofs."""
