"""A chain's tiles in a dict, counting reads: for trees built in memory by the tests (a forger's, say)."""

from __future__ import annotations


class MemoryTiles:
    """A ``TileStore`` in memory."""

    def __init__(self) -> None:
        self.tiles: dict[tuple[int, int], list[bytes]] = {}
        self.reads = 0

    def get(self, level: int, index: int) -> list[bytes]:
        self.reads += 1
        return list(self.tiles.get((level, index), []))

    def put(self, level: int, index: int, hashes: list[bytes]) -> None:
        self.tiles[(level, index)] = list(hashes)
