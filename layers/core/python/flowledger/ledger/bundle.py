"""Evidence bundles: everything an outsider needs to check one subject's events without trusting the operator.

A bundle is RFC 8785 canonical JSON (format ``flowledger-evidence-bundle/1``)::

    {"format": "flowledger-evidence-bundle/1",
     "subject": "flow:fl_...",
     "events": [<the subject's events the checkpoint covers, in time order>],
     "chains": [{"chain_id": "chain-003", "size": 6250, "nodes": ["<hex>", ...]}, ...],
     "checkpoint": <the first checkpoint that covers them all>,
     "checkpoint_note": "<that checkpoint as a signed note, with the witnesses' cosignatures>",
     "consistency": <flowledger-consistency-proof/1 from it to the latest checkpoint, or null>,
     "latest_note": "<the latest checkpoint's signed, cosigned note, or null>"}

Per chain, ``nodes`` is one multi-leaf inclusion proof (``merkle_consistency.multi_inclusion_proof_of``):
with the events' hashes as leaves at ``seq - 1`` it gives the chain's ``tree_root`` in the checkpoint,
whose signed note the ledger's key (and the witnesses') signed. ``tools/verify_bundle.py`` checks all of
it with the Python standard library and ``cryptography`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from flowledger.ledger.checkpoints import Checkpoint
from flowledger.ledger.consistency import ConsistencyProof, TreeOf
from flowledger.ledger.events import AuditEvent, HexHash, canonical
from flowledger.ledger.merkle_consistency import multi_inclusion_proof_of

FORMAT = "flowledger-evidence-bundle/1"
# Inside a Lambda response (6 MB) however scattered the events: ~600 bytes an event and, at worst, a path of
# ~17 nodes (67 bytes each) apiece: about 3.5 MB. A subject with more events is refused, not cut.
MAX_EVENTS = 2_000


class ChainEvidence(BaseModel):
    """One chain's multi-leaf inclusion proof for the bundle's events on it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chain_id: str
    size: int = Field(ge=1)  # the chain's tree size in the checkpoint: its head's seq
    nodes: list[HexHash]


class EvidenceBundle(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["flowledger-evidence-bundle/1"]
    subject: str
    events: list[AuditEvent]
    chains: list[ChainEvidence]
    checkpoint: Checkpoint
    checkpoint_note: str
    consistency: ConsistencyProof | None
    latest_note: str | None

    def to_bytes(self) -> bytes:
        return canonical(
            {
                "format": self.format,
                "subject": self.subject,
                "events": [event.model_dump() for event in self.events],
                "chains": [chain.model_dump() for chain in self.chains],
                "checkpoint": self.checkpoint.model_dump(exclude_none=True),
                "checkpoint_note": self.checkpoint_note,
                "consistency": self.consistency.to_json() if self.consistency else None,
                "latest_note": self.latest_note,
            }
        )


def build_bundle(
    subject: str,
    events: Sequence[AuditEvent],
    checkpoint: Checkpoint,
    checkpoint_note: str,
    tree_of: TreeOf,
    consistency: ConsistencyProof | None = None,
    latest_note: str | None = None,
) -> EvidenceBundle:
    """The bundle of ``events`` (every one covered by ``checkpoint``); ``tree_of`` opens a chain's tree.

    Raises ``ValueError`` when a chain has no tree root in ``checkpoint`` or its tree is not the one recorded.
    """
    chains = []
    by_chain = sorted(events, key=lambda event: (event.chain_id, event.seq))
    for chain_id, on_chain in groupby(by_chain, key=lambda event: event.chain_id):
        head = checkpoint.head_of(chain_id)
        if head is None or head.tree_root is None:
            raise ValueError(f"checkpoint {checkpoint.checkpoint_id} has no tree of {chain_id}")
        tree = tree_of(chain_id, head.seq)
        if tree.root().hex() != head.tree_root:
            raise ValueError(f"{chain_id}'s stored tree is not the one {checkpoint.checkpoint_id} recorded")
        nodes = multi_inclusion_proof_of(head.seq, [event.seq - 1 for event in on_chain], tree.root_of)
        chains.append(ChainEvidence(chain_id=chain_id, size=head.seq, nodes=[node.hex() for node in nodes]))
    return EvidenceBundle(
        format=FORMAT,
        subject=subject,
        events=list(events),
        chains=chains,
        checkpoint=checkpoint,
        checkpoint_note=checkpoint_note,
        consistency=consistency,
        latest_note=latest_note,
    )
