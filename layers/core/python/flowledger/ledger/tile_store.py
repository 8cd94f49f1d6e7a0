"""A chain's tiles in DynamoDB: one item per tile, keyed (chain_id, "LL/NNNNNNNNNNNN"), hashes as one binary."""

from __future__ import annotations

from typing import Any

from flowledger.ledger.tiles import HASH_BYTES, WIDTH


class DynamoTiles:
    """The tiles of chain ``chain_id`` in the ``ledger_tiles`` table (a ``TileStore``)."""

    def __init__(self, dynamodb: Any, table: str, chain_id: str) -> None:
        self._db = dynamodb
        self._table = table
        self._chain = chain_id

    def _key(self, level: int, index: int) -> dict[str, Any]:
        return {"chain_id": {"S": self._chain}, "tile": {"S": f"{level:02d}/{index:012d}"}}

    def get(self, level: int, index: int) -> list[bytes]:
        item = self._db.get_item(TableName=self._table, Key=self._key(level, index), ConsistentRead=True).get("Item")
        if item is None:
            return []
        raw = bytes(item["hashes"]["B"])
        if len(raw) % HASH_BYTES or len(raw) > WIDTH * HASH_BYTES:
            raise ValueError(f"tile {level}/{index} of {self._chain} is not a whole number of hashes")
        return [raw[i : i + HASH_BYTES] for i in range(0, len(raw), HASH_BYTES)]

    def put(self, level: int, index: int, hashes: list[bytes]) -> None:
        self._db.put_item(TableName=self._table, Item={**self._key(level, index), "hashes": {"B": b"".join(hashes)}})
