"""Table-size-independent reads for moto's DynamoDB: a base-table Query reads its own partition.

moto answers a Query on a table by sorting every item of the table and then filtering on the partition
key, and its projection turns the whole item into JSON once per projected attribute. On a dev server
that has recorded a few thousand flows, reading one flow's steps (every close, every export line) then
costs time in proportion to all the steps ever written; DynamoDB's does not, and neither should the
fake's. This keeps moto's own Query (key conditions, paging, filters, projections) and narrows only the
items it starts from: a base-table Query with a partition key sees that partition (and sorts it, as ever),
and so does a Query of an index whose partition key is the table's (the steps' ``by_created``: its
partition holds only items of the table's partition). Other index queries and scans are left as moto
runs them.

moto also deep-copies every item a Query keeps, so that projecting them cannot change the stored
ones: a third of the time a 500-step page read takes. Here nothing a Query does to its results
writes to them (``Item.project`` below builds a new item, index projections call it, filters only
read, and the answer is written as JSON straight from them, :mod:`moto_responses`), so a Query's
results are the stored items themselves, in a list of their own. An index Query sorts its partition
by the index's keys on every page, comparing moto's attribute objects in Python; when those keys are
strings (the steps' ``created_at``), sorting by the strings themselves is the same order, several
times faster: a 20,000-step flow's first page no longer waits on it. And a Query weighs every item it
keeps against DynamoDB's 1 MB page twice, through ``Item.size``, which wraps each map value in a new
attribute object (and each list inside it again) before measuring it: two thirds of a 500-step page's
time in moto. :func:`item_size` measures the stored values as they are, to the same byte. Like
:mod:`moto_transactions`, installed by the locked server.
"""

from __future__ import annotations

import copy
import functools
import threading
from typing import Any

from botocore.utils import merge_dicts
from moto.dynamodb.models import table as table_module
from moto.dynamodb.models.dynamo_type import Item, serializer
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import bytesize, find_nested_key

_INSTALLED = False
_querying = threading.local()  # .partition: the hash key of the base-table Query running on this thread;
# .reading: a Query runs on this thread, so its results need no deep copy (see the module docstring)


class _CopyForQueries:
    """What moto's table module sees as ``copy``: the standard one, but a Query's results are not deep-copied."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        if getattr(_querying, "reading", False) and type(value) is list:
            return list(value)  # a list of its own: moto reassigns it, never the items in it
        return copy.deepcopy(value, memo)


def install() -> None:
    """Patch moto's Table.query, Table.all_items, Item.project, Item.size and its Query's copy (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    original_query, original_all_items, original_sorted_items = Table.query, Table.all_items, Table.sorted_items

    @functools.wraps(original_query)
    def query(self: Table, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        narrow = hash_key is not None and (index_name is None or _shares_partition(self, index_name))
        _querying.partition = (self, hash_key) if narrow else None
        _querying.reading = True
        _querying.sizes = {}  # id of a stored item -> its size, for this Query (it holds every item it weighs)
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            _querying.partition = None
            _querying.reading = False
            _querying.sizes = None

    @functools.wraps(original_all_items)
    def all_items(self: Table) -> list[Item]:
        narrowed = getattr(_querying, "partition", None)
        if narrowed is None or narrowed[0] is not self:
            return original_all_items(self)
        partition = self.items.get(narrowed[1])
        if partition is None:
            return []
        if not self.range_key_attr:
            return [partition]  # moto keeps a hash-only table's item bare
        return list(partition.values())  # Query sorts what it keeps by range key itself

    def project(self: Item, projection_expressions: list[list[str]]) -> Item:
        regular = self.to_regular_json()  # once, not once per projected attribute
        result: dict[str, Any] = {}
        for expression in projection_expressions:
            merge_dicts(result, find_nested_key(expression, regular))
        return Item(hash_key=self.hash_key, range_key=self.range_key, attrs=serializer.serialize(result)["M"])

    @functools.wraps(original_sorted_items)
    def sorted_items(
        self: Table, hash_key_attrs: list[str], range_key_attrs: list[str | None], items: list[Item]
    ) -> list[Item]:
        attributes = self._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
        keys = _string_keys(items, attributes)
        if keys is None:
            return original_sorted_items(self, hash_key_attrs, range_key_attrs, items)
        # moto orders by each attribute's cast value, a str for a string: the same order, and as stable.
        order = sorted(range(len(items)), key=keys.__getitem__)
        items[:] = [items[position] for position in order]
        return items

    Table.query, Table.all_items, Item.project = query, all_items, project  # type: ignore[method-assign]
    Table.sorted_items = sorted_items  # type: ignore[method-assign]
    Item.size = item_size  # type: ignore[method-assign,assignment]
    table_module.copy = _CopyForQueries()  # type: ignore[attr-defined,assignment]
    _INSTALLED = True


def _string_keys(items: list[Item], attributes: list[str]) -> list[tuple[str, ...]] | None:
    """Each item's sort key as plain strings; None when one of them is not a string (moto then sorts)."""
    keys = []
    for item in items:
        key = []
        for attribute in attributes:
            value = item.attrs.get(attribute)
            if value is None or value.type != "S":
                return None
            key.append(value.value)
        keys.append(tuple(key))
    return keys


def _shares_partition(table: Table, index_name: str) -> bool:
    """Whether the index's partition key is the table's own (so an index partition is within a table one)."""
    for index in [*table.indexes, *table.global_indexes]:
        if index.name == index_name:
            return [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"] == [table.hash_key_attr]
    return False


def item_size(item: Item) -> int:
    """The item's size as moto's ``Item.size`` counts it (names and values in bytes), without copying a value.

    A Query asks twice for each item it keeps: the second answer is the first, remembered for the Query.
    """
    sizes = getattr(_querying, "sizes", None)
    if sizes is not None and id(item) in sizes:
        return int(sizes[id(item)])
    size = sum(bytesize(name) + _value_size(value.type, value.value) for name, value in item.attrs.items())
    if sizes is not None:
        sizes[id(item)] = size
    return size


def _value_size(kind: str, value: Any) -> int:
    # What moto's DynamoType.size counts for each type: a list's elements and a map's values are attribute
    # objects already, a set's members bare values of the set's scalar type; BOOL and NULL count 1.
    if kind == "S":
        return bytesize(value)
    if kind == "N":
        return len(str(value))
    if kind == "M":
        return sum(bytesize(name) + _value_size(inner.type, inner.value) for name, inner in value.items())
    if kind == "L":
        return sum(_value_size(element.type, element.value) for element in value)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size(kind[0], member) for member in value)
    if isinstance(value, bool):
        return 1
    return bytesize(value)
