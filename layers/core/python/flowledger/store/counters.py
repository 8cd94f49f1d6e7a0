"""Sharded counter items: totals a write keeps in its own transaction, read back in one request.

An observability read that counted rows would read every row per call. Instead, each audited write
that changes what is counted adds its deltas to one counter item, inside the same
``TransactWriteItems`` as the row it changes, so a count can never drift from the rows it counts.
The read is one strongly consistent ``BatchGetItem`` of the shards, whatever the number of rows.

The counters live in the table whose rows they count, under reserved keys (``#counts#00`` ..), so
a function that may write the rows may write their counters and needs no other grant. There are
``SHARDS`` of them and a write picks one by the row it changes (a hash of its key): one item taking
every write would cap the write rate near 1,000 a second in DynamoDB and make concurrent transactions
conflict on it, while a row's own writes all land on one shard, so its counter items are predictable.

Every counted write also adds 1 to its shard's ``writes``: a recount (``replace_items``) is
conditional on every shard's ``writes`` being as it read them, so a recount that raced a write
fails whole instead of losing that write.

Generic (no backlog or pathway knowledge); it belongs in ``flowledger.store`` beside the specs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SHARDS = 16
KEY_PREFIX = "#counts#"
WRITES = "writes"  # the attribute every counted write bumps (see ``replace_items``)


@dataclass(frozen=True)
class CounterRead:
    """The summed counters and, per shard key, its ``writes`` as read (None: the shard does not exist)."""

    totals: dict[str, int]
    writes: dict[str, int | None]


class ShardedCounters:
    def __init__(self, dynamodb: Any, table_name: str, key_attribute: str, shards: int = SHARDS) -> None:
        self._db = dynamodb
        self._table = table_name
        self._key = key_attribute
        self._shards = shards

    def shard_ids(self) -> list[str]:
        return [f"{KEY_PREFIX}{n:02d}" for n in range(self._shards)]

    def is_counter(self, key_value: str) -> bool:
        """True for a counter item's key: scans of the table pass these over."""
        return key_value.startswith(KEY_PREFIX)

    def shard_of(self, row_key: str) -> str:
        """The shard the writes of the row keyed ``row_key`` go to."""
        digest = hashlib.sha256(row_key.encode()).digest()
        return self.shard_ids()[int.from_bytes(digest[:4], "big") % self._shards]

    def update_item(self, deltas: Mapping[str, int], row_key: str) -> list[dict[str, Any]]:
        """The transaction item adding ``deltas`` to the row's shard; none when every delta is 0."""
        changed = {name: delta for name, delta in sorted(deltas.items()) if delta}
        if not changed:
            return []
        names = {f"#c{i}": name for i, name in enumerate(changed)} | {"#w": WRITES}
        values = {f":c{i}": {"N": str(delta)} for i, delta in enumerate(changed.values())} | {":one": {"N": "1"}}
        adds = ", ".join(f"#c{i} :c{i}" for i in range(len(changed)))
        shard = self.shard_of(row_key)
        return [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": {self._key: {"S": shard}},
                    "UpdateExpression": f"ADD {adds}, #w :one",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            }
        ]

    def read(self) -> CounterRead:
        """Every shard, summed: one strongly consistent BatchGetItem (retried only for unprocessed keys)."""
        totals: dict[str, int] = {}
        writes: dict[str, int | None] = dict.fromkeys(self.shard_ids())
        pending: dict[str, Any] = {
            self._table: {"Keys": [{self._key: {"S": s}} for s in self.shard_ids()], "ConsistentRead": True}
        }
        while pending:
            response = self._db.batch_get_item(RequestItems=pending)
            for item in response.get("Responses", {}).get(self._table, []):
                shard = item[self._key]["S"]
                for name, value in item.items():
                    if name == self._key or "N" not in value:
                        continue
                    if name == WRITES:
                        writes[shard] = int(value["N"])
                    else:
                        totals[name] = totals.get(name, 0) + int(value["N"])
            pending = response.get("UnprocessedKeys") or {}
        return CounterRead(totals, writes)

    def replace_items(self, totals: Mapping[str, int], seen: CounterRead) -> list[dict[str, Any]]:
        """Transaction items that set the counters to ``totals`` (kept in the first shard, the others emptied).

        Each put is conditional on its shard's ``writes`` being what ``seen`` read, and bumps it, so a
        counted write (or another recount) that committed since ``seen`` makes the transaction fail whole.
        """
        puts = []
        for index, shard in enumerate(self.shard_ids()):
            before = seen.writes.get(shard)
            item: dict[str, Any] = {self._key: {"S": shard}, WRITES: {"N": str((before or 0) + 1)}}
            if index == 0:
                item |= {name: {"N": str(value)} for name, value in sorted(totals.items()) if value}
            put: dict[str, Any] = {"TableName": self._table, "Item": item}
            if before is None:
                put["ConditionExpression"] = f"attribute_not_exists({WRITES})"
            else:
                put |= {
                    "ConditionExpression": "#w = :seen",
                    "ExpressionAttributeNames": {"#w": WRITES},
                    "ExpressionAttributeValues": {":seen": {"N": str(before)}},
                }
            puts.append({"Put": put})
        return puts
