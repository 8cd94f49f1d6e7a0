"""The checkpoint job's side of the chain trees: check each chain extends the last checkpoint, grow its tree to
its new head and record its root, a chain at a time."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from flowledger.ledger.checkpoints import ChainHead, Checkpoint
from flowledger.ledger.consistency import TreeOf
from flowledger.ledger.events import AuditEvent
from flowledger.ledger.extension import chain_extension_problem
from flowledger.ledger.merkle import leaf_hash
from flowledger.ledger.merkle_consistency import consistency_proof_of
from flowledger.ledger.store import Ledger
from flowledger.ledger.tile_store import DynamoTiles
from flowledger.ledger.tiles import ChainTree


def chain_tree(dynamodb: Any, table: str, chain_id: str, size: int) -> ChainTree:
    """Chain ``chain_id``'s tree of ``size`` leaves, read from its tiles as needed."""
    return ChainTree(DynamoTiles(dynamodb, table, chain_id), size)


@dataclass(frozen=True)
class Extended:
    """The heads with their tree roots, or (``problems``) why they do not extend the last checkpoint."""

    heads: list[ChainHead]  # empty when there are problems
    problems: list[str]
    # Each chain's consistency path from its tree in the last checkpoint to its new one, taken while the tree was
    # at hand (the checkpoint job's proof to its witnesses then reads no tile again); chains with no tree root
    # in the last checkpoint have none.
    paths: dict[str, list[bytes]] = field(default_factory=dict)


def extend_trees(
    heads: Sequence[ChainHead], previous: Checkpoint | None, ledger: Ledger, tree_of: TreeOf, workers: int = 1
) -> Extended:
    """Check that ``heads`` extend ``previous`` (``extension``) and grow each chain's tree to its head.

    A chain at a time (``workers`` chains at once): its events since ``previous`` are read once, checked as they
    stream by, and only their leaf hashes (32 bytes an event) kept to grow its tree, so the job holds at most
    ``workers`` chains' new leaves, never the interval's events. A chain ``previous`` has no tree root for (a
    checkpoint from before the trees, or a new chain) is read whole, its leaves streamed into the tree.

    Every chain is checked, so every problem is named; once one is found, no tree starts to grow. Trees grown
    before (or beside) it are ahead of the last checkpoint, which is harmless: tiles are read only up to a
    checkpoint's size (``ChainTree``), and the next run grows them again from there.
    """
    before_of = {head.chain_id: head for head in previous.heads} if previous is not None else {}
    now = {head.chain_id: head for head in heads}
    refused = threading.Event()

    def extend(chain_id: str) -> tuple[str | None, ChainHead | None, list[bytes] | None]:
        before, head = before_of.get(chain_id), now.get(chain_id)
        leaves: list[bytes] = []
        if before is not None and previous is not None:
            keep = lambda event: leaves.append(_leaf(event))  # noqa: E731 - only the leaf hashes stay
            problem = chain_extension_problem(before, head, ledger, keep, previous.checkpoint_id)
            if problem is not None:
                refused.set()
                return problem, None, None
        if head is None or refused.is_set():
            return None, None, None
        return None, *_rooted(head, before, leaves, ledger, tree_of)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(extend, sorted(before_of.keys() | now.keys())))
    problems = [problem for problem, _, _ in done if problem is not None]
    if problems:
        return Extended([], problems)
    paths = {head.chain_id: path for _, head, path in done if head is not None and path is not None}
    return Extended([head for _, head, _ in done if head is not None], [], paths)


def _leaf(event: AuditEvent) -> bytes:
    """An event's leaf in its chain's tree."""
    return leaf_hash(bytes.fromhex(event.hash))


def _rooted(
    head: ChainHead, before: ChainHead | None, leaves: list[bytes], ledger: Ledger, tree_of: TreeOf
) -> tuple[ChainHead, list[bytes] | None]:
    """``head`` with its tree root (``before``'s when the chain did not move, else its tree grown by ``leaves``),
    and the consistency path from ``before``'s tree to it (None when ``before`` has no tree root)."""
    if before is not None and before.tree_root is not None and before.seq == head.seq:
        return head.model_copy(update={"tree_root": before.tree_root}), []
    hashes: Iterable[bytes]
    if before is not None and before.tree_root is not None:
        size, hashes = before.seq, leaves  # the extension check read every event since, and kept their leaves
    else:
        size, hashes = 0, (_leaf(event) for event in ledger.read_chain(head.chain_id, until_seq=head.seq))
    tree = tree_of(head.chain_id, size)
    tree.append(hashes)
    if tree.size != head.seq:
        raise ValueError(f"{head.chain_id}: {tree.size} events read, its head is at seq {head.seq}")
    path = consistency_proof_of(size, head.seq, tree.root_of) if size else None
    return head.model_copy(update={"tree_root": tree.root().hex()}), path
