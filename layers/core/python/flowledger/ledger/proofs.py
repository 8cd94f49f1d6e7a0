"""Inclusion proofs: an event, its chain up to a checkpointed head, and that head's Merkle path.

A proof file is RFC 8785 canonical JSON, so it has exactly one valid byte form: ``check_proof``
rejects any file whose bytes differ from that form, and then recomputes every hash.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from flowledger.ledger.chain import GENESIS, Position, verify_chain
from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.events import AuditEvent, HexHash, canonical, read_canonical
from flowledger.ledger.merkle import root_from_path

FORMAT = "flowledger-inclusion-proof/1"


class InvalidProof(ValueError):
    """The proof does not prove what it claims; the message says which check failed."""


class InclusionProof(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["flowledger-inclusion-proof/1"]
    event: AuditEvent
    segment: list[AuditEvent]  # the events after ``event`` up to the checkpointed head
    leaf_index: int = Field(ge=0)
    tree_size: int = Field(ge=1)
    path: list[Annotated[HexHash, Field()]]
    checkpoint: Checkpoint

    def to_bytes(self) -> bytes:
        return canonical(self.model_dump())


def build_proof(event: AuditEvent, segment: list[AuditEvent], checkpoint: Checkpoint) -> InclusionProof:
    """The proof that ``event`` is in ``checkpoint`` (``segment`` runs from it to the chain's head there)."""
    index, path = checkpoint.path_for(event.chain_id)
    return InclusionProof(
        format=FORMAT,
        event=event,
        segment=segment,
        leaf_index=index,
        tree_size=len(checkpoint.heads),
        path=path,
        checkpoint=checkpoint,
    )


def check_proof(raw: bytes) -> InclusionProof:
    """Check a proof file offline; raise :class:`InvalidProof` naming the first failed check."""
    proof = read_canonical(raw, InclusionProof, InvalidProof, "a proof file")
    event, checkpoint = proof.event, proof.checkpoint
    anchor = Position(event.seq - 1, event.prev_hash) if event.seq > 1 else GENESIS
    report = verify_chain(event.chain_id, [event, *proof.segment], anchor=anchor)
    if report.bad is not None:
        raise InvalidProof(report.bad.describe())
    head = checkpoint.head_of(event.chain_id)
    if head is None or head.position != report.head:
        raise InvalidProof(f"the segment ends at seq {report.head.seq}, not at the checkpoint's head of the chain")
    if proof.tree_size != len(checkpoint.heads) or checkpoint.heads[proof.leaf_index] != head:
        raise InvalidProof("leaf index or tree size does not match the checkpoint")
    root = root_from_path(proof.leaf_index, proof.tree_size, head.leaf(), [bytes.fromhex(p) for p in proof.path])
    if root is None or root.hex() != checkpoint.root:
        raise InvalidProof("the Merkle path does not lead to the checkpoint's root")
    if checkpoint.recomputed_hash() != checkpoint.hash:
        raise InvalidProof("the checkpoint does not match its hash")
    return proof
