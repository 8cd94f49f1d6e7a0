"""The checkpoint job's side of the chain trees: grow each chain's tree to its new head and record its root."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flowledger.ledger.checkpoints import ChainHead, Checkpoint
from flowledger.ledger.events import AuditEvent
from flowledger.ledger.merkle import leaf_hash
from flowledger.ledger.store import Ledger
from flowledger.ledger.tile_store import DynamoTiles
from flowledger.ledger.tiles import ChainTree


def chain_tree(dynamodb: Any, table: str, chain_id: str, size: int) -> ChainTree:
    """Chain ``chain_id``'s tree of ``size`` leaves, read from its tiles as needed."""
    return ChainTree(DynamoTiles(dynamodb, table, chain_id), size)


def with_tree_roots(
    heads: Sequence[ChainHead],
    previous: Checkpoint | None,
    read: Mapping[str, list[AuditEvent]],
    ledger: Ledger,
    dynamodb: Any,
    table: str,
) -> list[ChainHead]:
    """``heads`` with each chain's tree root, its tiles grown by the events since ``previous``.

    ``read`` holds the events the extension check read since ``previous``; a chain ``previous`` has no
    tree root for (a checkpoint from before the trees, or a new chain) is read whole, once.
    """
    rooted = []
    for head in heads:
        before = previous.head_of(head.chain_id) if previous is not None else None
        if before is not None and before.tree_root is not None and before.seq == head.seq:
            rooted.append(head.model_copy(update={"tree_root": before.tree_root}))
            continue
        if before is not None and before.tree_root is not None:
            size, events = before.seq, read[head.chain_id]  # the extension check read every moved chain
        else:
            size, events = 0, list(ledger.read_chain(head.chain_id, until_seq=head.seq))
        tree = chain_tree(dynamodb, table, head.chain_id, size)
        tree.append(leaf_hash(bytes.fromhex(event.hash)) for event in events)
        if tree.size != head.seq:
            raise ValueError(f"{head.chain_id}: {tree.size} events read, its head is at seq {head.seq}")
        rooted.append(head.model_copy(update={"tree_root": tree.root().hex()}))
    return rooted
