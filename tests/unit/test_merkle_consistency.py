"""Consistency proofs and frontiers as RFC 6962 defines them: the published test vectors, and for every
pair of tree sizes a proof that verifies, which any change to a leaf, a node or a size breaks."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowledger.ledger.merkle import inclusion_path, leaf_hash, merkle_root, root_from_path
from flowledger.ledger.merkle_consistency import (
    InconsistentTrees,
    consistency_proof,
    inclusion_proof_of,
    multi_inclusion_proof_of,
    subtree_root,
    verify_consistency,
)
from tests.bundle_verifier import verifier as VERIFIER

h = bytes.fromhex
# The RFC 6962 test vectors of certificate-transparency (and Go's internal/tlog): eight leaves, each prefix's root.
LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
HASHED = [leaf_hash(h(leaf)) for leaf in LEAVES]
SIX_TO_EIGHT = [
    "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
]
TWO_TO_FIVE = [
    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
]


def test_the_published_vectors_are_produced_and_verified() -> None:
    for size in range(1, 9):
        assert subtree_root(HASHED[:size]).hex() == ROOTS[size - 1]
    assert [node.hex() for node in consistency_proof(6, HASHED)] == SIX_TO_EIGHT
    assert [node.hex() for node in consistency_proof(2, HASHED[:5])] == TWO_TO_FIVE
    verify_consistency(6, 8, h(ROOTS[5]), h(ROOTS[7]), [h(x) for x in SIX_TO_EIGHT])
    verify_consistency(2, 5, h(ROOTS[1]), h(ROOTS[4]), [h(x) for x in TWO_TO_FIVE])
    with pytest.raises(InconsistentTrees):
        verify_consistency(6, 8, h(ROOTS[4]), h(ROOTS[7]), [h(x) for x in SIX_TO_EIGHT])


leaf_lists = st.lists(st.binary(max_size=6), min_size=1, max_size=70)


@given(leaves=leaf_lists, data=st.data())
def test_every_prefix_is_proved_consistent_and_a_changed_tree_is_not(leaves: list[bytes], data: st.DataObject) -> None:
    hashed = [leaf_hash(leaf) for leaf in leaves]
    n = len(hashed)
    m = data.draw(st.integers(1, n))
    proof = consistency_proof(m, hashed)
    first, second = subtree_root(hashed[:m]), subtree_root(hashed)
    assert second == merkle_root(leaves)
    verify_consistency(m, n, first, second, proof)
    if m < n:
        # A leaf of the first tree changed in the second (history rewritten): no proof of it verifies.
        where = data.draw(st.integers(0, m - 1))
        rewritten = [*hashed[:where], leaf_hash(b"forged" + leaves[where]), *hashed[where + 1 :]]
        with pytest.raises(InconsistentTrees):
            verify_consistency(m, n, first, subtree_root(rewritten), consistency_proof(m, rewritten))
        with pytest.raises(InconsistentTrees):  # a proof with one node changed
            changed = data.draw(st.integers(0, len(proof) - 1))
            verify_consistency(m, n, first, second, [*proof[:changed], bytes(32), *proof[changed + 1 :]])
        with pytest.raises(InconsistentTrees):  # the proof, but the first tree's root is another's
            verify_consistency(m, n, subtree_root(rewritten[:m]), second, proof)


def test_from_an_empty_tree_anything_is_consistent_and_sizes_cannot_shrink() -> None:
    verify_consistency(0, 5, merkle_root([]), h(ROOTS[4]), [])
    with pytest.raises(InconsistentTrees):
        verify_consistency(5, 4, h(ROOTS[4]), h(ROOTS[3]), [])
    with pytest.raises(InconsistentTrees):
        verify_consistency(4, 4, h(ROOTS[3]), h(ROOTS[4]), [])


@given(leaves=leaf_lists, data=st.data())
def test_an_inclusion_path_from_subtree_roots_is_the_one_the_inclusion_proofs_use(
    leaves: list[bytes], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(leaves) - 1))
    hashed = [leaf_hash(leaf) for leaf in leaves]
    path = inclusion_proof_of(index, len(leaves), lambda start, end: subtree_root(hashed[start:end]))
    assert path == inclusion_path(index, leaves)
    assert root_from_path(index, len(leaves), leaves[index], path) == merkle_root(leaves)


root_from_leaves = VERIFIER.root_from_leaves  # the one reader of multi-leaf proofs


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=70), st.data())
def test_a_multi_leaf_proof_gives_the_root_for_any_set_of_leaves_and_nothing_else(
    leaves: list[bytes], data: st.DataObject
) -> None:
    hashed = [leaf_hash(leaf) for leaf in leaves]
    n = len(hashed)
    chosen = data.draw(st.sets(st.integers(0, n - 1), min_size=1))

    def root_of(start: int, end: int) -> bytes:
        assert not any(start <= i < end for i in chosen)  # never a subtree holding a proven leaf
        return subtree_root(hashed[start:end])

    nodes = multi_inclusion_proof_of(n, chosen, root_of)
    known = {i: hashed[i] for i in chosen}
    assert root_from_leaves(n, known, nodes) == merkle_root(leaves)
    assert len(nodes) <= len(chosen) * max(1, n.bit_length())  # at most one path a leaf, shared nodes once
    some = data.draw(st.sampled_from(sorted(chosen)))
    changed = {**known, some: leaf_hash(b"other" + leaves[some])}
    assert root_from_leaves(n, changed, nodes) != merkle_root(leaves)
    if nodes:
        with pytest.raises(VERIFIER.Invalid, match="too few"):
            root_from_leaves(n, known, nodes[:-1])
    with pytest.raises(VERIFIER.Invalid, match="no event needs"):
        root_from_leaves(n, known, [*nodes, hashed[0]])
    if len(chosen) > 1:  # a leaf left out: the nodes no longer fit, or lead elsewhere
        fewer = {i: v for i, v in known.items() if i != some}
        with contextlib.suppress(VERIFIER.Invalid):
            assert root_from_leaves(n, fewer, nodes) != merkle_root(leaves)
