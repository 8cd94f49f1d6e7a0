"""RFC 6962 / RFC 9162 consistency proofs, and proofs from any source of subtree roots (stored tiles).

A consistency proof shows that the tree of ``n`` leaves extends the tree of its first ``m``: the first
``m`` leaves are the same, so nothing was changed or removed, only appended. It is O(log n) hashes,
however many leaves came between.

Leaves and nodes hash as in :mod:`flowledger.ledger.merkle` (0x00 and 0x01 prefixes); a "leaf hash" here
is ``leaf_hash(data)``, already hashed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence

from flowledger.ledger.merkle import node_hash, split


class InconsistentTrees(ValueError):
    """The proof does not show that the second tree extends the first; the message says which check failed."""


def subtree_root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over leaves given by their leaf hashes (RFC 6962 section 2.1)."""
    if len(leaf_hashes) == 1:
        return leaf_hashes[0]
    k = split(len(leaf_hashes))
    return node_hash(subtree_root(leaf_hashes[:k]), subtree_root(leaf_hashes[k:]))


RootOf = Callable[[int, int], bytes]  # MTH of the leaves [start, end): from a list, or from stored subtrees


def consistency_proof(m: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 6962 section 2.1.2, for 0 < m <= n = len(leaf_hashes)."""
    return consistency_proof_of(m, len(leaf_hashes), lambda start, end: subtree_root(leaf_hashes[start:end]))


def consistency_proof_of(m: int, n: int, root_of: RootOf) -> list[bytes]:
    """PROOF(m, D[n]) from any source of subtree roots: O(log n) calls of ``root_of``, none over D[0:m]'s leaves."""
    if not 0 < m <= n:
        raise ValueError(f"a consistency proof is from 1 to {n} leaves, not from {m}")
    return _subproof(m, 0, n, True, root_of)


def _subproof(m: int, start: int, end: int, whole: bool, root_of: RootOf) -> list[bytes]:
    n = end - start
    if m == n:
        return [] if whole else [root_of(start, end)]
    k = split(n)
    if m <= k:
        return [*_subproof(m, start, start + k, whole, root_of), root_of(start + k, end)]
    return [*_subproof(m - k, start + k, end, False, root_of), root_of(start, start + k)]


def inclusion_proof_of(index: int, n: int, root_of: RootOf) -> list[bytes]:
    """PATH(index, D[n]) of RFC 6962 section 2.1.1 from any source of subtree roots (leaf to root)."""
    if not 0 <= index < n:
        raise ValueError(f"leaf {index} is outside a tree of {n}")
    path: list[bytes] = []
    start, end = 0, n
    while end - start > 1:
        k = split(end - start)
        if index < start + k:
            path.append(root_of(start + k, end))
            end = start + k
        else:
            path.append(root_of(start, start + k))
            start += k
    return path[::-1]


def multi_inclusion_proof_of(n: int, indexes: Collection[int], root_of: RootOf) -> list[bytes]:
    """The subtree roots that, with the leaves at ``indexes``, give the root of a tree of ``n``.

    One proof for many leaves: RFC 6962's recursion walked left subtree first, and each subtree with none
    of the leaves in it given by its root (``root_from_leaves`` in ``tools/verify_bundle.py`` walks the same
    way). Leaves written close together share every node above them: 50 neighbouring events cost about one.
    """
    wanted = sorted(set(indexes))
    if not wanted or wanted[0] < 0 or wanted[-1] >= n:
        raise ValueError(f"leaves {wanted[:1]}..{wanted[-1:]} are not inside a tree of {n}")
    nodes: list[bytes] = []

    def walk(start: int, end: int) -> None:
        if bisect_left(wanted, start) == bisect_left(wanted, end):
            nodes.append(root_of(start, end))
        elif end - start > 1:
            k = split(end - start)
            walk(start, start + k)
            walk(start + k, end)

    walk(0, n)
    return nodes


def verify_consistency(m: int, n: int, first: bytes, second: bytes, proof: Sequence[bytes]) -> None:
    """Raise ``InconsistentTrees`` unless ``proof`` shows the tree (n, second) extends the tree (m, first).

    RFC 9162 section 2.1.4.2. A tree of 0 leaves is extended by any tree (an empty proof).
    """
    if not 0 <= m <= n:
        raise InconsistentTrees(f"a tree of {m} leaves cannot be extended by one of {n}")
    if m == 0:
        if proof:
            raise InconsistentTrees("from an empty tree the proof is empty")
        return
    if m == n:
        if proof:
            raise InconsistentTrees("between trees of the same size the proof is empty")
        if first != second:
            raise InconsistentTrees("two trees of the same size have different roots")
        return
    path = [first, *proof] if m & (m - 1) == 0 else list(proof)  # m a power of two: its root is a node
    if not path:
        raise InconsistentTrees("the proof is empty")
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for node in path[1:]:
        if sn == 0:
            raise InconsistentTrees("the proof is longer than the trees allow")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(node, fr), node_hash(node, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, node)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise InconsistentTrees("the proof is shorter than the trees need")
    if fr != first:
        raise InconsistentTrees("the proof does not lead to the first tree's root")
    if sr != second:
        raise InconsistentTrees("the proof does not lead to the second tree's root")
