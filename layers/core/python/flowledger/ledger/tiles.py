"""Each chain as an RFC 6962 tree over its event hashes, kept in tiles: any subtree root in a few reads.

The tree's leaves are a chain's event hashes in seq order (leaf ``i`` is the event at seq ``i + 1``,
hashed as a leaf: SHA-256(0x00 ‖ the 32 hash bytes)). Its nodes are kept as tlog-tiles and Tessera keep
them: a tile holds up to 256 hashes of one level, level 0 the leaf hashes, level ``L`` the roots of the
perfect subtrees of 256^L leaves, so tile ``(L, N)`` covers leaves ``[N·256^(L+1), (N+1)·256^(L+1))``.
A full tile never changes again; only the right edge of each level is rewritten as leaves arrive.

Tiles are derived data: they are not evidence and need no lock. A tile changed by someone who can write
the table gives proofs that fail, since every proof ends at a tree root a signed checkpoint recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from flowledger.ledger.merkle import node_hash
from flowledger.ledger.merkle_consistency import subtree_root

WIDTH = 256  # hashes a tile holds
HEIGHT = 8  # tree levels a tile spans: 2 ** HEIGHT == WIDTH
HASH_BYTES = 32


class TileStore(Protocol):
    """Where one chain's tiles live: the hashes of tile ``(level, index)``, empty if it has none yet."""

    def get(self, level: int, index: int) -> list[bytes]: ...

    def put(self, level: int, index: int, hashes: list[bytes]) -> None: ...


class ChainTree:
    """One chain's tree of ``size`` leaves over a tile store: its roots, and the appends that grow it."""

    def __init__(self, tiles: TileStore, size: int) -> None:
        self._tiles = tiles
        self.size = size
        self._cache: dict[tuple[int, int], list[bytes]] = {}

    def append(self, leaf_hashes: Iterable[bytes]) -> None:
        """Add leaves (already hashed as leaves) at the right edge, rewriting the edge tiles of each level."""
        changed: set[tuple[int, int]] = set()
        for leaf in leaf_hashes:
            self._add(0, self.size, leaf, changed)
            self.size += 1
        for level, index in sorted(changed):
            self._tiles.put(level, index, self._tile(level, index))

    def _add(self, level: int, position: int, node: bytes, changed: set[tuple[int, int]]) -> None:
        """Put ``node`` as entry ``position`` of ``level``; a tile it fills sends its root up a level."""
        index, offset = divmod(position, WIDTH)
        tile = self._tile(level, index)
        if len(tile) != offset:
            raise ValueError(f"tile {level}/{index} holds {len(tile)} hashes, not the {offset} its tree has")
        tile.append(node)
        changed.add((level, index))
        if len(tile) == WIDTH:
            self._add(level + 1, index, subtree_root(tile), changed)

    def _tile(self, level: int, index: int) -> list[bytes]:
        key = (level, index)
        if key not in self._cache:
            # Only the entries this tree's size holds: a run that wrote tiles and then failed before its
            # checkpoint left the edge ahead, and the next run grows the tree again from the checkpoint.
            held = max(0, min(WIDTH, (self.size >> (HEIGHT * level)) - index * WIDTH))
            self._cache[key] = list(self._tiles.get(level, index))[:held]
        return self._cache[key]

    def node(self, height: int, index: int) -> bytes:
        """The root of the perfect subtree of ``2**height`` leaves ``[index·2**height, (index+1)·2**height)``."""
        level, rest = divmod(height, HEIGHT)
        first = index << rest  # its entries at ``level``: 2**rest of them, inside one tile
        tile_index, offset = divmod(first, WIDTH)
        entries = self._tile(level, tile_index)[offset : offset + (1 << rest)]
        if len(entries) != 1 << rest:
            raise ValueError(f"the tree of {self.size} leaves has no full subtree {height}/{index}")
        return subtree_root(entries)

    def root_of(self, start: int, end: int) -> bytes:
        """MTH of leaves ``[start, end)`` (a range RFC 6962's recursions ask for: ``start`` aligned to its split)."""
        if not 0 <= start < end <= self.size:
            raise ValueError(f"no leaves [{start}, {end}) in a tree of {self.size}")
        subtrees = []
        position = start
        while position < end:
            height = (end - position).bit_length() - 1  # the largest perfect subtree that fits and is aligned
            while position % (1 << height):
                height -= 1
            subtrees.append(self.node(height, position >> height))
            position += 1 << height
        root = subtrees[-1]
        for left in reversed(subtrees[:-1]):
            root = node_hash(left, root)
        return root

    def root(self) -> bytes:
        """MTH of the whole tree."""
        return self.root_of(0, self.size)
