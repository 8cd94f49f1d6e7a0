"""A chain's tree kept in tiles gives the same roots and proofs as the tree over all its leaves, grown in any
batches, across tile levels, reading a few tiles per answer."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowledger.ledger.merkle import leaf_hash
from flowledger.ledger.merkle_consistency import (
    consistency_proof,
    consistency_proof_of,
    inclusion_proof_of,
    subtree_root,
)
from flowledger.ledger.tiles import ChainTree
from tests.memory_tiles import MemoryTiles


def leaves(count: int) -> list[bytes]:
    return [leaf_hash(hashlib.sha256(str(i).encode()).digest()) for i in range(count)]


def grown(hashed: list[bytes], batches: list[int]) -> tuple[ChainTree, MemoryTiles]:
    """A tree appended to in batches of these sizes (the rest at the end), reopened from its tiles each time."""
    tiles = MemoryTiles()
    size = 0
    for batch in [*batches, len(hashed)]:
        batch = min(batch, len(hashed) - size)
        ChainTree(tiles, size).append(hashed[size : size + batch])
        size += batch
    return ChainTree(tiles, size), tiles


@settings(max_examples=60)
@given(count=st.integers(1, 700), batches=st.lists(st.integers(1, 300), max_size=5), data=st.data())
def test_roots_and_proofs_from_tiles_are_the_full_trees(count: int, batches: list[int], data: st.DataObject) -> None:
    hashed = leaves(count)
    tree, _ = grown(hashed, batches)
    assert tree.size == count and tree.root() == subtree_root(hashed)
    m = data.draw(st.integers(1, count))
    assert consistency_proof_of(m, count, tree.root_of) == consistency_proof(m, hashed)
    assert ChainTree(tree._tiles, m).root() == subtree_root(hashed[:m])  # an older size, from the same tiles
    index = data.draw(st.integers(0, count - 1))
    expected = inclusion_proof_of(index, count, lambda a, b: subtree_root(hashed[a:b]))
    assert inclusion_proof_of(index, count, tree.root_of) == expected


def test_a_tree_past_two_tile_levels_reads_a_few_tiles_per_proof() -> None:
    count = 256 * 256 + 300  # level 2 has an entry
    hashed = leaves(count)
    tree, tiles = grown(hashed, [1000, 65_000])
    assert tiles.tiles[(2, 0)] == [subtree_root(hashed[: 256 * 256])]
    assert tree.root() == subtree_root(hashed)
    reader = ChainTree(tiles, count)
    tiles.reads = 0
    proof = consistency_proof_of(70, count, reader.root_of)
    assert proof == consistency_proof(70, hashed)
    assert tiles.reads <= 8  # tiles, not leaves: the proof spans 65,836 leaves


def test_a_tree_reopened_at_its_checkpointed_size_ignores_what_a_failed_run_wrote_past_it() -> None:
    hashed = leaves(300)
    _, tiles = grown(hashed, [])  # tiles for 300 leaves, but the checkpoint said 257
    again = ChainTree(tiles, 257)
    other = [leaf_hash(b"another leaf")]
    again.append(other)
    assert ChainTree(tiles, 258).root() == subtree_root([*hashed[:257], *other])
    with pytest.raises(ValueError, match="no leaves"):
        again.root_of(0, 259)
