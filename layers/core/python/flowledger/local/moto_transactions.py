"""Item-level rollback for moto's ``TransactWriteItems``.

moto makes a transaction atomic by deep-copying every table it touches before it starts (once per
item), so each transaction costs time in proportion to all the data in those tables: on a dev
server or in a test with a few thousand rows and audit events, an audited write takes tens of
milliseconds and grows without bound. DynamoDB's cost does not depend on table size, so neither
should the fake's. This keeps moto's own transaction code (conditions, cancellation reasons) and
replaces only its table copies with copies of the items the transaction names, restored if it
fails. It needs the locked server: like moto's own rollback, it assumes no request runs alongside.
"""

from __future__ import annotations

import copy
import functools
import types
from typing import Any

from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table

_INSTALLED = False
Snapshot = tuple[Table, DynamoType, DynamoType | None, Item | None]


def _deepcopy_except_tables(value: Any, memo: dict[int, Any] | None = None) -> Any:
    # moto deep-copies a Table only to roll a failed transaction back, which _snapshots does instead.
    return value if isinstance(value, Table) else copy.deepcopy(value, memo)


def _snapshots(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> list[Snapshot]:
    taken: list[Snapshot] = []
    for entry in transact_items:
        _, operation = next(iter(entry.items()))
        table = backend.tables.get(operation.get("TableName", ""))
        if table is None:
            continue  # moto reports the missing table itself
        key = operation.get("Key") or operation.get("Item") or {}
        if table.hash_key_attr not in key or (table.range_key_attr and table.range_key_attr not in key):
            continue  # moto rejects the malformed key before writing anything
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        taken.append((table, hash_value, range_value, copy.deepcopy(table.get_item(hash_value, range_value))))
    return taken


def put_stored(table: Table, hash_value: Any, range_value: Any, item: Item | None) -> None:
    """Make ``item`` the one moto stores under the key (None: none), past moto's own write path."""
    # moto keeps {hash: Item} for a table without a sort key, {hash: {range: Item}} with one.
    stored: dict[Any, Any] = table.items
    if range_value is not None:
        stored = stored.setdefault(hash_value, {})
    key = hash_value if range_value is None else range_value
    if item is None:
        stored.pop(key, None)
    else:
        stored[key] = item


def _restore(snapshots: list[Snapshot]) -> None:
    for table, hash_value, range_value, item in reversed(snapshots):
        put_stored(table, hash_value, range_value, item)


def install() -> None:
    """Patch moto's DynamoDB backend (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    dynamodb_models.copy = types.SimpleNamespace(deepcopy=_deepcopy_except_tables)  # type: ignore[attr-defined,assignment]
    original = DynamoDBBackend.transact_write_items

    @functools.wraps(original)
    def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        snapshots = _snapshots(self, transact_items)
        try:
            original(self, transact_items)
        except Exception:
            _restore(snapshots)
            raise

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    _INSTALLED = True
